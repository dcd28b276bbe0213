"""Verifying a receipt as a client got it (SPEC §5.5), with the sidecar's verifier key only.

Written from the specifications (RFC 9162 §2.1, C2SP signed-note and tlog-checkpoint), not
from the sidecar's code: the leaf hash of the receipt's JCS form, its inclusion proof up to
the checkpoint's root, and the checkpoint's Ed25519 signature under the key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from ._canon import b64url_decode, jcs
from .errors import ReceiptInvalid


@dataclass(frozen=True)
class VerifierKey:
    """A C2SP note verifier key: `<name>+<hex key ID>+<base64(0x01 ‖ Ed25519 key)>`."""

    name: str
    key_id: bytes
    public_key: Ed25519PublicKey

    @classmethod
    def parse(cls, text: str) -> "VerifierKey":
        parts = text.strip().split("+", 2)
        if len(parts) != 3 or not parts[0]:
            raise ReceiptInvalid("the verifier key is not <name>+<hex id>+<base64 key>")
        name, hex_id, b64 = parts
        try:
            raw = base64.b64decode(b64, validate=True)
            key_id = bytes.fromhex(hex_id)
        except ValueError as e:
            raise ReceiptInvalid(f"the verifier key does not decode: {e}") from None
        if len(raw) != 33 or raw[0] != 0x01 or len(key_id) != 4:
            raise ReceiptInvalid("the verifier key is not an Ed25519 note key")
        if hashlib.sha256(name.encode() + b"\n" + raw).digest()[:4] != key_id:
            raise ReceiptInvalid("the verifier key's ID does not match its key")
        return cls(name, key_id, Ed25519PublicKey.from_public_bytes(raw[1:]))


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def verify_checkpoint(note: str, key: VerifierKey | str) -> Checkpoint:
    """A signed checkpoint's body, once its signature by `key` verifies."""
    if isinstance(key, str):
        key = VerifierKey.parse(key)
    split = note.find("\n\n")
    if split < 0:
        raise ReceiptInvalid("the checkpoint has no signature lines")
    text = note[: split + 1]
    ours = None
    for line in note[split + 2 :].split("\n"):
        if not line.startswith("\u2014 "):
            continue
        fields = line[2:].split(" ")
        if len(fields) != 2 or fields[0] != key.name:
            continue
        try:
            blob = base64.b64decode(fields[1], validate=True)
        except ValueError:
            continue
        if len(blob) == 68 and blob[:4] == key.key_id:
            ours = blob[4:]
    if ours is None:
        raise ReceiptInvalid(f"the checkpoint carries no signature by {key.name}")
    try:
        key.public_key.verify(ours, text.encode())
    except InvalidSignature:
        raise ReceiptInvalid("the checkpoint's signature does not verify") from None
    lines = text.split("\n")
    if len(lines) < 4 or lines[0] != key.name:
        raise ReceiptInvalid("the checkpoint is not this log's")
    try:
        size = int(lines[1])
        root = base64.b64decode(lines[2], validate=True)
    except ValueError:
        raise ReceiptInvalid("the checkpoint's size or root does not parse") from None
    if str(size) != lines[1] or size < 0 or len(root) != 32:
        raise ReceiptInvalid("the checkpoint's size or root is malformed")
    return Checkpoint(lines[0], size, root)


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def root_from_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes]) -> bytes:
    """RFC 9162 §2.1.3.2: the root a leaf's inclusion proof leads to."""
    if not 0 <= index < size:
        raise ReceiptInvalid("the receipt's index is outside the checkpoint's tree")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            raise ReceiptInvalid("the inclusion proof is too long")
        if fn & 1 or fn == sn:
            r = _node(p, r)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = _node(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ReceiptInvalid("the inclusion proof is too short")
    return r


def envelope_of(value: Any) -> dict[str, Any]:
    """A receipt envelope from what a client holds: the `Agent-Commit-Receipt` header value
    (base64url JSON), its JSON text, or the parsed object."""
    if isinstance(value, dict):
        return value
    if isinstance(value, bytes):
        value = value.decode("ascii", "replace")
    if not isinstance(value, str):
        raise ReceiptInvalid("a receipt is a header value, JSON text or an object")
    text = value.strip()
    try:
        doc = json.loads(text if text.startswith("{") else b64url_decode(text))
    except ValueError:
        raise ReceiptInvalid("the receipt is neither base64url JSON nor JSON") from None
    if not isinstance(doc, dict):
        raise ReceiptInvalid("a receipt envelope is a JSON object")
    return doc


def verify_receipt(value: Any, vkey: VerifierKey | str) -> dict[str, Any]:
    """Checks a receipt envelope (`{"receipt", "index", "inclusion", "checkpoint"}`) against
    the log's verifier key and returns the receipt; raises `ReceiptInvalid` naming what fails."""
    env = envelope_of(value)
    receipt, index, inclusion, note = (env.get(k) for k in ("receipt", "index", "inclusion", "checkpoint"))
    if not isinstance(receipt, dict) or not isinstance(index, int) or not isinstance(inclusion, list) or not isinstance(note, str):
        raise ReceiptInvalid("the envelope lacks receipt, index, inclusion or checkpoint")
    checkpoint = verify_checkpoint(note, vkey)
    try:
        proof = [base64.b64decode(h, validate=True) for h in inclusion]
    except (ValueError, TypeError):
        raise ReceiptInvalid("the inclusion proof's hashes do not decode") from None
    if any(len(h) != 32 for h in proof):
        raise ReceiptInvalid("an inclusion proof hash is not 32 bytes")
    leaf = hashlib.sha256(b"\x00" + jcs(receipt)).digest()
    if root_from_inclusion(index, checkpoint.size, leaf, proof) != checkpoint.root:
        raise ReceiptInvalid("the receipt is not in the checkpoint's tree (leaf or proof wrong)")
    return receipt
