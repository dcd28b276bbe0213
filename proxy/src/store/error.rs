//! Why a store call failed.

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be used (I/O error, corrupt file, the writer thread is gone). Writes
    /// are refused with 503 `ERR_STORE_UNAVAILABLE`; reads keep flowing.
    #[error("state store unavailable: {0}")]
    Unavailable(String),
    /// The connection was lost after `COMMIT` was sent: the transaction may or may not have
    /// happened. Treated as a refusal (nothing is forwarded on it) and never retried blindly:
    /// a write whose fence may have advanced is refused as stale on a retry, not run twice.
    #[error("state store commit outcome unknown: {0}")]
    Uncertain(String),
}
