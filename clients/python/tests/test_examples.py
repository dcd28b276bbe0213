"""Each example, end to end, against the real binary: the demo's SoR and sidecar, and the
official MCP SDK's server behind a sidecar."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from palisade_agent import verify_receipt

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(name: str, env: dict[str, str]) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLES / name)], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_leased_write(demo):
    said = run("leased_write.py", demo.env())
    assert "status 200 epoch" in said and "verified" in said and "stored 1150" in said, said
    assert demo.epoch("/api/v2/items/1") >= 1


def test_stale_fence(demo):
    said = run("stale_fence.py", demo.env())
    assert "refused ERR_STALE_FENCE_EPOCH current epoch" in said, said
    assert "receipt kind rejection" in said and "kept 40" in said, said


def test_escrowed_write(demo):
    said = run("escrowed_write.py", demo.env())
    assert "released upstream 200" in said, said
    assert httpx.get(demo.url + "/api/v2/items/3").json()["qty"] == 500


def test_compensation(demo):
    said = run("compensation.py", demo.env())
    lines = dict(line.split(" ", 1) for line in said.strip().splitlines())
    assert lines["written"].startswith("99"), said
    assert lines["compensated"].startswith("compensation"), said
    assert lines["now"] == "10", said


def test_mcp_tool_call(mcp_sidecar, tmp_path):
    key = tmp_path / "agent.pem"
    from cryptography.hazmat.primitives import serialization

    key.write_bytes(mcp_sidecar.signer.key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    env = {**os.environ, "AGENT_KEY": str(key), "PALISADE_MCP_URL": mcp_sidecar.url + "/mcp",
           "PALISADE_PUBLIC_BASE": mcp_sidecar.public_base}
    before = mcp_sidecar.exec_log.read_text().count("set_stock") if mcp_sidecar.exec_log.exists() else 0
    said = run("mcp_tool_call.py", env)
    assert "tool result error False receipt commit" in said, said
    assert mcp_sidecar.exec_log.read_text().count("set_stock") == before + 1
