//! RICH connectors (§9): deterministic artifacts that turn one contract's payload into
//! another's. This module holds the transformation profiles; the connector artifact, its
//! pinning in the bundle and its place on the data plane come next (issue 23).
//!
//! - [`t1`]: the restricted T1 profile, JMESPath with limits that bound size and work.

pub mod artifact;
pub mod t1;

pub use artifact::{Class, Connector, ConnectorError};
