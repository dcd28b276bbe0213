//! The policy crate against external vectors, one test binary: RFC 8785 JCS, RFC 8032 and
//! Wycheproof Ed25519 (`../testdata/`), and AIP-2.1 messages signed by the agirails SDK
//! (`aip2_sdk.json`).

mod aip2;
mod ed25519;
mod jcs;
mod tlog;
