//! Palisade's primitives, shared by every crate that decides (issue 55, "crates that show the
//! architecture"): what a signed or hashed document is, byte for byte.
//!
//! - [`json`]: a strict I-JSON (RFC 7493) parser, the only way untrusted JSON enters a decision.
//! - [`canon`]: RFC 8785 JSON Canonicalization Scheme over parsed values.
//! - [`digest`]: SHA-256 digests in their `sha256:`, `sha-256:` and `ni:` spellings.
//! - [`keys`]: Ed25519 keys, key ids, the trust store of lease issuers, batched verification.
//! - [`codes`]: the single table of `ERR_*` codes (status, title, problem type, drift category).
//!
//! Pure, like `palisade-policy`: no sockets, files, runtime or clock.
#![forbid(unsafe_code)]

pub mod canon;
pub mod codes;
pub mod digest;
pub mod json;
pub mod keys;

pub use codes::{DriftCategory, ErrorCode, Refusal};
pub use digest::Sha256Digest;
