#!/usr/bin/env bash
# Builds and runs every cargo-fuzz target of policy/fuzz for N seconds each (default 60).
#
# The toolchain here is stable. cargo-fuzz needs nightly flags (-Z...), which a stable rustc
# accepts under RUSTC_BOOTSTRAP=1; the sanitizer is off because the fuzzed code has no unsafe
# (`#![forbid(unsafe_code)]`): what we look for is panics, which libFuzzer reports as crashes.
set -euo pipefail
cd "$(dirname "$0")/../policy/fuzz"
seconds="${1:-60}"
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --version 0.13.2
fi
export RUSTC_BOOTSTRAP=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for target in $(cargo fuzz list); do
  echo "fuzz: $target for ${seconds}s"
  if ! cargo fuzz run --sanitizer none "$target" -- -max_total_time="$seconds" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target found a crash (input saved under policy/fuzz/artifacts/$target)" >&2
    exit 1
  fi
  grep -E '^Done' "$log"
done
