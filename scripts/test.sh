#!/usr/bin/env bash
# The test command of the README: sets up what the tests need, then runs every check.
#
#   scripts/test.sh            formatting, lints, all tests, a short fuzz run
#   PALISADE_FUZZ_SECONDS=0    skip the fuzz run (e.g. while iterating locally)
#   SETUP_ONLY=1               only install and set up (system packages, venv, npm packages)
#
# Works on a fresh machine with the Rust toolchain: it installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says how long the run has taken so far, so a slow step shows in CI's log.
say() { printf '\n==> %s (%ds)\n' "$*" "$SECONDS"; }

# System packages the tests need. Installed only when missing and only as root (CI and the
# development machines are root; elsewhere the script says what to install).
need_pkgs=()
command -v cc >/dev/null 2>&1 || need_pkgs+=(build-essential)   # libfuzzer-sys builds C++
command -v kill >/dev/null 2>&1 || need_pkgs+=(procps)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)              # the demo test runs its curl lines
command -v unshare >/dev/null 2>&1 || need_pkgs+=(util-linux)     # unshare, nsenter: store-failure test
command -v ip >/dev/null 2>&1 || need_pkgs+=(iproute2)            # loopback in the MCP test's network namespace
command -v npm >/dev/null 2>&1 || need_pkgs+=(nodejs npm)         # the TypeScript SDK's server-everything
command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)           # the console's browser test
command -v chromedriver >/dev/null 2>&1 || need_pkgs+=(chromium-driver)  # (tests/it/console.rs)
command -v podman >/dev/null 2>&1 || need_pkgs+=(podman runc)       # the image, run (tests/it/image.rs)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_pkgs+=(postgresql)  # tests/postgres.rs starts a throw-away cluster
if [ ${#need_pkgs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    say "installing ${need_pkgs[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_pkgs[@]}"
  else
    echo "missing system packages: ${need_pkgs[*]} (install them, then re-run)" >&2
    exit 1
  fi
fi

# The MCP tests run the official MCP Python SDK as server and client (tests/mcp/), and the
# chart checks Helm's engine and the Kubernetes schemas (tests/k8s/), from a
# venv under target/ made once per requirements file.
#
# The venv itself lives in this machine's cache, one per requirements file, and target/pyenv
# points at it: a clean clone (CI's) then finds it made, as it finds mdbook in cargo's bin
# directory, instead of spending half a minute installing the same wheels again. A machine
# without it (or without a writable cache) makes it, as before.
command -v python3 >/dev/null 2>&1 || { echo "python3 is needed for the MCP tests" >&2; exit 1; }
want=$(sha256sum tests/requirements.txt | cut -c1-64)
cache="${PALISADE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/palisade}"
venv="$cache/pyenv-${want:0:16}"
if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
  venv="$PWD/target/pyenv-local"
fi
mkdir -p target
if [ "$(readlink target/pyenv 2>/dev/null)" != "$venv" ]; then
  rm -rf target/pyenv
  ln -s "$venv" target/pyenv
fi
if [ "$(cat "$venv/.requirements" 2>/dev/null)" != "$want" ]; then
  say "python venv for the MCP tests ($venv)"
  rm -rf "$venv"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
      python3 -m venv "$venv"
    else
      echo "python3 -m venv failed: install python3-venv, then re-run" >&2
      exit 1
    fi
  fi
  "$venv/bin/pip" install -q --disable-pip-version-check -r tests/requirements.txt
  echo "$want" > "$venv/.requirements"
fi

# The TypeScript SDK's example server (tests/mcp/package.json), installed once per version.
node_dir=target/node
want=$(cat tests/mcp/package.json tests/mcp/package-lock.json | sha256sum | cut -c1-64)
if [ "$(cat "$node_dir/.package" 2>/dev/null)" != "$want" ]; then
  say "npm packages for the MCP tests ($node_dir)"
  rm -rf "$node_dir" && mkdir -p "$node_dir"
  cp tests/mcp/package.json tests/mcp/package-lock.json "$node_dir/"
  npm ci --prefix "$node_dir" --no-audit --no-fund --silent
  echo "$want" > "$node_dir/.package"
fi

# The book (book.toml, docs/): mdBook from crates.io, built once into cargo's bin directory
# (no server or file watcher: only `mdbook build` is used). tests/it/book.rs builds the book
# and checks its links.
if ! mdbook --version 2>/dev/null | grep -q 'v0\.5\.4'; then
  say "mdbook 0.5.4 (cargo install, once)"
  cargo install --quiet --locked mdbook --version 0.5.4 --no-default-features --features search
fi

# SETUP_ONLY=1: stop here (benches/mcp/run uses the venv this makes).
[ "${SETUP_ONLY:-0}" = 1 ] && exit 0

say "cargo fmt --check"
cargo fmt --all -- --check

say "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

# Most integration tests wait on processes they started (the sidecar, SDKs, a browser), so
# four at a time keep this 2-core machine busy: the `it` binary takes 82 s instead of 110.
say "cargo test"
test_log=$(mktemp)
trap 'rm -f "$test_log"' EXIT
cargo test --workspace --locked -- --test-threads=4 2>&1 | tee "$test_log"

# On one CPU the sidecar runs a current-thread runtime (cli/operate.rs); this machine has more,
# so the data-plane, enforcement and admission tests run again in that shape. `--workspace`,
# as above: with `-p palisade` cargo resolves features for that package alone and builds 18
# crates and the test binary a second time.
say "cargo test (current-thread runtime)"
PALISADE_RUNTIME=current_thread cargo test --locked --workspace --test it -- dataplane:: enforce:: \
  bypass:: admission:: 2>&1 | tee -a "$test_log"

fuzz_seconds="${PALISADE_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" != 0 ]; then
  say "fuzz targets (${fuzz_seconds}s each)"
  scripts/fuzz.sh --smoke "$fuzz_seconds"
fi
say "all checks passed"
# One closing line with the totals of every cargo test binary (unit, property, vector and
# integration tests), so the last line of the run says how many tests ran.
awk '/^test result:/ { p += $4; f += $6 } END { printf "tests: %d passed, %d failed\n", p, f }' "$test_log"
