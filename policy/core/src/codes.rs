//! The single table of error codes.
//!
//! Every refusal Palisade makes, and every failure it reports to a client, carries exactly one
//! [`ErrorCode`]. This file is the only place that says which HTTP status, title, problem `type`
//! URI and drift-event category a code has (SPEC §5, §6, §7, §8). The matches are exhaustive with
//! no `_` arm: a new code does not compile until it has a row.

use std::borrow::Cow;
use std::fmt;

/// Drift-event categories (SPEC §8, RICH §14.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DriftCategory {
    Structural,
    Representation,
    Identity,
    ToolDefinition,
    Lockfile,
    Lease,
    Fence,
    Idempotency,
    Rate,
    /// RCNS (seed 000): a proposal or a synthesized contract the sidecar refused.
    Negotiation,
    /// SPEC §14: a write an operator's freeze stopped.
    Freeze,
    /// SPEC §15: a write an operator's rule denied, or would have decided otherwise (report).
    Policy,
    /// SPEC §15: a candidate bundle decided a write otherwise than the one in force.
    Shadow,
}

impl DriftCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Structural => "structural",
            Self::Representation => "representation",
            Self::Identity => "identity",
            Self::ToolDefinition => "tool-definition",
            Self::Lockfile => "lockfile",
            Self::Lease => "lease",
            Self::Fence => "fence",
            Self::Idempotency => "idempotency",
            Self::Rate => "rate",
            Self::Negotiation => "negotiation",
            Self::Freeze => "freeze",
            Self::Policy => "policy",
            Self::Shadow => "shadow",
        }
    }
}

macro_rules! codes {
    ($( $(#[$doc:meta])* $variant:ident = $code:literal, $status:literal, $title:literal, $cat:expr; )*) => {
        /// Every code Palisade puts on the wire.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $( $(#[$doc])* $variant, )* }

        impl ErrorCode {
            /// Every code, in table order.
            pub const ALL: &'static [ErrorCode] = &[ $( ErrorCode::$variant, )* ];

            /// The wire name, e.g. `ERR_STALE_FENCE_EPOCH`.
            pub fn as_str(self) -> &'static str {
                match self { $( ErrorCode::$variant => $code, )* }
            }

            /// The HTTP status of a problem response with this code.
            pub fn status(self) -> u16 {
                match self { $( ErrorCode::$variant => $status, )* }
            }

            /// The problem's `title`: fixed per code, never holding request values.
            pub fn title(self) -> &'static str {
                match self { $( ErrorCode::$variant => $title, )* }
            }

            /// The drift-event category, or `None` for failures that are not drift (an
            /// upstream that is down is not a policy violation).
            pub fn category(self) -> Option<DriftCategory> {
                #[allow(unused_imports)]
                use DriftCategory::*;
                match self { $( ErrorCode::$variant => $cat, )* }
            }

            /// Looks a wire name up in the table.
            pub fn from_wire(s: &str) -> Option<ErrorCode> {
                match s { $( $code => Some(ErrorCode::$variant), )* _ => None }
            }
        }
    };
}

