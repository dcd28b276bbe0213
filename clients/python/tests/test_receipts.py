"""`verify_receipt` on real receipts: a good one verifies, and each way of forging one fails —
another entry, another index, a cut or altered proof, another checkpoint, another key."""

from __future__ import annotations

import base64
import copy
import uuid

import pytest

from palisade_agent import Agent, LocalSigner, ReceiptInvalid, VerifierKey, verify_receipt
from palisade_agent._canon import b64url


@pytest.fixture(scope="module")
def envelopes(demo):
    agent = Agent(demo.url, authorization="Bearer receipts", vkey=demo.vkey)
    out = []
    for n in range(5):  # a tree of several entries, so proofs are not empty
        path = f"/api/v2/items/rc-{uuid.uuid4().hex[:8]}"
        done = agent.write("PUT", path, json={"sku": "BOLT-M8", "qty": n, "warehouse": "BER-1"},
                           inverse={"method": "DELETE", "path": path})
        out.append(done.envelope)
    return out


def test_a_real_receipt_verifies_in_every_form(demo, envelopes):
    env = envelopes[-1]
    entry = verify_receipt(env, demo.vkey)
    assert entry["kind"] == "commit" and entry == env["receipt"]
    import json

    text = json.dumps(env)
    assert verify_receipt(text, demo.vkey) == entry
    assert verify_receipt(b64url(text.encode()), VerifierKey.parse(demo.vkey)) == entry


def test_forgeries_are_refused(demo, envelopes):
    env = next(e for e in envelopes if e["inclusion"])
    forged = []
    e = copy.deepcopy(env)
    e["receipt"]["cas_fence_epoch"] += 1
    forged.append(("another entry", e))
    e = copy.deepcopy(env)
    e["index"] = env["index"] ^ 1
    forged.append(("another index", e))
    e = copy.deepcopy(env)
    e["inclusion"] = env["inclusion"][:-1]
    forged.append(("a cut proof", e))
    e = copy.deepcopy(env)
    h = bytearray(base64.b64decode(env["inclusion"][0]))
    h[0] ^= 1
    e["inclusion"][0] = base64.b64encode(bytes(h)).decode()
    forged.append(("an altered proof", e))
    e = copy.deepcopy(env)
    lines = env["checkpoint"].split("\n")
    lines[1] = str(int(lines[1]) + 1)
    e["checkpoint"] = "\n".join(lines)
    forged.append(("a checkpoint it was not signed as", e))
    for what, e in forged:
        with pytest.raises(ReceiptInvalid):
            verify_receipt(e, demo.vkey)
        print("refused:", what)
    # Another log's key (same name, another key): its ID does not match, or nothing is signed by it.
    other = LocalSigner.generate().public_bytes()
    name = demo.vkey.split("+")[0]
    import hashlib

    raw = b"\x01" + other
    kid = hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4].hex()
    with pytest.raises(ReceiptInvalid):
        verify_receipt(env, f"{name}+{kid}+{base64.b64encode(raw).decode()}")
    with pytest.raises(ReceiptInvalid):
        verify_receipt(env, demo.vkey.replace("+", "+0", 1))
