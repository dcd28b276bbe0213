//! The scopes negotiation reads: the two the seed names, and what `Authority-Scope` claims.

use crate::recipes::is_scope_token;

/// The scope token that opens lock 3 of the gate (seed 000 §7.3).
pub const SCOPE_NEGOTIATE: &str = "rcns:negotiate";
/// The scope that lists every agent's contracts (seed 000 §4.2).
pub const SCOPE_INSPECT_ALL: &str = "inspect:all";

/// The scopes an `Authority-Scope` header claims: space-separated tokens; anything else in it
/// claims nothing (at most 64 tokens are read).
pub fn claimed_scopes(header: Option<&str>) -> std::collections::BTreeSet<String> {
    header
        .unwrap_or("")
        .split([' ', ','])
        .filter(|t| is_scope_token(t))
        .take(64)
        .map(str::to_owned)
        .collect()
}
