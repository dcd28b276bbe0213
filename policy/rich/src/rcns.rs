//! AGTP-RCNS (seed 000; issue 21): runtime contract negotiation, decided.
//!
//! An agent that needs an operation the SoR does not serve PROPOSEs one; the sidecar
//! synthesizes it from an operator-authored recipe that composes capabilities the RICH
//! bundle already binds, or refuses with the seed's reasoned status. This module is the
//! pure part:
//!
//! - [`recipes`]: the recipe set (pinned in the bundle, compiled and hot-swapped with it;
//!   it lives in `rich`, with the bundle, and rcns decides over it);
//! - [`callers`]: who may negotiate: identity → agent id, Authority-Scope grants, trust tier;
//! - [`proposal`]: the PROPOSE body, both forms of seed §3.4;
//! - [`evaluate`]: the four-lock gate and the evaluation order of seed §3.6;
//! - [`contract`]: the synthesized contract, its `contract_hash`;
//! - [`invocation`]: whether a request may invoke a synthesized contract;
//! - [`compose`]: a step's request and the composed answer, from the recipe's mappings.
//!
//! The proxy's `rcns` layer does the I/O: the store, rate limits, receipts, answers.

pub mod callers;
pub mod compose;
pub mod contract;
pub mod evaluate;
pub mod invocation;
pub mod proposal;
pub mod scopes;
/// The recipe set lives with the bundle it is pinned in (`rich::recipes`); named here too.
pub use crate::recipes;

pub use crate::recipes::{is_scope_token, Recipe, RecipeSet};
pub use callers::{Caller, Callers};
pub use contract::SynthesizedContract;
pub use evaluate::{Gate, Matched};
pub use proposal::Proposal;
pub use scopes::{claimed_scopes, SCOPE_INSPECT_ALL, SCOPE_NEGOTIATE};

#[cfg(test)]
mod tests;
