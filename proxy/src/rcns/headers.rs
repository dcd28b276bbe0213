//! The names RCNS puts on the wire, and reading the request headers it takes: consent,
//! `Session-Id`, `Idempotency-Key`.

use palisade_policy::{ErrorCode, Refusal};

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

/// The `Session-Id` the agent names, if any. One that is not a session token is refused, not
/// replaced by a new session: an agent that went on under the id it sent would find its
/// contract "in another session" at its first call (issue 44, docs/decisions.md).
pub(super) fn session_of(parts: &http::request::Parts) -> Result<Option<String>, Refusal> {
    let mut lines = parts.headers.get_all(SESSION).iter();
    let Some(v) = lines.next() else {
        return Ok(None);
    };
    match v.to_str() {
        Ok(v) if valid_token(v) && lines.next().is_none() => Ok(Some(v.to_owned())),
        _ => Err(Refusal::new(
            ErrorCode::RcnsProposal,
            "Session-Id must be one header of 1 to 128 letters, digits, '.', '_', ':' or '-'",
        )
        .with_reason("proposal-malformed")
        .with_location("/headers/session-id")),
    }
}

fn valid_token(v: &str) -> bool {
    (1..=128).contains(&v.len())
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
}

/// `Idempotency-Key`, if sent: 1–255 visible ASCII characters.
pub(super) fn idempotency_key(parts: &http::request::Parts) -> Result<Option<String>, Refusal> {
    let Some(v) = parts.headers.get("idempotency-key") else {
        return Ok(None);
    };
    match v.to_str() {
        Ok(k) if (1..=255).contains(&k.len()) && k.bytes().all(|b| (0x21..=0x7e).contains(&b)) => {
            Ok(Some(k.to_owned()))
        }
        _ => Err(Refusal::new(
            ErrorCode::RcnsProposal,
            "Idempotency-Key must be 1 to 255 visible ASCII characters",
        )
        .with_reason("proposal-malformed")),
    }
}
