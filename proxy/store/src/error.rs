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

impl StoreError {
    /// The refusal of a write the store could not record: 503 `ERR_STORE_UNAVAILABLE`, its
    /// detail saying whether the fence may have moved. Logged here, once per refusal.
    pub fn into_refusal(self) -> palisade_policy::Refusal {
        use palisade_policy::{ErrorCode, Refusal};
        tracing::warn!(error = %self, "store unavailable; refusing the write");
        match self {
            StoreError::Unavailable(_) => Refusal::new(
                ErrorCode::StoreUnavailable,
                "the state store cannot record this write",
            ),
            // Not retried: the fence may have advanced, so running it again could not be
            // undone as the lease says. Nothing was forwarded.
            StoreError::Uncertain(_) => Refusal::new(
                ErrorCode::StoreUnavailable,
                "the state store lost its connection while committing this write, so whether its fence \
                 advanced is unknown; nothing was forwarded, and a retry under the same lease may be \
                 refused as stale (take a new lease)",
            ),
        }
    }
}