codes! {
    // SPEC §5.2, checks 1–12.
    LeaseRequired = "ERR_LEASE_REQUIRED", 428, "Compensation lease required", Some(Lease);
    LeaseMalformed = "ERR_LEASE_MALFORMED", 400, "Compensation lease malformed", Some(Lease);
    LeaseUntrustedKey = "ERR_LEASE_UNTRUSTED_KEY", 403, "Lease signed by an untrusted key", Some(Lease);
    LeaseSignature = "ERR_LEASE_SIGNATURE", 403, "Lease signature invalid", Some(Lease);
    RecoveryWindow = "ERR_RECOVERY_WINDOW", 403, "Recovery window not satisfiable", Some(Lease);
    ClockSkew = "ERR_CLOCK_SKEW", 403, "Lease issued in the future", Some(Lease);
    /// 403 on a write; the compensate endpoint answers 410 with the same code (SPEC §5.4),
    /// see [`Refusal::with_status`].
    LeaseExpired = "ERR_LEASE_EXPIRED", 403, "Lease expired", Some(Lease);
    TargetMismatch = "ERR_TARGET_MISMATCH", 403, "Lease target does not match the request", Some(Lease);
    RecoveryMode = "ERR_RECOVERY_MODE", 403, "Recovery mode not allowed for this operation", Some(Lease);
    ContractInput = "ERR_CONTRACT_INPUT", 422, "Request violates the input contract", Some(Structural);
    InverseNotStaged = "ERR_INVERSE_NOT_STAGED", 428, "Inverse payload not staged", Some(Lease);
    InverseDigest = "ERR_INVERSE_DIGEST", 403, "Inverse payload digest mismatch", Some(Lease);
    /// SPEC §5.4: an inverse that does not undo the write it is staged for (another resource,
    /// another tool), refused where it is staged and again at `compensate`.
    InverseTarget = "ERR_INVERSE_TARGET", 422, "Inverse payload does not target the write it undoes", Some(Lease);
    StaleFenceEpoch = "ERR_STALE_FENCE_EPOCH", 409, "Stale fence epoch", Some(Fence);
    PreimageUnavailable = "ERR_PREIMAGE_UNAVAILABLE", 503, "Pre-image unavailable", Some(Fence);
    /// `upstream.if_match` (an addition to SPEC §5.2): the SoR's own precondition refused the
    /// write (412 to the `If-Match` check 12's ETag), or the agent's `If-Match` is not it.
    StalePreImageUpstream = "ERR_STALE_PRE_IMAGE_UPSTREAM", 409, "The SoR's version of the resource is not the one checked", Some(Fence);
    // SPEC §4.
    UnboundOperation = "ERR_UNBOUND_OPERATION", 404, "Operation not bound by the lockfile", Some(Lockfile);
    // SPEC §7: a bundle that fails to compile on reload (an event's code; no client sees it).
    BundleRejected = "ERR_BUNDLE_REJECTED", 500, "Bundle refused; the previous one stays in force", Some(Lockfile);
    // SPEC §5.4.
    AlreadyCompensated = "ERR_ALREADY_COMPENSATED", 409, "Lease already compensated", Some(Lease);
    // SPEC §5.4 is silent on deciding an escrow twice; an operator's conflict, not a drift.
    EscrowNotHeld = "ERR_ESCROW_NOT_HELD", 409, "Escrow already decided", None;
    // SPEC §5.6.
    IdempotencyKeyReused = "ERR_IDEMPOTENCY_KEY_REUSED", 422, "Idempotency key reused with a different request", Some(Idempotency);
    IdempotencyInFlight = "ERR_IDEMPOTENCY_IN_FLIGHT", 409, "Request with this idempotency key in flight", Some(Idempotency);
    IdempotencyKeyRequired = "ERR_IDEMPOTENCY_KEY_REQUIRED", 400, "Idempotency key required", Some(Idempotency);
    // SPEC §5.7.
    CallerUnidentified = "ERR_CALLER_UNIDENTIFIED", 401, "Caller identity required", Some(Lease);
    LeaseNotYours = "ERR_LEASE_NOT_YOURS", 403, "Lease granted to another caller", Some(Lease);
    // SPEC §7.
    ContractOutput = "ERR_CONTRACT_OUTPUT", 502, "Upstream response violates the output contract", Some(Structural);
    // RICH §9, §11.2 (issue 23): a bound connector could not map the payload (its
    // preconditions or its transform refused), or what it produced fails its postconditions or
    // the other contract. 422 on a request; 502 on a response (the upstream's answer).
    ConnectorFailed = "ERR_CONNECTOR_FAILED", 422, "Connector could not map the payload", Some(Structural);
    ConnectorPostcondition = "ERR_CONNECTOR_POSTCONDITION", 422, "Connector output violates its postconditions or the target contract", Some(Structural);
    DeploymentIdentity = "ERR_DEPLOYMENT_IDENTITY", 502, "Upstream identity does not match the binding", Some(Identity);
    ToolDrifted = "ERR_TOOL_DRIFTED", 409, "Tool definition drifted from its pin", Some(ToolDefinition);
    // SPEC §11.
    McpMethodMismatch = "ERR_MCP_METHOD_MISMATCH", 400, "Mcp-Method header disagrees with the JSON-RPC method", Some(Representation);
    // SPEC §11: the transport's DNS-rebinding rule, an `Origin` not in `mcp.allowed_origins`.
    OriginNotAllowed = "ERR_ORIGIN_NOT_ALLOWED", 403, "Origin not allowed on the MCP endpoint", Some(Identity);
    // Data plane, request form (SPEC §3, §4.3; docs/decisions.md "Canonical requests"): a
    // spelling the sidecar cannot decide on as the upstream will read it. Representation
    // drift: a write so spelled leaves an event.
    PathNotCanonical = "ERR_PATH_NOT_CANONICAL", 400, "Request path has no canonical form", Some(Representation);
    MethodNotCanonical = "ERR_METHOD_NOT_CANONICAL", 400, "Method is a case variant of a known method", Some(Representation);
    MethodNotAllowed = "ERR_METHOD_NOT_ALLOWED", 405, "Method not allowed through the sidecar", Some(Representation);
    MethodOverride = "ERR_METHOD_OVERRIDE", 400, "Method override headers are refused on writes", Some(Representation);
    // Issue 44: a query a contract's parameters are checked on is read whole or refused,
    // never checked on a prefix the upstream reads past.
    QueryTooLong = "ERR_QUERY_TOO_LONG", 414, "Query string too long to check", Some(Representation);
    QueryTooManyPairs = "ERR_QUERY_TOO_MANY_PAIRS", 400, "Query string has too many parameters to check", Some(Representation);
    // Issue 44, RFC 9113 §8.3.1: `:authority` (or an absolute-form target) and `Host` name
    // two hosts; the sidecar would decide on one and the upstream might read the other.
    AuthorityMismatch = "ERR_AUTHORITY_MISMATCH", 400, "Host differs from the request's authority", Some(Representation);
    // Issue 44, RFC 9700 §2.4.2 / RFC 6750 §2.3: with admission on, a bearer token is never
    // taken from, or forwarded in, a URL.
    TokenInQuery = "ERR_TOKEN_IN_QUERY", 400, "Access token in the query string", Some(Identity);
    // SPEC §9: a mutating admin call without the admin token. An operator's error, not drift.
    AdminUnauthorized = "ERR_ADMIN_UNAUTHORIZED", 401, "Admin credential required", None;
    // SPEC §9: what a web page could send to the admin listener (a cross-site or foreign-origin
    // request; a mutating one that is not JSON) is refused whether or not a credential is set.
    AdminCrossSite = "ERR_ADMIN_CROSS_SITE", 403, "Cross-site admin request refused", None;
    AdminMediaType = "ERR_ADMIN_MEDIA_TYPE", 415, "Admin request body must be application/json", None;
    // SPEC §5.4, §9: the same approver twice on one held write (one name counts once). An
    // operator's conflict, like ERR_ESCROW_NOT_HELD; not drift.
    ApprovalRepeated = "ERR_APPROVAL_REPEATED", 409, "This approver has approved this write already", None;
    // SPEC §10: the fence store is part of enforcement, so its loss is fence drift.
    StoreUnavailable = "ERR_STORE_UNAVAILABLE", 503, "State store unavailable", Some(Fence);
    // Data plane (SPEC §3). Not drift: nothing violated a binding.
    // SPEC §13, AIP-2.1 quote channel (seed 001 §8.2).
    QuoteMalformed = "ERR_QUOTE_MALFORMED", 400, "Quote-channel message malformed", Some(Structural);
    QuoteChannel = "ERR_QUOTE_CHANNEL", 400, "Message not bound to this quote channel", Some(Representation);
    QuoteChainUnknown = "ERR_QUOTE_CHAIN_UNKNOWN", 400, "Chain not accepted by this quote channel", Some(Representation);
    QuoteSignature = "ERR_QUOTE_SIGNATURE", 401, "Quote-channel signature invalid", Some(Identity);
    QuoteExpired = "ERR_QUOTE_EXPIRED", 410, "Quote-channel message expired", Some(Lease);
    QuoteNonceReused = "ERR_QUOTE_NONCE_REUSED", 409, "Nonce already used by another message", Some(Idempotency);
    RateLimited = "ERR_RATE_LIMITED", 429, "Rate limit exceeded", Some(Rate);
    // SPEC §14: a runaway agent stopped. Over a write budget (a rule of `[budgets]`), and
    // under an operator's freeze.
    WriteBudget = "ERR_WRITE_BUDGET", 429, "Write budget exhausted", Some(Rate);
    Frozen = "ERR_FROZEN", 423, "Writes frozen by an operator", Some(Freeze);
    // SPEC §15: an operator's rule (`rules.file`, action `deny`) stops this write; the problem
    // names the rule.
    PolicyDenied = "ERR_POLICY_DENIED", 403, "Write denied by an operator rule", Some(Policy);
    // Seed 001 §6.3: the negotiation relay's per-transaction cap (drift: an agent past its
    // share), and its whole store's (capacity, not drift).
    RelayTxFull = "ERR_RELAY_TX_FULL", 429, "Per-transaction message cap reached", Some(Rate);
    RelayFull = "ERR_RELAY_FULL", 503, "Negotiation relay full", None;

    // SPEC §13, RICH admission (seed 002 §12): a caller without a valid token, and a token that
    // does not name the operation, its contract digest, or a bound the call keeps to.
    TokenInvalid = "ERR_TOKEN_INVALID", 401, "Access token missing or invalid", Some(Identity);
    NotAdmitted = "ERR_NOT_ADMITTED", 403, "Operation not admitted by the access token", Some(Identity);

    // AGTP-RCNS (seed 000 §3.6, §3.1; issue 21). The seed's statuses; its `reason` words travel
    // in the problem's `reason`. 262 is a refusal in the 2xx range: the seed's, not ours.
    RcnsMethod = "ERR_RCNS_METHOD", 459, "Method violation", Some(Negotiation);
    RcnsPath = "ERR_RCNS_PATH", 460, "Endpoint violation", Some(Negotiation);
    RcnsProposal = "ERR_RCNS_PROPOSAL", 400, "Proposal malformed", Some(Negotiation);
    RcnsScopeRequired = "ERR_RCNS_SCOPE_REQUIRED", 262, "Authorization required", Some(Negotiation);
    RcnsScopeExceeded = "ERR_RCNS_SCOPE_EXCEEDED", 455, "Scope violation", Some(Negotiation);
    RcnsRejected = "ERR_RCNS_REJECTED", 463, "Proposal rejected", Some(Negotiation);
    /// The four-lock gate, and a synthesized contract that cannot be used (`rcns-disabled`,
    /// `trust-tier-insufficient`, `contract-not-yours`, `contract-revoked`).
    RcnsRefused = "ERR_RCNS_REFUSED", 464, "Negotiation refused", Some(Negotiation);
    /// A step of a synthesized endpoint could not be built or did not succeed; the steps
    /// before it were compensated. 502; 422 when the step's request cannot be built.
    RcnsStepFailed = "ERR_RCNS_STEP_FAILED", 502, "A composed step failed", None;
    /// Confirm-first delivery: an unregistered pair addressed implicitly (seed 000 §3.1).
    RcnsProposeFirst = "ERR_RCNS_PROPOSE_FIRST", 461, "Negotiation required", None;

    BodyTooLarge = "ERR_BODY_TOO_LARGE", 413, "Request body too large", None;
    ResponseTooLarge = "ERR_RESPONSE_TOO_LARGE", 502, "Upstream response too large to check", None;
    UpstreamUnavailable = "ERR_UPSTREAM_UNAVAILABLE", 502, "Upstream unavailable", None;
    UpstreamTimeout = "ERR_UPSTREAM_TIMEOUT", 504, "Upstream timed out", None;
    BadRequest = "ERR_BAD_REQUEST", 400, "Bad request", None;
    NotFound = "ERR_NOT_FOUND", 404, "Not found", None;
    Internal = "ERR_INTERNAL", 500, "Internal error", None;
}

