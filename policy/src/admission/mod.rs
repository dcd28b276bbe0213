//! RICH admission (seed 002 §12, SPEC §13): a call to a bound operation is admitted only under
//! an access token whose `authorization_details` name the operation and the digest of the
//! contract in force, and whose granted bound the call's input keeps to.
//!
//! - [`token`]: JWT access tokens (RFC 9068) against the issuers' JWKS.
//! - [`grant`]: the `rich_binding` entries, the decidable fragment of bounds, the decision.

pub mod grant;
pub mod token;

pub use grant::{admit, check_input, needed, Bound, Call, Grant, Operation};
pub use token::{verify, Keys, Rules, Verified};
