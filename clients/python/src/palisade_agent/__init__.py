"""palisade-agent: the agent's side of Palisade.

Leases (asked of the sidecar or signed here), leased writes through httpx with fence
refreshes and escrow following, refusals as typed exceptions, receipts verified against the
log's key, and leased MCP tool calls.
"""

from .auth import LEASE, RAW, SPEC, PalisadeAuth, RetryPolicy, problem_of, raise_for_refusal
from .client import Agent, AsyncAgent, WriteResult
from .errors import (
    CODES,
    AdminRefused,
    AdmissionRefused,
    ContractViolation,
    EscrowNotHeld,
    EscrowRejected,
    EscrowTimeout,
    IdempotencyConflict,
    LeaseRefused,
    NegotiationRefused,
    PalisadeError,
    PolicyDenied,
    QuoteRefused,
    ReceiptInvalid,
    Refusal,
    RequestFormRefused,
    StaleFence,
    Stopped,
    Unavailable,
)
from .leases import MODES, Authority, LeaseSpec, LocalSigner, default_inverse, encode, inverse_header
from .receipts import Checkpoint, VerifierKey, verify_checkpoint, verify_receipt

__version__ = "0.1.0"

__all__ = [
    "Agent", "AsyncAgent", "WriteResult", "PalisadeAuth", "RetryPolicy", "LEASE", "RAW", "SPEC",
    "problem_of", "raise_for_refusal", "Authority", "LocalSigner", "LeaseSpec", "MODES", "encode",
    "inverse_header", "verify_receipt", "verify_checkpoint", "VerifierKey", "Checkpoint", "CODES",
    "PalisadeError", "Refusal", "LeaseRefused", "StaleFence", "ContractViolation",
    "RequestFormRefused", "IdempotencyConflict", "AdmissionRefused", "Stopped", "Unavailable",
    "NegotiationRefused", "PolicyDenied", "EscrowNotHeld", "EscrowRejected", "EscrowTimeout", "ReceiptInvalid",
    "QuoteRefused", "AdminRefused", "default_inverse",
]
