//! RICH connectors (§9): deterministic artifacts that turn one contract's payload into
//! another's. The lockfile's `connections` pin them ([`super::connections`]); the sidecar
//! runs them on the data plane (`proxy/src/pipeline/connect.rs`).
//!
//! - [`artifact`]: the connector document (§9.1), compiled; its qualification check.
//! - [`t1`]: the restricted T1 profile, JMESPath with limits that bound size and work.

pub mod artifact;
pub mod t1;

pub use artifact::{Class, Connector, ConnectorError};
