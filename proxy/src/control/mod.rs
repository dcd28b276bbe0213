//! The operator's side: the admin listener, the bundle holder and its reloads, escrow
//! decisions.
//!
//! Above the request layers: it reads and swaps what they use ([`crate::context::AppState`]'s
//! bundle) and calls into `enforce` and `mcp` to release held writes; none of them calls
//! back into it.
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`, `/admin/v1/…`; [`admin_auth`]: its token;
//! - [`bundle`]: the RICH bundle a configuration names, loaded and compiled;
//! - [`reload`]: swapping it (admin call, SIGHUP, file watch) without a torn read;
//! - [`escrow`]: approve, reject and list held writes; [`escrow_view`]: one of them as the
//!   operator decides on it;
//! - [`console`]: the operators' web console (`/ui/`), static assets built into the binary;
//! - [`drift_stream`]: drift events as they arrive (Server-Sent Events);
//! - [`rcns`]: list and revoke synthesized contracts;
//! - [`log`]: the receipt log, read-only (checkpoint, key, tiles, proofs);
//! - [`witnesses`]: submitting its checkpoints to witnesses for cosignatures.

pub mod admin;
pub mod admin_auth;
mod admin_origin;
pub mod approvals;
pub mod bundle;
pub mod candidate;
pub mod console;
pub mod drift_stream;
pub mod escrow;
pub mod escrow_expiry;
pub mod escrow_view;
pub mod freeze;
pub mod log;
pub mod rcns;
pub mod receipts;
pub mod reload;
pub mod rules;
pub mod witnesses;
