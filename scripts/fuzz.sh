#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target of policy/fuzz for N seconds each (default 60).
#
# The toolchain here is stable. cargo-fuzz needs nightly flags (-Z...), which a stable rustc
# accepts under RUSTC_BOOTSTRAP=1; the sanitizer is off because the fuzzed code has no unsafe
# (`#![forbid(unsafe_code)]`): what we look for is panics, which libFuzzer reports as crashes.
#
# The targets are built once, then run side by side, one per CPU: libFuzzer is single-threaded,
# so each still gets N seconds of a core of its own, and CI waits N × targets / CPUs seconds
# instead of N × targets.
#
#   scripts/fuzz.sh [N]           the `release` build (opt-level 1), each target N seconds
#   scripts/fuzz.sh --smoke [N]   the `dev` build, which takes half as long to build from
#                                 nothing and runs 3-7x fewer inputs a second: CI's short run
#                                 (policy/fuzz/Cargo.toml says which crates it optimises)
set -euo pipefail
cd "$(dirname "$0")/../policy/fuzz"
build=()
if [ "${1:-}" = --smoke ]; then
  build=(--dev)
  shift
fi
seconds="${1:-60}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
cargo fuzz build "${build[@]}" --sanitizer none
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cpus=$(nproc 2>/dev/null || echo 1)
targets=$(cargo fuzz list)
for target in $targets; do
  while [ "$(jobs -rp | wc -l)" -ge "$cpus" ]; do wait -n || true; done
  echo "fuzz: $target for ${seconds}s"
  ( cargo fuzz run "${build[@]}" --sanitizer none "$target" -- -max_total_time="$seconds" \
      >"$logs/$target.log" 2>&1 && touch "$logs/$target.ok" ) &
done
wait
failed=0
for target in $targets; do
  if [ -e "$logs/$target.ok" ]; then
    echo "fuzz: $target: $(grep -E '^Done' "$logs/$target.log")"
  else
    tail -n 60 "$logs/$target.log"
    echo "fuzz: $target found a crash (input saved under policy/fuzz/artifacts/$target)" >&2
    failed=1
  fi
done
exit "$failed"
