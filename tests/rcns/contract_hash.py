"""contract_hash of a 263 body or an INSPECT view, computed apart from the sidecar's code.

Seed 000 §3.1: the SHA-256 of the canonical contract. Palisade's canonical contract is the
view without `contract_hash` and the state that changes (`revoked`, `idle_expires_at`)
(docs/decisions.md, "RCNS"); the 263 answer adds `status` and, when persistence was refused,
`persistent_refused`. The JCS
form (RFC 8785) comes from Trail of Bits' `rfc8785` package.

Reads the JSON document on stdin; prints the hex digest.
"""

import hashlib
import json
import sys

import rfc8785

doc = json.load(sys.stdin)
for member in ("contract_hash", "revoked", "idle_expires_at", "status", "persistent_refused"):
    doc.pop(member, None)
print(hashlib.sha256(rfc8785.dumps(doc)).hexdigest())
