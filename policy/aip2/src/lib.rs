//! `palisade-aip2`: AGIRAILS AIP-2.1 (seed 001), the quote channel's security model (§8.2) and
//! the messages it carries. Pure: the nonce store, the rate limit and the relay's storage are
//! the proxy's. A crate of its own (issue 55): it needs only `palisade-core`, and the
//! secp256k1, Keccak and EIP-712 code is built and tested apart from the rest of the policy;
//! `palisade_policy::aip2` is this crate.
//!
//! - [`eip712`]: typed-data hashing of flat structs, secp256k1 signer recovery (low-s only).
//! - [`message`]: the three message types, their JSON Schemas and EIP-712 types.
//! - [`guard`]: one posted message → [`guard::Checked`] or a [`palisade_core::Refusal`].

#![forbid(unsafe_code)]

pub mod eip712;
pub mod guard;
pub mod message;

pub use guard::{check, check_on, Channel, Checked, Party, Rules};
pub use message::Kind;
