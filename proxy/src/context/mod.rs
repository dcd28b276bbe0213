//! What every request handler is handed: the server's state and the facts of one request.
//!
//! The bottom of the request-handling layers (docs/architecture.md): the pipeline, the
//! protocol surfaces (`authority`, `mcp`) and `enforce` all import from here, and nothing here
//! imports them. It may use only `config`, `clock`, `net`, `telemetry` and `store`.
//! - [`AppState`]: one per server: configuration, metrics, the bundle in force, the upstream
//!   clients, and [`Enforcement`] when writes are enforced;
//! - [`Enforcement`]: the handles write enforcement needs (key, trust, store, locks, clock,
//!   drift sink), built once at start;
//! - [`WriteContext`] and [`Binding`]: what one request is decided by and named as;
//! - [`Call`]: one routed request as its stage holds it (state, connection, context);
//! - `locks`: in-memory tables shared by the requests of one process.

mod admission;
mod app;
mod call;
mod candidate;
mod cosigned;
mod enforcement;
mod freezes;
mod locks;
mod rcns;
mod request;
mod signatures;

pub use admission::{load_keys, AdmissionState, Admitted};
pub use app::{AppState, Plane, QuoteChannelState, Recorder};
pub use call::Call;
pub use candidate::{Candidate, Tally as ShadowTally};
pub use cosigned::Cosigned;
pub use enforcement::Enforcement;
pub use freezes::{Freezes, POLL as FREEZE_POLL};
pub use locks::{Drifted, FirstSeen, ToolsChecked};
pub use rcns::RcnsState;
pub use request::{Binding, Outcome, Routed, WriteContext};
pub use signatures::SignatureQueue;
