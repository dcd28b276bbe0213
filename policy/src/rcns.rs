//! AGTP-RCNS (seed 000; issue 21): runtime contract negotiation, decided.
//!
//! An agent that needs an operation the SoR does not serve PROPOSEs one; the sidecar
//! synthesizes it from an operator-authored recipe that composes capabilities the RICH
//! bundle already binds, or refuses with the seed's reasoned status. This module is the
//! pure part:
//!
//! - [`recipes`]: the recipe set (pinned in the bundle, compiled and hot-swapped with it);
//! - [`callers`]: who may negotiate: identity → agent id, Authority-Scope grants, trust tier;
//! - [`proposal`]: the PROPOSE body, both forms of seed §3.4;
//! - [`evaluate`]: the four-lock gate and the evaluation order of seed §3.6;
//! - [`contract`]: the synthesized contract, its `contract_hash`;
//! - [`compose`]: a step's request and the composed answer, from the recipe's mappings.
//!
//! The proxy's `rcns` layer does the I/O: the store, rate limits, receipts, answers.

pub mod callers;
pub mod compose;
pub mod contract;
pub mod evaluate;
pub mod proposal;
pub mod recipes;

pub use callers::{Caller, Callers};
pub use contract::SynthesizedContract;
pub use evaluate::{Gate, Matched};
pub use proposal::Proposal;
pub use recipes::{Recipe, RecipeSet};

/// The scope token that opens lock 3 of the gate (seed 000 §7.3).
pub const SCOPE_NEGOTIATE: &str = "rcns:negotiate";
/// The scope that lists every agent's contracts (seed 000 §4.2).
pub const SCOPE_INSPECT_ALL: &str = "inspect:all";

/// Whether `s` is a scope token: 1–128 visible ASCII characters, no space or quote (RFC 6749
/// §3.3's `scope-token`, which Authority-Scope lists the same way).
pub fn is_scope_token(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

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

#[cfg(test)]
mod tests;
