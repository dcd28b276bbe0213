#!/usr/bin/env python3
"""Measures the layout targets of issue 55 (README, "Layout"): run from the repository root.

    python3 scripts/layout-metrics.py           the figures, one per line
    python3 scripts/layout-metrics.py --list    and what each figure counts, by place

What is counted, and how (a reading of the source text, not of the compiler's view; good
enough to move a figure and to see what moved it):
- functions with 7 or more parameters (`self` counted, as clippy counts) outside tests: every `fn` in
  `proxy/src` and `policy/**/src` except files named `tests.rs`, files under a `tests/`
  directory and what follows `#[cfg(test)]` in a file;
- `AppState` parameters: parameters typed `&AppState`, `Arc<AppState>` or `&Arc<AppState>`;
  "below a stage's entry": those outside ENTRIES, the functions that receive a request or a
  reload before any stage has it (the server, the pipeline's routing and dispatch, the SoR
  stage, the admin API, reload and the issuers' keys watch). A stage's handlers take the
  request's `Call`; what they call takes narrow handles (`Plane`, `Recorder`, `Gate`, ...);
- Rust files over 450 lines: source files measured before their `#[cfg(test)]` module (as
  tests/it/architecture.rs does), test files whole;
- methods of each trait in `proxy/store/src/` (`palisade-store`);
- refusal construction sites: calls that build a problem document or a JSON-RPC error
  (any `Problem::` constructor, `jsonrpc::error_response`/`error_doc`, `Refused::into_rpc`)
  in `proxy/src` outside the modules that render them (`net/problem.rs`, `net/jsonrpc.rs`, `enforce/receipts.rs`);
- `sleep(` calls in the Rust tests (`tests/`).
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(".")
RENDERERS = {
    "proxy/src/net/problem.rs",
    "proxy/src/net/jsonrpc.rs",
    "proxy/src/enforce/receipts.rs",
    "proxy/src/enforce/own.rs",
}


# Where the server's whole state may still be a parameter: the entries (see the docstring).
ENTRIES = {
    "proxy/src/server/accept.rs": {"http_builder", "serve_connection", "serve_http"},
    "proxy/src/pipeline/mod.rs": {"handle", "stage", "route_of", "aip_route", "own"},
    "proxy/src/rcns/mod.rs": {"route"},
    "proxy/src/pipeline/sor.rs": {"answer"},
    "proxy/src/control/admin.rs": {"serve", "respond"},
    "proxy/src/control/reload.rs": {"reload", "spawn_triggers"},
    "proxy/src/admission/jwks.rs": {"reload", "spawn_watch"},
    "proxy/src/admission/jwks_url.rs": {"spawn"},
}


def rust_sources():
    for base in ["proxy/src", "proxy/store/src", "policy"]:
        for p in sorted(ROOT.glob(f"{base}/**/*.rs")):
            s = str(p)
            if "/fuzz/" in s or "/target/" in s or "/benches/" in s:
                continue
            if p.name == "tests.rs" or "/tests/" in s:
                continue
            yield p


def without_tests(text):
    """The text before the first `#[cfg(test)]` (test modules sit at the end of a file)."""
    i = text.find("#[cfg(test)]")
    return text if i < 0 else text[:i]


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def params_of(text, start):
    """The parameter list starting at the `(` at `start`, split at top-level commas."""
    depth, i, cur, out = 0, start, [], []
    while i < len(text):
        c = text[i]
        if c in "([{<":
            depth += 1
            if depth == 1:
                i += 1
                continue
        elif c in ")]}>":
            if c == ">" and text[i - 1] == "-":
                cur.append(c)
                i += 1
                continue
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and c == ",":
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    last = "".join(cur).strip()
    if last:
        out.append(last)
    return [p for p in out if p]


FN = re.compile(r"\bfn\s+(\w+)\s*(<[^(]*?>)?\s*\(")


def functions():
    for p in rust_sources():
        text = strip_comments(without_tests(p.read_text()))
        for m in FN.finditer(text):
            params = params_of(text, m.end() - 1)
            line = text.count("\n", 0, m.start()) + 1
            yield p, line, m.group(1), params


def main():
    listing = "--list" in sys.argv
    many, appstate = [], []
    for p, line, name, params in functions():
        if len(params) >= 7:
            many.append(f"{p}:{line} {name} ({len(params)})")
        for x in params:
            if re.search(r":\s*&?\s*(Arc<\s*)?AppState\b", x):
                entry = name in ENTRIES.get(str(p), ())
                appstate.append(f"{p}:{line} {name}" + (" (entry)" if entry else ""))

    long_src, long_tests = [], []
    for p in sorted(ROOT.glob("**/*.rs")):
        if "target" in p.parts or ".git" in p.parts:
            continue
        text = p.read_text()
        is_test = p.name == "tests.rs" or str(p).startswith("tests/") or "/tests/" in str(p)
        # A source file is measured before its test module, as tests/it/architecture.rs does.
        n = len((text if is_test else without_tests(text)).splitlines())
        if n > 450:
            (long_tests if is_test else long_src).append(f"{p} ({n})")

    traits = []
    for p in sorted(ROOT.glob("proxy/store/src/**/*.rs")):
        text = strip_comments(p.read_text())
        for m in re.finditer(r"pub(?:\([^)]*\))?\s+trait\s+(\w+)[^{]*\{", text):
            depth, i = 1, m.end()
            while i < len(text) and depth:
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end() : i]
            # Methods at the trait's own level (not inside a default body).
            n, d = 0, 0
            for t in re.finditer(r"[{}]|\bfn\s", body):
                tok = t.group(0)
                if tok == "{":
                    d += 1
                elif tok == "}":
                    d -= 1
                elif d == 0:
                    n += 1
            traits.append((m.group(1), n, str(p)))

    sites = []
    for p in rust_sources():
        s = str(p)
        # policy's `rich::Problem` is a bundle's problem, not an answer on a wire.
        if s in RENDERERS or not s.startswith("proxy/"):
            continue
        text = strip_comments(without_tests(p.read_text()))
        # A site builds a problem document or a JSON-RPC error, or renders the sidecar's own
        # typed answer (`enforce::own::Own`) onto a wire.
        own_render = r"\.into_rpc\(|\.rpc_doc\(|Own::into_response|Own::answer|\bown\.into_response\(|Own::failed\([^;]*\)\.into_response\("
        for m in re.finditer(r"\bProblem::\w+\(|\berror_(?:response|doc)\(|" + own_render, text):
            line = text.count("\n", 0, m.start()) + 1
            if re.search(r"fn\s+error_(response|doc)", text[max(0, m.start() - 10) : m.end()]):
                continue
            sites.append(f"{p}:{line} {m.group(0)[:-1]}")

    sleeps = []
    for p in sorted(ROOT.glob("tests/**/*.rs")):
        for i, l in enumerate(p.read_text().splitlines(), 1):
            if "sleep(" in l and not l.strip().startswith(("//", "#")):
                sleeps.append(f"{p}:{i}")

    rows = [
        ("functions with >= 7 parameters (outside tests)", many),
        ("AppState parameters", appstate),
        (
            "AppState parameters below a stage's entry",
            [a for a in appstate if not a.endswith("(entry)")],
        ),
        ("source files over 450 lines (before their test module)", long_src),
        ("test files over 450 lines", long_tests),
        ("refusal construction sites", sites),
        ("sleep( calls in tests", sleeps),
    ]
    for title, items in rows:
        print(f"{title}: {len(items)}")
        if listing:
            for it in items:
                print(f"    {it}")
    widest = max(traits, key=lambda t: t[1]) if traits else ("-", 0, "")
    print(f"store traits: {len(traits)}, most methods: {widest[1]} ({widest[0]})")
    if listing:
        for name, n, p in traits:
            print(f"    {name}: {n} ({p})")


if __name__ == "__main__":
    main()
