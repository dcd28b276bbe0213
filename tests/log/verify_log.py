"""An independent verifier of a Palisade receipt log, written from the texts, not from
Palisade's code: RFC 9162 §2.1 (hashing, inclusion and consistency verification), C2SP
signed-note and tlog-checkpoint (the checkpoint, its key ID and Ed25519 signature, verified
with pyca/cryptography), RFC 8785 (the entry of a received receipt, by the `rfc8785`
package), C2SP tlog-tiles (hash tiles of height 8, entry bundles, paths).

    verify_log.py DIR

DIR holds what a monitor would have fetched from the log: `vkey` (the verifier key),
`checkpoint` (the newest signed checkpoint), `tile/...` (hash tiles and entry bundles, as
served), and optionally `old-checkpoint` with `consistency.json` (a proof from it to the newest
tree), and `envelopes/*.json` (receipts as clients received them). Prints one JSON line:
{"ok": bool, "size": N, "root": "<base64>", "entries": N, "envelopes": K, "failures": [...]}
and exits 0 only if every check held.
"""

import base64
import hashlib
import json
import os
import sys

import rfc8785
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def sha256(b):
    return hashlib.sha256(b).digest()


def leaf_hash(entry):
    return sha256(b"\x00" + entry)


def node_hash(left, right):
    return sha256(b"\x01" + left + right)


def mth(leaves):
    """RFC 9162 §2.1.1: the Merkle Tree Hash of a list of leaf hashes."""
    n = len(leaves)
    if n == 0:
        return sha256(b"")
    if n == 1:
        return leaves[0]
    k = 1
    while k * 2 < n:
        k *= 2
    return node_hash(mth(leaves[:k]), mth(leaves[k:]))


def verify_inclusion(index, size, leaf, proof, root):
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while not (fn & 1) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(first, second, first_hash, second_hash, proof):
    """RFC 9162 §2.1.4.2."""
    if first == second:
        return not proof and first_hash == second_hash
    if first == 0 or first > second or not proof:
        return False
    path = list(proof)
    if first & (first - 1) == 0:
        path.insert(0, first_hash)
    fn, sn = first - 1, second - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while not (fn & 1) and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr == first_hash and sr == second_hash and sn == 0


class Key:
    """A C2SP signed-note verifier key: <name>+<hex key ID>+<base64(0x01 ‖ key)>."""

    def __init__(self, vkey):
        name, key_id, key = vkey.strip().split("+", 2)
        typed = base64.b64decode(key, validate=True)
        if typed[0] != 0x01 or len(typed) != 33:
            raise ValueError("not an Ed25519 verifier key")
        expected = sha256(name.encode() + b"\n" + typed)[:4]
        if bytes.fromhex(key_id) != expected:
            raise ValueError("the key ID does not match the name and key")
        self.name, self.id, self.public = name, expected, Ed25519PublicKey.from_public_bytes(typed[1:])


def open_checkpoint(note, key):
    """C2SP signed-note then tlog-checkpoint: (origin, size, root), or raises ValueError."""
    text, sep, sigs = note.rpartition("\n\n")
    if not sep:
        raise ValueError("no signature block")
    text += "\n"
    verified = False
    for line in sigs.rstrip("\n").split("\n"):
        if not line.startswith("\u2014 "):
            raise ValueError("a signature line does not start with an em dash")
        name, _, sig = line[2:].partition(" ")
        raw = base64.b64decode(sig, validate=True)
        if name == key.name and raw[:4] == key.id:
            try:
                key.public.verify(raw[4:], text.encode())
            except InvalidSignature:
                raise ValueError("the log's signature does not verify")
            verified = True
    if not verified:
        raise ValueError("no signature by the log's key")
    lines = text.split("\n")
    origin, size, root = lines[0], lines[1], lines[2]
    if origin != key.name:
        raise ValueError("the checkpoint's origin is not the key's name")
    if not size.isdigit() or (len(size) > 1 and size[0] == "0"):
        raise ValueError("bad tree size")
    root = base64.b64decode(root, validate=True)
    if len(root) != 32:
        raise ValueError("bad root hash")
    return origin, int(size), root


def verify_cosignatures(note, witness_vkey):
    """C2SP tlog-cosignature v1: the line by the witness's key over the checkpoint's body, signed
    as "cosignature/v1\ntime <t>\n" + body. Returns the timestamps found, or raises ValueError."""
    name, key_id, key = witness_vkey.strip().split("+", 2)
    typed = base64.b64decode(key, validate=True)
    if typed[0] != 0x04 or len(typed) != 33:
        raise ValueError("not a cosignature/v1 verifier key")
    expected = sha256(name.encode() + b"\n" + typed)[:4]
    if bytes.fromhex(key_id) != expected:
        raise ValueError("the witness key ID does not match its name and key")
    public = Ed25519PublicKey.from_public_bytes(typed[1:])
    text, _, sigs = note.rpartition("\n\n")
    body = text + "\n"
    found = []
    for line in sigs.rstrip("\n").split("\n"):
        who, _, sig = line[2:].partition(" ")
        raw = base64.b64decode(sig, validate=True)
        if who != name or raw[:4] != expected:
            continue
        if len(raw) != 4 + 8 + 64:
            raise ValueError("a cosignature of the wrong length")
        t = int.from_bytes(raw[4:12], "big")
        try:
            public.verify(raw[12:], ("cosignature/v1\ntime %d\n" % t).encode() + body.encode())
        except InvalidSignature:
            raise ValueError("the witness's cosignature does not verify")
        found.append(t)
    if not found:
        raise ValueError("no cosignature by the witness")
    return found


