//! Whether a synthesized contract may be invoked by this request (seed 000 §3.8, §4.2): by the
//! agent it belongs to, in its session when it is session-scoped, not revoked, at the method
//! and path it serves, with every Authority-Scope its steps need both granted to the caller
//! (its identity document may have lost one since) and claimed on the request. Pure: the
//! caller looks the contract up and reads the request.

use std::collections::BTreeSet;

use super::contract::SynthesizedContract;
use palisade_policy::{ErrorCode, Refusal};

/// What an invocation brings.
#[derive(Debug, Clone, Copy)]
pub struct Invoking<'a> {
    /// The caller's agent id (from the callers file).
    pub agent_id: &'a str,
    /// The request's `Session-Id`.
    pub session: Option<&'a str>,
    pub method: &'a str,
    pub path: &'a str,
    /// The scopes the caller's identity document grants.
    pub granted: &'a BTreeSet<String>,
    /// The scopes the request claims (`Authority-Scope`).
    pub claimed: &'a BTreeSet<String>,
}

/// An invocation refused, and the scopes it lacks when that was why (the answer names them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotInvocable {
    pub refusal: Refusal,
    pub missing_scopes: Vec<String>,
}

impl From<Refusal> for NotInvocable {
    fn from(refusal: Refusal) -> Self {
        Self {
            refusal,
            missing_scopes: Vec::new(),
        }
    }
}

/// Decides whether `inv` may run `contract`'s steps, in the order the answers are given: whose
/// and which session (464 `contract-not-yours`), revoked (464 `contract-revoked`), method and
/// path (404), scopes granted (455 `scope-exceeded`), scopes claimed (262 `scope-required`).
pub fn check(contract: &SynthesizedContract, inv: &Invoking<'_>) -> Result<(), NotInvocable> {
    let not_yours = if contract.originating_agent_id != inv.agent_id {
        Some("the contract belongs to another agent")
    } else if contract.session.is_some() && contract.session.as_deref() != inv.session {
        Some("the contract belongs to another session (send its Session-Id)")
    } else {
        None
    };
    if let Some(why) = not_yours {
        return Err(Refusal::new(ErrorCode::RcnsRefused, why)
            .with_reason("contract-not-yours")
            .into());
    }
    if contract.revoked {
        return Err(
            Refusal::new(ErrorCode::RcnsRefused, "the operator revoked this contract")
                .with_reason("contract-revoked")
                .into(),
        );
    }
    if inv.method != contract.method || inv.path != contract.path {
        return Err(Refusal::new(
            ErrorCode::NotFound,
            "this contract serves another method and path (see INSPECT target=contract)",
        )
        .into());
    }
    let lacking = |have: &BTreeSet<String>| -> Vec<String> {
        contract
            .required_scopes
            .iter()
            .filter(|s| !have.contains(*s))
            .cloned()
            .collect()
    };
    for (missing, code, reason) in [
        (
            lacking(inv.granted),
            ErrorCode::RcnsScopeExceeded,
            "scope-exceeded",
        ),
        (
            lacking(inv.claimed),
            ErrorCode::RcnsScopeRequired,
            "scope-required",
        ),
    ] {
        if !missing.is_empty() {
            return Err(NotInvocable {
                refusal: Refusal::new(
                    code,
                    "the contract's steps need authority the caller does not hold or claim",
                )
                .with_reason(reason),
                missing_scopes: missing,
            });
        }
    }
    Ok(())
}
