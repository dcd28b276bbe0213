//! Palisade's deciding core.
//!
//! Everything here is pure: no sockets, no files, no runtime, no clock reads. Functions take
//! bytes, parsed values and the current time as arguments and return values (`VerifiedLease`,
//! `Refusal`, signed receipts). The `palisade` crate gathers the data (headers, store reads,
//! upstream answers) and acts on what this crate decides.
//!
//! What lives here:
//! - [`json`]: a strict I-JSON (RFC 7493) parser, the only way untrusted JSON enters a decision.
//! - [`canon`]: RFC 8785 JSON Canonicalization Scheme over parsed values.
//! - [`caller`]: the caller an `Authorization` value names, one per credential.
//! - [`digest`]: SHA-256 digests in their `sha256:`, `sha-256:` and `ni:` spellings.
//! - [`codes`]: the single table of `ERR_*` codes (status, title, problem type, drift category).
//! - [`keys`]: Ed25519 keys, key ids and the trust store of lease issuers.
//! - [`lease`]: the PTCL lease model and its verification (SPEC §5.2 checks 2–8).
//! - [`receipt`]: signed, hash-chained receipts and chain verification.
//! - [`target`]: RFC 3986 normalisation of `sor_target_uri` for check 7, resource keys.
//! - [`fence`]: checks 11–12 (epoch, pre-image digest of a fetched representation).
//! - [`inverse`]: the inverse payload's shape and check 10.
//! - [`drift`]: drift events (SPEC §8) built from refusals, carrying digests, never values.
//! - [`aip2`]: the AIP-2.1 quote channel's checks (EIP-712 signatures, path binding, TTL).
//!
//! RICH (bundles, contracts, RCNS and admission) is `palisade-rich`, which builds on this
//! crate's PTCL vocabulary.
//!
//! What does not: anything that waits, reads a file or a clock, or talks to a peer.
#![forbid(unsafe_code)]

pub mod budget;
pub mod caller;
pub mod drift;
pub mod fence;
pub mod freeze;
pub mod inverse;
pub mod lease;
pub mod method;
pub mod path;
pub mod target;

// The primitives and the receipt log are crates of their own (issue 55): `palisade-core`
// and `palisade-log`, re-exported at the paths every caller has always used.
pub use palisade_core::{canon, codes, digest, json, keys};
pub use palisade_log as log;
pub use palisade_log::receipt;
// AIP-2.1 too (`palisade-aip2`): it needs only the primitives.
pub use palisade_aip2 as aip2;

pub use codes::{DriftCategory, ErrorCode, Refusal};
pub use digest::Sha256Digest;
