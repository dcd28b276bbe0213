"""Tool-call latency through the sidecar against the same MCP server called directly.

    benches/mcp/run            (builds palisade --release, makes the venv, runs this)

One MCP server (tests/mcp/server.py, the official Python SDK), one sidecar in front of it with
its `add` tool bound to a contract with an output schema and pinned by the digest
`palisade lock pin-mcp` reads, and one SDK client (stateless 2026-07-28 revision) making
CALLS `add` calls and LISTS `tools/list` calls per round, alternating direct and proxied
rounds. So through the sidecar each call is parsed, classified, bound, its arguments checked
against structural.input, its result against structural.output, and each listing filtered
against the pins. A third target, the same binary as a plain proxy (no MCP handling, no
bundle), separates what proxying costs from what the MCP checks cost. Prints per-call p50/p99
for each and what each adds over the direct calls.
"""

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from mcp import Client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target/release/palisade")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
CALLS = int(os.environ.get("CALLS", "300"))
LISTS = int(os.environ.get("LISTS", "100"))
DIALECT = "https://json-schema.org/draft/2020-12/schema"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"nothing listens on {port}")


def jcs(doc) -> bytes:
    out = subprocess.run([BIN, "jcs"], input=json.dumps(doc).encode(), capture_output=True, check=True)
    return out.stdout.rstrip(b"\n")


def digest_hex(doc) -> str:
    import hashlib
    return hashlib.sha256(jcs(doc)).hexdigest()


def bundle(tmp: str, server_url: str) -> str:
    """Pins the running server, binds `add` (read, with an output schema); the [rich] table."""
    os.makedirs(os.path.join(tmp, "pinned"))
    pinned = os.path.join(tmp, "pinned", "lock.json")
    subprocess.run([BIN, "lock", "pin-mcp", "--url", server_url, "--out", pinned], check=True,
                   capture_output=True)
    tool_digest = json.load(open(pinned))["capabilities"]["add"]["toolDigest"]
    contract = {
        "structural": {
            "input": {"$schema": DIALECT, "type": "object", "required": ["a", "b"],
                      "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
            "output": {"$schema": DIALECT, "type": "object", "required": ["result"],
                       "properties": {"result": {"type": "integer"}}},
        },
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "read", "reversibility": "reversible",
                        "idempotencyKey": "none", "modelMediation": "none"},
    }
    contracts = os.path.join(tmp, "contracts")
    os.makedirs(contracts)
    hex_ = digest_hex(contract)
    with open(os.path.join(contracts, hex_ + ".json"), "w") as f:
        json.dump(contract, f)
    lock = {"richVersion": "0.1", "bindingId": "urn:palisade:bench:mcp/1", "graphClosure": "closed",
            "capabilities": {"add": {"protocol": "mcp", "operation": "add",
                                     "contractDigest": "sha-256:" + hex_, "toolDigest": tool_digest}}}
    lockfile = os.path.join(tmp, "lock.json")
    with open(lockfile, "w") as f:
        json.dump(lock, f)
    return f'[rich]\nlockfile = "{lockfile}"\ncontracts = "{contracts}"\n'


async def round_(url: str) -> tuple[list[float], list[float]]:
    calls, lists = [], []
    async with Client(url, mode="2026-07-28", cache=None) as client:
        await client.list_tools()  # warm the connection
        for i in range(CALLS):
            began = time.perf_counter()
            r = await client.call_tool("add", {"a": i, "b": 1})
            calls.append(time.perf_counter() - began)
            assert r.structured_content == {"result": i + 1}, r
        for _ in range(LISTS):
            began = time.perf_counter()
            await client.list_tools()
            lists.append(time.perf_counter() - began)
    return calls, lists


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000


def main() -> None:
    tmp = tempfile.mkdtemp()
    procs = []
    try:
        port = free_port()
        procs.append(subprocess.Popen(
            [sys.executable, os.path.join(ROOT, "tests/mcp/server.py"), str(port),
             os.path.join(tmp, "exec.log")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_port(port)
        direct = f"http://127.0.0.1:{port}/mcp"
        rich = bundle(tmp, direct)
        sport = free_port()
        subprocess.run([BIN, "keygen", "--out", os.path.join(tmp, "sidecar.pem")], check=True,
                       capture_output=True)
        with open(os.path.join(tmp, "issuers.json"), "w") as f:
            f.write("[]")
        config = os.path.join(tmp, "palisade.toml")
        with open(config, "w") as f:
            f.write(f'[listen]\naddr = "127.0.0.1:{sport}"\npublic_base = "https://erp.example.com"\n'
                    f'[admin]\naddr = "127.0.0.1:0"\n[upstream]\nurl = "http://127.0.0.1:{port}"\n'
                    f'[signing]\nkey = "{tmp}/sidecar.pem"\n[trust]\nissuers = "{tmp}/issuers.json"\n'
                    f'[store]\npath = "{tmp}/state.redb"\n[mcp]\npath = "/mcp"\n{rich}')
        procs.append(subprocess.Popen([BIN, "run", "--config", config], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        # The same sidecar as a plain proxy (no [mcp], no bundle, no enforced methods): what
        # proxying costs before any MCP handling.
        pport = free_port()
        plain = os.path.join(tmp, "plain.toml")
        with open(plain, "w") as f:
            f.write(f'[listen]\naddr = "127.0.0.1:{pport}"\n[admin]\naddr = "127.0.0.1:0"\n'
                    f'[upstream]\nurl = "http://127.0.0.1:{port}"\n[ptcl]\nwrites = []\n')
        procs.append(subprocess.Popen([BIN, "run", "--config", plain], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        wait_port(sport)
        wait_port(pport)
        proxied = f"http://127.0.0.1:{sport}/mcp"
        targets = (("direct", direct), ("proxy", f"http://127.0.0.1:{pport}/mcp"),
                   ("palisade", proxied))
        results = {name: ([], []) for name, _ in targets}
        for r in range(ROUNDS):
            for name, url in targets:
                calls, lists = asyncio.run(round_(url))
                results[name][0].extend(calls)
                results[name][1].extend(lists)
                print(f"round {r + 1} {name:9} tools/call p50 {pct(calls, 0.5):6.2f} ms   "
                      f"tools/list p50 {pct(lists, 0.5):6.2f} ms", flush=True)
        print()
        print(f"{'':10} {'tools/call p50':>15} {'p99':>8} {'tools/list p50':>15} {'p99':>8}")
        for name, (calls, lists) in results.items():
            print(f"{name:10} {pct(calls, 0.5):12.2f} ms {pct(calls, 0.99):5.2f} ms "
                  f"{pct(lists, 0.5):12.2f} ms {pct(lists, 0.99):5.2f} ms")
        d = results["direct"]
        for name in ("proxy", "palisade"):
            p = results[name]
            print(f"{name + ' adds':14} {pct(p[0], 0.5) - pct(d[0], 0.5):8.2f} ms "
                  f"{pct(p[0], 0.99) - pct(d[0], 0.99):5.2f} ms "
                  f"{pct(p[1], 0.5) - pct(d[1], 0.5):12.2f} ms {pct(p[1], 0.99) - pct(d[1], 0.99):5.2f} ms")
        print(f"({ROUNDS} rounds of {CALLS} calls and {LISTS} listings each, interleaved)")
    finally:
        for p in procs:
            p.kill()


if __name__ == "__main__":
    main()
