"""Leased MCP tool calls with the official MCP Python SDK (`pip install palisade-agent[mcp]`).

`tools/call` is the write unit (SPEC §11): its lease travels in `params._meta.compensationLease`
and its inverse in `params._meta.compensationInverse`. A refusal comes back as a JSON-RPC error
whose `data` is the problem document; it is raised as the same exceptions as over HTTP.
"""

from __future__ import annotations

from typing import Any

from ._canon import sha256_uri
from .errors import Refusal, StaleFence, refusal
from .leases import LeaseSpec, LocalSigner


def tool_target(public_base: str, name: str) -> str:
    """The `sor_target_uri` of a tool call: `public_base + "/mcp/tools/" + name`."""
    return public_base.rstrip("/") + "/mcp/tools/" + name


def meta_for(lease: dict[str, Any], inverse: dict[str, Any] | None = None) -> dict[str, Any]:
    """The `_meta` of a leased `tools/call`."""
    meta: dict[str, Any] = {"compensationLease": lease}
    if inverse is not None:
        meta["compensationInverse"] = inverse
    return meta


def as_refusal(error: BaseException) -> Refusal | None:
    """The refusal a JSON-RPC error carries (its `data` is a problem document), if any."""
    data = getattr(getattr(error, "error", None), "data", None)
    if isinstance(data, dict) and str(data.get("code", "")).startswith("ERR_"):
        return refusal(int(data.get("status", 400)), data)
    return None


async def call_tool(
    session: Any,
    name: str,
    arguments: dict[str, Any] | None = None,
    *,
    signer: LocalSigner,
    public_base: str,
    spec: LeaseSpec | None = None,
    epoch: int = 1,
    retries: int = 3,
    **kw: Any,
) -> Any:
    """Calls `name` under a lease signed by `signer`; raises refusals as typed exceptions.

    A tool has no representation to read, so its epoch is learnt from the sidecar: start at
    `epoch`, and on a stale fence sign again just above the `current_epoch` it names (up to
    `retries` times; no pre-image is compared for a tool call)."""
    spec = spec or LeaseSpec()
    for attempt in range(retries + 1):
        lease = signer.lease(
            target=tool_target(public_base, name),
            epoch=epoch,
            pre_image_state_hash=sha256_uri(b""),
            spec=spec,
        )
        try:
            result = await session.call_tool(name, arguments, meta=meta_for(lease, spec.inverse), **kw)
        except Exception as e:  # the SDK raises MCPError for a JSON-RPC error
            r = as_refusal(e)
            if r is None:
                raise
            if isinstance(r, StaleFence) and r.current_epoch is not None and attempt < retries:
                epoch = r.current_epoch + 1
                continue
            raise r from None
        return result
    raise AssertionError("unreachable")
