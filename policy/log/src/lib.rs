//! `palisade-log`: the receipt log (SPEC §5.5), an append-only Merkle tree of receipts, hashed
//! as RFC 9162 §2.1 says, committed to by C2SP tlog-checkpoint signed notes and published as C2SP
//! tlog-tiles. Pure: the store keeps the hashes and entries and hands them in through
//! [`merkle::HashReader`]; what a client or an auditor checks is checked here.
//!
//! ```text
//! entry = JCS(receipt)          leaf = SHA-256(0x00 ‖ entry)     node = SHA-256(0x01 ‖ l ‖ r)
//! checkpoint = "<origin>\n<size>\n<base64 root>\n" + "\n— <origin> <base64(key ID ‖ sig)>\n"
//! envelope (what a client gets) = {receipt, index, inclusion, checkpoint}
//! ```
//!
//! A crate of its own (issue 55) so that whoever verifies receipts — `palisade audit verify`,
//! the witness, an auditor's program — needs only this and `palisade-core`, not the rest of
//! the policy. `palisade_policy::log` is this crate.
#![forbid(unsafe_code)]

pub mod audit;
pub mod batch;
pub mod checkpoint;
pub mod envelope;
pub mod error;
pub mod merkle;
pub mod seal;
pub mod tiles;
pub mod witness;

pub mod query;
pub mod receipt;

pub use checkpoint::{Checkpoint, LogKey};
pub use envelope::Envelope;
pub use error::LogError;
pub use seal::{Head, Sealed, Signer};
