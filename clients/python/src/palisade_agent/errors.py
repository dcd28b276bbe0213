"""Refusals as typed exceptions (SPEC §6): every `ERR_…` code a sidecar answers maps to one
class, by what the agent should do about it; each carries the code, the detail, the problem
document and the refusal's receipt (an envelope `verify_receipt` checks)."""

from __future__ import annotations

from typing import Any


class PalisadeError(Exception):
    """Anything this library raises."""


class Refusal(PalisadeError):
    """A write (or a lease, escrow or compensation call) the sidecar refused."""

    def __init__(self, status: int, problem: dict[str, Any], receipt: dict[str, Any] | None = None):
        self.status = status
        self.problem = problem
        self.code: str = str(problem.get("code", "ERR_UNKNOWN"))
        self.title: str = str(problem.get("title", ""))
        self.detail: str = str(problem.get("detail", ""))
        self.reason: str | None = problem.get("reason")
        self.location: str | None = problem.get("violationLocation", problem.get("location"))
        self.current_epoch: int | None = problem.get("current_epoch")
        self.receipt: dict[str, Any] | None = receipt if receipt is not None else problem.get("receipt")
        super().__init__(f"{status} {self.code}: {self.detail or self.title}")


class LeaseRefused(Refusal):
    """The lease is missing, malformed, untrusted, expired, for another target or caller, or its
    inverse is not staged: get a new lease (or fix how it is made)."""


class StaleFence(Refusal):
    """Another write moved the resource first (409 `ERR_STALE_FENCE_EPOCH`), or the SoR's own
    ETag check refused the write (409 `ERR_STALE_PRE_IMAGE_UPSTREAM`). When
    `pre_image_changed`, the resource is no longer what the agent read: read it again."""

    @property
    def pre_image_changed(self) -> bool:
        return (
            self.reason == "pre-image-mismatch"
            or self.code == "ERR_STALE_PRE_IMAGE_UPSTREAM"
            or bool(self.problem.get("_pre_image_changed"))
        )


class ContractViolation(Refusal):
    """The payload breaks the operation's contract, or the operation is not bound (`location`
    names the JSON pointer, never a value)."""


class RequestFormRefused(Refusal):
    """A request spelled in a way the sidecar will not decide on (path, method, query, host,
    size): send it plainly."""


class IdempotencyConflict(Refusal):
    """The `Idempotency-Key` is reused for another request, in flight, or required."""


class AdmissionRefused(Refusal):
    """The access token is missing or invalid, or does not admit this operation."""


class Stopped(Refusal):
    """An operator froze these writes, or a write budget or rate is spent; `retry_after` (s)
    when the sidecar says when one more fits."""

    @property
    def retry_after(self) -> int | None:
        value = self.problem.get("_retry_after")
        return int(value) if value is not None else None


class Unavailable(Refusal):
    """The sidecar's store, the upstream, or the sidecar itself failed: nothing is known to
    have been written unless the receipt says so (`outcome: "uncertain"`)."""


class NegotiationRefused(Refusal):
    """An AGTP-RCNS proposal or a synthesized contract's use was refused."""


class PolicyDenied(Refusal):
    """An operator's rule denies this write (`problem["rule"]` names it): sending it again gets
    the same answer while the rule is in force."""

    @property
    def rule(self) -> str | None:
        return self.problem.get("rule")


class EscrowNotHeld(Refusal):
    """The escrow was decided already."""


class QuoteRefused(Refusal):
    """An AIP-2.1 quote-channel message refused (malformed, for another channel or chain, a bad
    signature, expired, its nonce used): build and sign the message again."""


class AdminRefused(Refusal):
    """The admin listener refused the call: no or another credential, a cross-site or non-JSON
    request, the same approver twice; or a bundle the sidecar would not load. For operators'
    tools, not agents."""


class EscrowRejected(PalisadeError):
    """A held write an operator rejected, or whose release the sidecar refused; `escrow` is
    its final status document (with `code` and `receipt` when the release was refused)."""

    def __init__(self, escrow: dict[str, Any]):
        self.escrow = escrow
        self.code: str | None = escrow.get("code")
        self.receipt: dict[str, Any] | None = escrow.get("receipt")
        super().__init__(f"escrow {escrow.get('escrow_id')} {escrow.get('state')}" + (f" ({self.code})" if self.code else ""))


class EscrowTimeout(PalisadeError):
    """A held write still undecided when the caller stopped waiting; it stays held."""

    def __init__(self, escrow: dict[str, Any], location: str):
        self.escrow = escrow
        self.location = location
        super().__init__(f"escrow {escrow.get('escrow_id')} still {escrow.get('state')} at {location}")


