//! Audit export's reader (SPEC §9): the receipts of the log that a [`Filter`] asks for, a page
//! at a time, each with its inclusion proof in the newest checkpoint's tree. One reader for
//! `GET /admin/v1/receipts`, the approval register and `palisade audit export`, on either
//! store: it reads through [`Store`] alone.
//!
//! What bounds a request: at most [`SCAN`] entries are read from where the page starts.
//! A page ends when `limit` receipts matched, when the scan bound is reached, or when the log
//! (or `until`) is passed; [`Page::next`] then says where the next one starts.
//!
//! How `since` finds its start without reading the whole log: the log is its own time index.
//! Entries are appended in the order their writes were decided, so their `at` rises with the
//! index, except for the few milliseconds between a receipt's making and its batch's
//! integration, and for the clock skew of replicas that share a log. A binary search over
//! the entries' `at` (one entry read a step: 30 reads for a billion entries) finds the first
//! entry at or after `since − SKEW`; the filter then judges each entry's own `at` exactly.
//! Past `until + SKEW`, no later entry can match, and the scan stops. Entries gone under
//! `store.receipt_retention` are older than any retained one and read as "before".

use palisade_policy::log::merkle;
use palisade_policy::log::query::{at_ms, Filter};
use palisade_policy::log::{Envelope, Head};
use serde_json::Value;

use super::{log_read, Store, StoreError};

/// Most entries one page reads.
pub const SCAN: u64 = 10_000;
/// Entries read per store query while scanning.
const CHUNK: u64 = 1_000;
/// How far out of time order two entries of the log may be (batching, replicas' clocks).
pub const SKEW_MS: i64 = 60_000;

/// A receipt the filter matched.
#[derive(Debug, Clone)]
pub struct Found {
    pub index: u64,
    /// The entry: the receipt's JCS.
    pub entry: Vec<u8>,
    pub receipt: Value,
}

/// One page of an export.
#[derive(Debug)]
pub struct Page {
    /// The log's head when the page was read: its checkpoint is what the proofs lead to.
    pub head: Head,
    pub found: Vec<Found>,
    /// The log index the next page starts after; `None`: no later entry can match.
    pub next: Option<u64>,
}

/// The receipts after `after` (a log index) that `filter` matches, at most `limit` of them.
pub async fn page(
    store: &dyn Store,
    filter: &Filter,
    after: Option<u64>,
    limit: usize,
) -> Result<Page, StoreError> {
    let head = store.log_head().await?;
    let size = head.size;
    let mut from = after.map_or(0, |a| a.saturating_add(1)).min(size);
    if let Some(since) = filter.since_ms {
        from = seek(store, from, size, since.saturating_sub(SKEW_MS)).await?;
    }
    let end = from.saturating_add(SCAN).min(size);
    let stop_after = filter.until_ms.map(|u| u.saturating_add(SKEW_MS));
    let mut found = Vec::new();
    let mut at = from;
    while at < end {
        let to = at.saturating_add(CHUNK).min(end);
        for (index, entry) in store.log_entries(at, to).await? {
            let Ok(receipt) = serde_json::from_slice::<Value>(&entry) else {
                continue;
            };
            if stop_after.is_some_and(|s| at_ms(&receipt).is_some_and(|t| t > s)) {
                return Ok(Page {
                    head,
                    found,
                    next: None,
                });
            }
            if filter.matches(&receipt) {
                found.push(Found {
                    index,
                    entry,
                    receipt,
                });
                if found.len() >= limit {
                    let next = (index + 1 < size).then_some(index);
                    return Ok(Page { head, found, next });
                }
            }
        }
        at = to;
    }
    let next = (end < size).then(|| end.saturating_sub(1));
    Ok(Page { head, found, next })
}

/// The first index in `from..size` whose entry's `at` is at or after `target` (Unix ms),
/// the log being in time order up to [`SKEW_MS`].
async fn seek(store: &dyn Store, from: u64, size: u64, target: i64) -> Result<u64, StoreError> {
    let (mut lo, mut hi) = (from, size);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let at = store
            .log_entries(mid, mid + 1)
            .await?
            .first()
            .and_then(|(_, e)| serde_json::from_slice::<Value>(e).ok())
            .and_then(|r| at_ms(&r));
        // An entry gone under retention, or without a time, reads as before the target.
        if at.is_none_or(|t| t < target) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Each found receipt as a client holds one: its inclusion proof in the tree of the page's
/// checkpoint. The proofs' hashes are read in one query.
pub async fn envelopes(store: &dyn Store, page: &Page) -> Result<Vec<Envelope>, StoreError> {
    let size = page.head.size;
    let proofs = log_read::compute(store, |r| {
        page.found
            .iter()
            .map(|f| merkle::inclusion(f.index, size, r))
            .collect::<Result<Vec<_>, _>>()
    })
    .await?
    .map_err(|e| StoreError::Unavailable(format!("inclusion proofs: {e}")))?;
    Ok(page
        .found
        .iter()
        .zip(proofs)
        .map(|(f, proof)| Envelope {
            receipt: f.receipt.clone(),
            index: f.index,
            inclusion: merkle::encode_proof(&proof),
            checkpoint: page.head.note.clone(),
        })
        .collect())
}
