//! Palisade, the sidecar: everything that does I/O.
//!
//! The deciding happens in `palisade-policy`; this crate gathers what the decisions need
//! (headers, bodies, files, the upstream's answers), asks, and acts. Its folders are layers,
//! each importing only the ones below it (docs/architecture.md; `tests/it/architecture.rs`
//! fails on a cycle):
//!
//! ```text
//! cli            commands, demo, sample SoR and bundle, replay
//! server         listeners, TLS, HTTP/1.1 and HTTP/2, limits, graceful drain
//! control        admin listener, bundle holder and reload, escrow decisions
//! pipeline       one request from head to response, stage by stage
//! rcns           AGTP-RCNS: PROPOSE, synthesized contracts, their inventory
//! authority      the PTCL lease endpoints (grant, stage, compensate, look up)
//! aip            the AIP-2.1 quote channel and negotiation relay
//! mcp            MCP over Streamable HTTP: tool calls through the write path, pinning
//! admission      RICH admission: bearer tokens that name contract digests
//! enforce        write checks, idempotency, escrow, output contracts, receipts, forward
//! context        AppState, Enforcement handles, the facts of one request
//! store          what survives a crash (trait, embedded backend)
//! telemetry      metrics, logs, drift sinks
//! net            bodies, headers, TLS, the upstream client, problem+json, JSON-RPC
//! config, clock, fs   leaves
//! ```
#![forbid(unsafe_code)]

pub mod admission;
pub mod aip;
pub mod authority;
pub mod cli;
pub mod clock;
pub mod config;
pub mod context;
pub mod control;
pub mod enforce;
pub mod fs;
pub mod mcp;
pub mod net;
pub mod pipeline;
pub mod rcns;
pub mod server;
pub mod store;
pub mod telemetry;
