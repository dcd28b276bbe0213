#!/usr/bin/env bash
# Makes throwaway development certificates: a CA, a server certificate (localhost, 127.0.0.1)
# and a client certificate. For local testing only.
set -euo pipefail
out="${1:?usage: gen-dev-certs.sh DIR}"
mkdir -p "$out" && cd "$out"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
  -subj "/CN=palisade dev CA" -keyout ca.key -out ca.crt 2>/dev/null
issue() { # name cn eku san
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$2" \
    -keyout "$1.key" -out "$1.csr" 2>/dev/null
  printf 'extendedKeyUsage=%s\n%s\n' "$3" "$4" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 30 \
    -extfile "$1.ext" -out "$1.crt" 2>/dev/null
  rm -f "$1.csr" "$1.ext"
}
issue server localhost serverAuth "subjectAltName=DNS:localhost,IP:127.0.0.1"
issue client agent-1 clientAuth ""
chmod 600 ./*.key
echo "wrote $(pwd)/{ca,server,client}.{crt,key}"
