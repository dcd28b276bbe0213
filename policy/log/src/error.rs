//! Why a log check failed, named so that `audit verify` and `receipt verify` can say what.

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    #[error("checkpoint: {0}")]
    Checkpoint(String),
    #[error("checkpoint signature: {0}")]
    Signature(String),
    #[error("the checkpoint names the log {found:?}, not {expected:?}")]
    Origin { expected: String, found: String },
    #[error("entry {index} is beyond the checkpoint's tree of size {size}")]
    IndexBeyondTree { index: u64, size: u64 },
    #[error("the inclusion proof of entry {index} does not lead to the checkpoint's root")]
    Inclusion { index: u64 },
    #[error("the tree of size {new} is not consistent with the tree of size {old}")]
    Consistency { old: u64, new: u64 },
    #[error("proof hash {position}: {why}")]
    ProofEncoding { position: usize, why: String },
    #[error("the receipt is not canonical JSON: {0}")]
    Receipt(String),
    #[error("tile {path}: {why}")]
    Tile { path: String, why: String },
    #[error("the log's stored hashes cannot be read: {0}")]
    Hashes(String),
}
