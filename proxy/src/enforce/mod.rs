//! Write enforcement (SPEC §5) and what a decided request leaves behind.
//!
//! ```text
//! write::run → Written (the answer, its receipt, its code: typed, never read back)
//!   → idempotency::begin           Idempotency-Key: replay, 409, 422, or reserve (§5.6)
//!   → checks::check                checks 1–12 in SPEC order → Permit (facts, permit, preimage)
//!   → send::forward | dry run | escrow::hold
//!   → receipts::commit             commit receipt + key outcome, one durable transaction
//! any refusal → receipts::record   the one refusal path: metric, rejection receipt, drift
//!                                  event → Refused, which each surface renders once
//!                                  (problem+json, JSON-RPC error, escrow record, RCNS step)
//! own::Own                         the sidecar's own answer, a Refused or a typed Failure,
//!                                  until the surface renders it (stages return Result)
//! ```
//! Beside the write path: [`forward`] (a request sent as it is, for reads and unenforced
//! writes), [`output`] (output contracts on answers), [`identity`] (a deployment-identity
//! mismatch reported). Decisions are the policy crate's; this layer gathers their inputs
//! (store reads, the pre-image GET) and acts on them. It may use `context` and the layers
//! below it, never `mcp`, `authority`, `pipeline` or `control`.

pub mod checks;
pub mod contract;
pub mod delivery;
pub mod engine;
pub mod escrow;
pub mod facts;
pub mod forward;
pub mod idempotency;
pub mod identity;
pub mod output;
pub mod own;
pub mod permit;
pub mod preimage;
pub mod receipts;
pub mod rules;
pub mod send;
pub mod settle;
pub mod shadow;
pub mod slack;
pub mod stop;
pub mod verdict;
pub mod write;
pub mod written;
