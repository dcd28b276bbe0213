"""Compensation leases (PTCL draft, SPEC §5.1): asked of the sidecar's lease authority, or
signed here with the agent's own Ed25519 key (pyca `cryptography`, JCS by `rfc8785`)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from ._canon import b64url, jcs, sha256_uri

MODES = ("COMPENSATING_ACTION", "SNAPSHOT_RESTORE", "DRY_RUN_SHADOW", "HUMAN_ESCROW")


@dataclass(frozen=True)
class LeaseSpec:
    """What a write's lease says besides its target, epoch and pre-image.

    `inverse` is the request that undoes the write (`{"method", "path", "body"?, "headers"?}`),
    staged before the write; `window_ms` is the recovery window asked for (`t_req_ms`)."""

    mode: str = "COMPENSATING_ACTION"
    window_ms: int = 60_000
    inverse: dict[str, Any] | None = None
    trace_anchor_ref: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"recovery mode must be one of {', '.join(MODES)}")
        if self.window_ms < 1:
            raise ValueError("window_ms must be at least 1")


def default_inverse(mode: str, path: str, status: int, body: bytes) -> dict[str, Any]:
    """The inverse a lease signed here carries when the spec gives none, as the sidecar's
    authority makes it (SPEC §5.7): SNAPSHOT_RESTORE puts the pre-image back (a PUT of its
    JSON representation, or a DELETE when it was absent); DRY_RUN_SHADOW's names the resource
    and is never sent. COMPENSATING_ACTION and HUMAN_ESCROW need the agent's own inverse."""
    path = path.split("?", 1)[0]
    if mode == "DRY_RUN_SHADOW":
        return {"method": "PUT", "path": path}
    if mode == "SNAPSHOT_RESTORE":
        if status in (404, 410):
            return {"method": "DELETE", "path": path}
        try:
            return {"method": "PUT", "path": path, "body": json.loads(body)}
        except (ValueError, UnicodeDecodeError):
            raise ValueError("SNAPSHOT_RESTORE: the resource is not JSON; give the inverse yourself") from None
    raise ValueError(f"{mode} needs an inverse: the request that undoes the write (LeaseSpec(inverse=...))")


def encode(lease: dict[str, Any]) -> str:
    """The `Agent-Compensation-Lease` header value: base64url (no padding) of its JSON."""
    return b64url(json.dumps(lease, separators=(",", ":"), ensure_ascii=False).encode())


def inverse_header(inverse: dict[str, Any]) -> str:
    """The `Agent-Compensation-Inverse` header value (an inverse staged inline)."""
    return b64url(json.dumps(inverse, separators=(",", ":"), ensure_ascii=False).encode())


def _rfc3339_ms(t: _dt.datetime) -> str:
    return t.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


@dataclass
class LocalSigner:
    """Signs leases with the agent's key; the sidecar must list its public key in
    `trust.issuers` (`kid` = `sha256:` of the raw public key)."""

    key: Ed25519PrivateKey
    name: str | None = field(default=None)

    @classmethod
    def from_pem(cls, pem: bytes | str | Path, name: str | None = None) -> "LocalSigner":
        data = Path(pem).read_bytes() if isinstance(pem, Path) else pem.encode() if isinstance(pem, str) else pem
        key = serialization.load_pem_private_key(data, password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError("a lease key is an Ed25519 private key")
        return cls(key, name)

    @classmethod
    def generate(cls) -> "LocalSigner":
        return cls(Ed25519PrivateKey.generate())

    def public_bytes(self) -> bytes:
        return self.key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)

    @property
    def kid(self) -> str:
        return "sha256:" + hashlib.sha256(self.public_bytes()).hexdigest()

    def issuer_entry(self) -> dict[str, str]:
        """This key as a `trust.issuers` entry."""
        entry = {"kid": self.kid, "public_key": b64url(self.public_bytes())}
        if self.name:
            entry["name"] = self.name
        return entry

    def sign(self, fields: dict[str, Any]) -> dict[str, Any]:
        """`fields` signed: Ed25519 over the JCS of the lease without `signature`."""
        unsigned = {k: v for k, v in fields.items() if k != "signature"}
        sig = self.key.sign(jcs(unsigned))
        return {**unsigned, "signature": {"alg": "Ed25519", "kid": self.kid, "sig": b64url(sig)}}

    def lease(
        self,
        *,
        target: str,
        epoch: int,
        pre_image_state_hash: str,
        spec: LeaseSpec,
        now: _dt.datetime | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A signed lease for one write of `target` at `epoch` (the resource's current epoch + 1)."""
        inverse = spec.inverse if spec.inverse is not None else {}
        fields: dict[str, Any] = {
            "ptcl_version": "1.0",
            "lease_id": f"urn:uuid:{uuid.uuid4()}",
            "sor_target_uri": target,
            "recovery_mode": spec.mode,
            "t_req_ms": spec.window_ms,
            "t_granted_ms": spec.window_ms,
            "cas_fence_epoch": epoch,
            "pre_image_state_hash": pre_image_state_hash,
            "inverse_payload_jcs_hash": sha256_uri(jcs(inverse)),
            "issued_at": _rfc3339_ms(now or _dt.datetime.now(_dt.timezone.utc)),
        }
        if spec.trace_anchor_ref:
            fields["trace_anchor_ref"] = spec.trace_anchor_ref
        fields.update(extra)
        return self.sign(fields)


@dataclass(frozen=True)
class Authority:
    """The sidecar's lease authority (`POST /.well-known/ptcl/v1/leases`, SPEC §5.7): it picks
    the epoch, hashes the pre-image, stages the inverse and binds the lease to the caller (the
    write's own `Authorization`). `base_url`: where it answers, if not the write's origin."""

    base_url: str | None = None

    def grant_body(self, target: str, spec: LeaseSpec) -> dict[str, Any]:
        body: dict[str, Any] = {"sor_target_uri": target, "recovery_mode": spec.mode, "t_req_ms": spec.window_ms}
        if spec.inverse is not None:
            body["inverse_payload"] = spec.inverse
        if spec.trace_anchor_ref:
            body["trace_anchor_ref"] = spec.trace_anchor_ref
        return body
