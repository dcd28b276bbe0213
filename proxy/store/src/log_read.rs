//! Reading the receipt log out of a [`Store`]: computations over its stored hashes (proofs,
//! tiles) with the hashes they need fetched first, and the whole log for `audit verify`.

use palisade_policy::log::audit::{self, AuditError, Audited, Prefetch};
use palisade_policy::log::merkle::{self, Hash};
use palisade_policy::log::{Head, LogError, LogKey};

use super::{Store, StoreError};

/// Stored hashes read per query when the whole tree is read.
const CHUNK: u64 = 8192;
/// Largest tree `audit verify` rebuilds: it holds the tree in memory (64 bytes an entry, so
/// 2^28 entries is 16 GiB); a larger claim is refused rather than allocated.
pub const MAX_AUDITED: u64 = 1 << 28;

/// Runs `f` over the log's stored hashes: once to learn which it reads, then over those,
/// fetched in one read.
pub async fn compute<T>(
    store: &dyn Store,
    f: impl Fn(&Prefetch) -> Result<T, LogError>,
) -> Result<Result<T, LogError>, StoreError> {
    let recording = Prefetch::recording();
    let _ = f(&recording);
    let wanted = recording.asked();
    let hashes = store.log_hashes(wanted.clone()).await?;
    Ok(f(&Prefetch::answering(wanted.into_iter().zip(hashes))))
}

/// Every stored hash of the tree of `size` entries, in index order.
pub async fn all_hashes(store: &dyn Store, size: u64) -> Result<Vec<Hash>, StoreError> {
    if size > MAX_AUDITED {
        return Err(StoreError::Unavailable(format!(
            "a log of {size} entries is larger than audit verify rebuilds in memory ({MAX_AUDITED})"
        )));
    }
    let count = merkle::stored_hash_count(size);
    let mut out = Vec::with_capacity(usize::try_from(count).unwrap_or(0));
    let mut from = 0;
    while from < count {
        let to = (from + CHUNK).min(count);
        out.extend(store.log_hashes((from..to).collect()).await?);
        from = to;
    }
    Ok(out)
}

/// Reads the whole log at its newest head and audits it under `key`.
pub async fn audit(
    store: &dyn Store,
    key: &LogKey,
) -> Result<(Head, Result<Audited, AuditError>), StoreError> {
    let head = store.log_head().await?;
    let hashes = all_hashes(store, head.size).await?;
    let entries = store.log_entries(0, head.size).await?;
    let audited = audit::verify_log(
        head.note.as_bytes(),
        key,
        &hashes,
        entries.iter().map(|(i, e)| (*i, e.as_slice())),
    );
    Ok((head, audited))
}
