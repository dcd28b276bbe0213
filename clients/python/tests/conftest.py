"""Fixtures: the real `palisade` binary (PALISADE_BIN), its demo (a sample SoR behind a
sidecar with the lease authority and the sample ERP bundle), and an MCP server written with
the official SDK behind a sidecar of its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from palisade_agent import LocalSigner

REPO = Path(__file__).resolve().parents[3]
BIN = os.environ.get("PALISADE_BIN") or str(REPO / "target/debug/palisade")


@dataclass
class Demo:
    url: str
    admin: str
    dir: Path
    vkey: str

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "PALISADE_URL": self.url,
            "PALISADE_ADMIN": self.admin,
            "AGENT_KEY": str(self.dir / "agent.pem"),
        }

    def approve_when_held(self, timeout: float = 20.0, reject: bool = False) -> str:
        """As an operator: waits for a held write and decides on it; its escrow id."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            held = httpx.get(self.admin + "/admin/v1/escrow").json()["escrows"]
            held = [e for e in held if e["state"] == "held"]
            if held:
                verb = "reject" if reject else "approve"
                r = httpx.post(f"{self.admin}/admin/v1/escrow/{held[0]['escrow_id']}/{verb}", json={}, timeout=10)
                assert r.status_code == 200, r.text
                return held[0]["escrow_id"]
            time.sleep(0.05)
        raise AssertionError("no write was held")

    def epoch(self, path: str) -> int:
        from urllib.parse import quote

        r = httpx.get(self.admin + "/admin/v1/fences/" + quote(self.url + path, safe=""))
        return r.json()["epoch"]


def _drain(proc: subprocess.Popen) -> None:
    """Keeps reading what the process prints (its access log, drift events), in the
    background: a pipe nobody reads fills up and stops the sidecar mid-write."""
    import threading

    def run() -> None:
        assert proc.stdout is not None
        for _ in proc.stdout:
            pass

    threading.Thread(target=run, daemon=True).start()


def _read_until(proc: subprocess.Popen, pattern: str, timeout: float = 20.0) -> list[str]:
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        lines.append(line)
        if re.search(pattern, line):
            _drain(proc)
            return lines
    raise AssertionError(f"palisade did not print {pattern!r}:\n{''.join(lines)}")


@pytest.fixture(scope="session")
def demo():
    proc = subprocess.Popen(
        [BIN, "demo", "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        text = "".join(_read_until(proc, r"^Try, in another shell"))
        url = re.search(r"sidecar data plane\s+(http://\S+)", text).group(1)
        admin = re.search(r"sidecar admin\s+(http://\S+)", text).group(1)
        d = Path(re.search(r"config, keys, store\s+(\S+)", text).group(1))
        vkey = httpx.get(admin + "/admin/v1/log/key").text.strip()
        yield Demo(url, admin, d, vkey)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        # The demo keeps its directory for `palisade audit verify` after Ctrl-C; a test run
        # does not need it (13 MB a run, otherwise).
        if "d" in locals():
            shutil.rmtree(d, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class McpSidecar:
    url: str
    admin: str
    public_base: str
    signer: LocalSigner
    exec_log: Path
    vkey: str


@pytest.fixture(scope="session")
def mcp_sidecar():
    """tests/mcp/server.py (the official SDK) behind `palisade run` with `[mcp]` on."""
    work = Path(tempfile.mkdtemp(prefix="palisade-agent-mcp-"))
    port = free_port()
    exec_log = work / "exec.log"
    server = subprocess.Popen([sys.executable, str(REPO / "tests/mcp/server.py"), str(port), str(exec_log)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    signer = LocalSigner.generate()
    subprocess.run([BIN, "keygen", "--out", str(work / "signing.pem")], check=True, capture_output=True)
    (work / "issuers.json").write_text(json.dumps([signer.issuer_entry()]))
    base = "https://erp.example.com"
    (work / "palisade.toml").write_text(
        f'[listen]\naddr = "127.0.0.1:0"\npublic_base = "{base}"\n'
        f'[admin]\naddr = "127.0.0.1:0"\n'
        f'[upstream]\nurl = "http://127.0.0.1:{port}"\n'
        f'[signing]\nkey = "{work}/signing.pem"\n[trust]\nissuers = "{work}/issuers.json"\n'
        f'[store]\npath = "{work}/state.redb"\n[mcp]\npath = "/mcp"\n[rich]\nunbound_writes = "allow"\n'
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    proc = subprocess.Popen([BIN, "run", "--config", str(work / "palisade.toml")],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = "".join(_read_until(proc, r"palisade listening"))
        listening = json.loads(line.strip().splitlines()[-1])
        url = "http://" + listening["data"]
        admin = "http://" + listening["admin"]
        vkey = httpx.get(admin + "/admin/v1/log/key").text.strip()
        yield McpSidecar(url, admin, base, signer, exec_log, vkey)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        server.terminate()
        server.wait(timeout=10)
        shutil.rmtree(work, ignore_errors=True)


@dataclass
class Sidecar:
    url: str
    admin: str
    vkey: str
    proc: subprocess.Popen

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def sidecar_like(demo: Demo, name: str, extra: str = "", upstream: str | None = None,
                 upstream_timeout: str | None = None) -> Sidecar:
    """Another sidecar with the demo's keys, bundle and SoR (or `upstream`), a store of its
    own, and `extra` configuration."""
    text = (demo.dir / "palisade.toml").read_text()
    text = re.sub(r'path = "[^"]*state\.redb"', f'path = "{demo.dir}/{name}.redb"', text)
    if upstream is not None:
        text = re.sub(r'(\[upstream\]\nurl = )"[^"]*"', rf'\1"{upstream}"', text)
    text = re.sub(r'addr = "127\.0\.0\.1:\d+"', 'addr = "127.0.0.1:0"', text)
    if upstream_timeout is not None:
        text = re.sub(r'(\[upstream\]\nurl = "[^"]*"\ntimeout = )"[^"]*"', rf'\1"{upstream_timeout}"', text)
    text = re.sub(r'\[rcns\]\n[^\[]*', '', text)  # not needed here, and it would need the pre-image
    path = demo.dir / f"{name}.toml"
    path.write_text(text + extra)
    proc = subprocess.Popen([BIN, "run", "--config", str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    line = "".join(_read_until(proc, r"palisade listening"))
    listening = json.loads(line.strip().splitlines()[-1])
    admin = "http://" + listening["admin"]
    return Sidecar("http://" + listening["data"], admin, httpx.get(admin + "/admin/v1/log/key").text.strip(), proc)