impl ErrorCode {
    /// The problem `type` URI: `urn:palisade:error:` + the code without `ERR_`, in kebab case
    /// (`ERR_STALE_FENCE_EPOCH` → `urn:palisade:error:stale-fence-epoch`).
    pub fn problem_type(self) -> String {
        let name = self.as_str().trim_start_matches("ERR_");
        format!(
            "urn:palisade:error:{}",
            name.to_ascii_lowercase().replace('_', "-")
        )
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Policy's answer to a request that must not pass. Not an error: nothing broke.
///
/// `detail` names fields and rules, never their contents (SPEC §6), so it is safe to send to
/// the client and to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub detail: Cow<'static, str>,
    /// A machine-readable sub-reason, e.g. `pre-image-mismatch` (SPEC §5.2 check 12).
    pub reason: Option<&'static str>,
    /// Overrides the table's status where the SPEC gives one code two statuses.
    pub status: Option<u16>,
    /// Where a contract was violated: a JSON pointer into the payload (never its value).
    pub location: Option<String>,
}

impl Refusal {
    pub fn new(code: ErrorCode, detail: impl Into<Cow<'static, str>>) -> Self {
        Self {
            code,
            detail: detail.into(),
            reason: None,
            status: None,
            location: None,
        }
    }

    pub fn with_location(mut self, pointer: impl Into<String>) -> Self {
        self.location = Some(pointer.into());
        self
    }

    pub fn with_reason(mut self, reason: &'static str) -> Self {
        self.reason = Some(reason);
        self
    }

    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    pub fn status(&self) -> u16 {
        self.status.unwrap_or_else(|| self.code.status())
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.detail)
    }
}

#[cfg(test)]
mod tests;
