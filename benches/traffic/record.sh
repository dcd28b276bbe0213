#!/usr/bin/env bash
# Re-records the HAR files in benches/traffic/ with a real recorder: mitmproxy (mitmdump as a
# reverse proxy, --set hardump=FILE), the way ../shared/testdata/mcp/SOURCE.txt describes.
#
#   benches/traffic/record.sh         both recordings
#
# erp.har  the sample SoR (proxy/examples/sample_sor.rs) behind mitmdump, driven by
#          erp_traffic.py: 20 seeding POSTs, then 400 requests 20 ms apart, 80 % reads.
# mcp.har  tests/mcp/server.py (official MCP Python SDK) behind mitmdump, driven by
#          tests/mcp/client.py in both protocol generations: discover/initialize, tools/list,
#          a read tool call and a write tool call (no lease: the recording is of the server).
# Installs mitmproxy 11.0.2 and the MCP SDK into venvs under target/ when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=benches/traffic
[ -x target/mitmenv/bin/mitmdump ] || { python3 -m venv target/mitmenv && target/mitmenv/bin/pip install -q mitmproxy==11.0.2; }
[ -x target/pyenv/bin/python ] || { python3 -m venv target/pyenv && target/pyenv/bin/pip install -q -r tests/mcp/requirements.txt; }
cargo build --release --locked -p palisade --example sample_sor >/dev/null
tmp=$(mktemp -d); pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; echo "port $1 never opened" >&2; exit 1; }

# ERP
target/release/examples/sample_sor 18301 "$tmp/inventory.json" & pids+=($!)
wait_port 18301
target/mitmenv/bin/mitmdump -q --mode reverse:http://127.0.0.1:18301 -p 18302 --set hardump="$PWD/$out/erp.har" & mitm=$!; pids+=($mitm)
wait_port 18302
python3 benches/traffic/erp_traffic.py http://127.0.0.1:18302 400
kill -INT "$mitm"; wait "$mitm" || true

# MCP
target/pyenv/bin/python tests/mcp/server.py 18311 "$tmp/exec.log" >/dev/null 2>&1 & pids+=($!)
wait_port 18311
target/mitmenv/bin/mitmdump -q --mode reverse:http://127.0.0.1:18311 -p 18312 --set hardump="$PWD/$out/mcp.har" & mitm=$!; pids+=($mitm)
wait_port 18312
steps='[{"op":"list"},{"op":"call","name":"add","args":{"a":2,"b":3}},{"op":"call","name":"set_stock","args":{"sku":"SKU-1","qty":4}}]'
for mode in 2026-07-28 legacy; do
  echo "$steps" | target/pyenv/bin/python tests/mcp/client.py http://127.0.0.1:18312/mcp "$mode" >/dev/null
done
kill -INT "$mitm"; wait "$mitm" || true
ls -l "$out"/*.har
