#!/usr/bin/env bash
# Builds the palisade image with podman on a machine with no registry and no daemon.
#
#   deploy/build-image.sh [TAG]         builds target/release/palisade, then the image
#   BINARY=path/to/palisade             use that binary instead (the tests pass theirs)
#   BASE=registry/image                 a runtime base that can be pulled (default: one made
#                                       here, see below)
#
# With no BASE, a minimal base is made from this machine's own files, FROM scratch in
# effect: the dynamic loader and the C libraries the binary links (ldd), the CA bundle,
# /etc/passwd and /etc/group with the non-root user 65532, an empty /tmp. No shell, no package
# manager — what distroless's cc image holds, from Debian's packages on this host. It is
# imported with `podman import` as localhost/palisade-base.
#
# podman runs rootless or as root, with runc (PODMAN_RUNTIME=/usr/sbin/runc by default when
# present: crun fails on hosts with hybrid cgroups) and cgroupfs. Prints the image's name and
# size.
set -euo pipefail
cd "$(dirname "$0")/.."
podman_() {
  local rt=()
  if [ -x /usr/sbin/runc ]; then rt=(--runtime "${PODMAN_RUNTIME:-/usr/sbin/runc}"); fi
  podman "${rt[@]}" --cgroup-manager="${PODMAN_CGROUP_MANAGER:-cgroupfs}" "$@"
}
# Containers on this kind of host need no ulimits set (their defaults fail here).
if [ -z "${CONTAINERS_CONF:-}" ]; then
  conf=$(mktemp); printf '[containers]\ndefault_ulimits = []\n' > "$conf"
  export CONTAINERS_CONF="$conf"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

binary="${BINARY:-}"
if [ -z "$binary" ]; then
  cargo build --release --locked -p palisade --bin palisade >&2
  binary=target/release/palisade
fi
TAG="${1:-localhost/palisade:$("$binary" --version | awk '{print $2}')}"
mkdir -p "$work/ctx"
cp "$binary" "$work/ctx/palisade"
strip "$work/ctx/palisade" 2>/dev/null || true

base="${BASE:-}"
if [ -z "$base" ]; then
  root="$work/rootfs"
  mkdir -p "$root/etc/ssl/certs" "$root/tmp" "$root/home/nonroot"
  chmod 1777 "$root/tmp"
  # The loader and every library the binary links, at the paths it names them by.
  for lib in $(ldd "$work/ctx/palisade" | awk '/=>/ { print $3 } !/=>/ && $1 ~ /^\// { print $1 }'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
  [ -f /etc/ssl/certs/ca-certificates.crt ] && cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' > "$root/etc/group"
  chown 65532:65532 "$root/home/nonroot" 2>/dev/null || true
  tar -C "$root" -cf "$work/base.tar" .
  podman_ import -q "$work/base.tar" localhost/palisade-base:local >/dev/null
  base=localhost/palisade-base:local
fi
old=$(podman_ image inspect "$TAG" --format '{{.Id}}' 2>/dev/null || true)
podman_ build -q --build-arg "BASE=$base" -f deploy/Containerfile.prebuilt -t "$TAG" "$work/ctx" >/dev/null
# The image this tag named before is left dangling by the rebuild: remove it (unless a
# container still uses it), so that repeated builds do not fill the disk.
new=$(podman_ image inspect "$TAG" --format '{{.Id}}')
if [ -n "$old" ] && [ "$old" != "$new" ]; then podman_ rmi "$old" >/dev/null 2>&1 || true; fi
echo "$TAG $(podman_ image inspect "$TAG" --format '{{.Size}}') bytes"