def tile_path(level, index, width):
    groups = []
    n = index
    groups.append("%03d" % (n % 1000))
    n //= 1000
    while n > 0:
        groups.append("x%03d" % (n % 1000))
        n //= 1000
    path = "tile/%s/%s" % (level, "/".join(reversed(groups)))
    if width < 256:
        path += ".p/%d" % width
    return path


def main(root_dir):
    failures = []
    key = Key(open(os.path.join(root_dir, "vkey")).read())
    origin, size, root = open_checkpoint(open(os.path.join(root_dir, "checkpoint")).read(), key)

    # A witness's cosignature on the checkpoint, when a witness key is given.
    witness_path = os.path.join(root_dir, "witness.vkey")
    if os.path.exists(witness_path):
        try:
            verify_cosignatures(open(os.path.join(root_dir, "checkpoint")).read(), open(witness_path).read())
        except ValueError as e:
            failures.append("witness: %s" % e)

    # Entries from the bundles, in order. A bundle the log no longer retains (410, listed in
    # `gone`) leaves its leaves to the level-0 hash tile; they are still checked against the
    # higher tiles and the checkpoint's root below.
    gone_path = os.path.join(root_dir, "gone")
    gone = set(open(gone_path).read().split()) if os.path.exists(gone_path) else set()
    leaves = []
    retained = 0
    for n in range((size + 255) // 256):
        width = min(256, size - n * 256)
        path = os.path.join(root_dir, tile_path("entries", n, width))
        if tile_path("entries", n, width) in gone:
            hashes = open(os.path.join(root_dir, tile_path(0, n, width)), "rb").read()
            if len(hashes) != 32 * width:
                failures.append("hash tile %s is not %d hashes" % (tile_path(0, n, width), width))
                continue
            leaves.extend(hashes[i * 32 : (i + 1) * 32] for i in range(width))
            continue
        if not os.path.exists(path):
            failures.append("missing entry bundle " + tile_path("entries", n, width))
            continue
        data = open(path, "rb").read()
        got = 0
        while data:
            length = int.from_bytes(data[:2], "big")
            entry = data[2 : 2 + length]
            if len(entry) != length:
                failures.append("truncated entry in " + tile_path("entries", n, width))
                break
            json.loads(entry)  # every entry is a JSON receipt
            leaves.append(leaf_hash(entry))
            data = data[2 + length :]
            got += 1
            retained += 1
        if got != width:
            failures.append("%s holds %d entries, not %d" % (tile_path("entries", n, width), got, width))
    if len(leaves) == size and mth(leaves) != root:
        failures.append("the entries do not hash to the checkpoint's root")

    # Hash tiles: level L holds the roots of complete subtrees of 256**L leaves.
    level = 0
    while size >> (8 * level) > 0 and len(leaves) == size:
        span = 256 ** level
        count = size // span
        for n in range((count + 255) // 256):
            width = min(256, count - n * 256)
            path = os.path.join(root_dir, tile_path(level, n, width))
            if not os.path.exists(path):
                failures.append("missing hash tile " + tile_path(level, n, width))
                continue
            data = open(path, "rb").read()
            want = b"".join(mth(leaves[(n * 256 + i) * span : (n * 256 + i + 1) * span]) for i in range(width))
            if data != want:
                failures.append("hash tile %s does not match the entries" % tile_path(level, n, width))
        level += 1

    # Consistency with an older checkpoint.
    old_path = os.path.join(root_dir, "old-checkpoint")
    if os.path.exists(old_path):
        try:
            _, old_size, old_root = open_checkpoint(open(old_path).read(), key)
            proof = [base64.b64decode(h, validate=True) for h in json.load(open(os.path.join(root_dir, "consistency.json")))]
            if not verify_consistency(old_size, size, old_root, root, proof):
                failures.append("the tree of size %d is not consistent with the tree of size %d" % (size, old_size))
        except ValueError as e:
            failures.append("old checkpoint: %s" % e)

    # Receipts as clients received them.
    envelopes = 0
    env_dir = os.path.join(root_dir, "envelopes")
    for name in sorted(os.listdir(env_dir)) if os.path.isdir(env_dir) else []:
        envelopes += 1
        env = json.load(open(os.path.join(env_dir, name)))
        try:
            _, env_size, env_root = open_checkpoint(env["checkpoint"], key)
        except ValueError as e:
            failures.append("%s: checkpoint: %s" % (name, e))
            continue
        entry = rfc8785.dumps(env["receipt"])
        proof = [base64.b64decode(h, validate=True) for h in env["inclusion"]]
        if not verify_inclusion(env["index"], env_size, leaf_hash(entry), proof, env_root):
            failures.append("%s: the inclusion proof of entry %d does not verify" % (name, env["index"]))
        elif env_size <= size and env["index"] < len(leaves) and leaves[env["index"]] != leaf_hash(entry):
            failures.append("%s: entry %d differs from the log's" % (name, env["index"]))

    print(json.dumps({"ok": not failures, "size": size, "root": base64.b64encode(root).decode(),
                      "entries": len(leaves), "retained": retained, "envelopes": envelopes,
                      "failures": failures}))
    return 0 if not failures else 1


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1]))
    except ValueError as e:
        print(json.dumps({"ok": False, "failures": [str(e)]}))
        sys.exit(1)
