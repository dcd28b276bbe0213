//! The names RCNS puts on the wire, and reading its consent header.

/// Most contracts the admin list shows.
pub const MAX_ADMIN_LISTED: usize = 10_000;

/// The sidecar's AGTP paths (SPEC §3 reserves the prefix).
pub const WELL_KNOWN: &str = "/.well-known/agtp/";
/// Request header: the agent consents to negotiation (lock 2 of the gate).
pub const ALLOW_RCNS: &str = "allow-rcns";
/// Request and response header naming a synthesized contract.
pub const CONTRACT_SYNTHESIZED: &str = "contract-synthesized";
/// The caller's claimed Authority-Scope tokens.
pub const AUTHORITY_SCOPE: &str = "authority-scope";
/// The session a session-scoped contract belongs to (ours: seed 000 §3.8 leaves the HTTP
/// spelling open).
pub const SESSION: &str = "session-id";

/// Response header of a composed invocation: its steps' commit receipts, a base64url JSON
/// array (ours: one `Agent-Commit-Receipt` cannot hold several).
pub const STEP_RECEIPTS: &str = "agent-commit-receipts";

/// `Allow-RCNS: true` (or the structured-field boolean `?1`).
pub fn allowed(v: Option<&http::HeaderValue>) -> bool {
    v.and_then(|v| v.to_str().ok())
        .map(str::trim)
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "?1")
}