class ReceiptInvalid(PalisadeError):
    """A receipt whose proof, leaf or checkpoint signature does not verify."""


_CLASSES: dict[type[Refusal], tuple[str, ...]] = {
    LeaseRefused: (
        "ERR_LEASE_REQUIRED", "ERR_LEASE_MALFORMED", "ERR_LEASE_UNTRUSTED_KEY", "ERR_LEASE_SIGNATURE",
        "ERR_RECOVERY_WINDOW", "ERR_CLOCK_SKEW", "ERR_LEASE_EXPIRED", "ERR_TARGET_MISMATCH",
        "ERR_RECOVERY_MODE", "ERR_INVERSE_NOT_STAGED", "ERR_INVERSE_DIGEST", "ERR_INVERSE_TARGET",
        "ERR_CALLER_UNIDENTIFIED",
        "ERR_LEASE_NOT_YOURS", "ERR_ALREADY_COMPENSATED",
    ),
    StaleFence: ("ERR_STALE_FENCE_EPOCH", "ERR_STALE_PRE_IMAGE_UPSTREAM"),
    ContractViolation: (
        "ERR_CONTRACT_INPUT", "ERR_CONTRACT_OUTPUT", "ERR_CONNECTOR_FAILED", "ERR_CONNECTOR_POSTCONDITION",
        "ERR_UNBOUND_OPERATION", "ERR_TOOL_DRIFTED", "ERR_DEPLOYMENT_IDENTITY",
    ),
    RequestFormRefused: (
        "ERR_PATH_NOT_CANONICAL", "ERR_METHOD_NOT_CANONICAL", "ERR_METHOD_NOT_ALLOWED", "ERR_METHOD_OVERRIDE",
        "ERR_QUERY_TOO_LONG", "ERR_QUERY_TOO_MANY_PAIRS", "ERR_AUTHORITY_MISMATCH", "ERR_TOKEN_IN_QUERY",
        "ERR_MCP_METHOD_MISMATCH", "ERR_ORIGIN_NOT_ALLOWED", "ERR_BODY_TOO_LARGE", "ERR_BAD_REQUEST",
        "ERR_NOT_FOUND",
    ),
    IdempotencyConflict: ("ERR_IDEMPOTENCY_KEY_REUSED", "ERR_IDEMPOTENCY_IN_FLIGHT", "ERR_IDEMPOTENCY_KEY_REQUIRED"),
    AdmissionRefused: ("ERR_TOKEN_INVALID", "ERR_NOT_ADMITTED"),
    Stopped: ("ERR_FROZEN", "ERR_WRITE_BUDGET", "ERR_RATE_LIMITED", "ERR_RELAY_TX_FULL"),
    Unavailable: (
        "ERR_STORE_UNAVAILABLE", "ERR_PREIMAGE_UNAVAILABLE", "ERR_UPSTREAM_UNAVAILABLE", "ERR_UPSTREAM_TIMEOUT",
        "ERR_RESPONSE_TOO_LARGE", "ERR_INTERNAL", "ERR_RELAY_FULL",
    ),
    NegotiationRefused: (
        "ERR_RCNS_METHOD", "ERR_RCNS_PATH", "ERR_RCNS_PROPOSAL", "ERR_RCNS_SCOPE_REQUIRED",
        "ERR_RCNS_SCOPE_EXCEEDED", "ERR_RCNS_REJECTED", "ERR_RCNS_REFUSED", "ERR_RCNS_STEP_FAILED",
        "ERR_RCNS_PROPOSE_FIRST",
    ),
    EscrowNotHeld: ("ERR_ESCROW_NOT_HELD",),
    PolicyDenied: ("ERR_POLICY_DENIED",),
    QuoteRefused: (
        "ERR_QUOTE_MALFORMED", "ERR_QUOTE_CHANNEL", "ERR_QUOTE_CHAIN_UNKNOWN", "ERR_QUOTE_SIGNATURE",
        "ERR_QUOTE_EXPIRED", "ERR_QUOTE_NONCE_REUSED",
    ),
    AdminRefused: (
        "ERR_ADMIN_UNAUTHORIZED", "ERR_ADMIN_CROSS_SITE", "ERR_ADMIN_MEDIA_TYPE", "ERR_APPROVAL_REPEATED",
        "ERR_BUNDLE_REJECTED",
    ),
}

#: Every code this library knows, to the class it raises.
CODES: dict[str, type[Refusal]] = {code: cls for cls, codes in _CLASSES.items() for code in codes}


def refusal(status: int, problem: dict[str, Any], receipt: dict[str, Any] | None = None) -> Refusal:
    """The exception for a problem document (an unknown code is a plain `Refusal`)."""
    return CODES.get(str(problem.get("code")), Refusal)(status, problem, receipt)
