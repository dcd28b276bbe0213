"""JCS (RFC 8785) and the digests Palisade writes (`sha256:<hex>`)."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import rfc8785


def jcs(value: Any) -> bytes:
    """The RFC 8785 canonical form of a JSON value."""
    return rfc8785.dumps(value)


def sha256_uri(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def pre_image_hash(status: int, body: bytes) -> str:
    """The pre-image digest check 12 compares (SPEC §5.2): 404/410 is the absent state (the
    digest of zero bytes); a JSON representation is hashed in its JCS form, anything else as
    its raw bytes."""
    if status in (404, 410):
        return sha256_uri(b"")
    try:
        value = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return sha256_uri(body)
    return sha256_uri(jcs(value))
