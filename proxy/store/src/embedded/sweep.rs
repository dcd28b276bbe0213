//! Removing what the store no longer has to keep, a bounded amount per transaction so that a
//! sweep never makes one commit long: expired idempotency keys (SPEC §5.6), the data of leases
//! past their retention and the escrows held under them, receipts past
//! `store.receipt_retention`, relay messages past their TTL, budget spends past any window.
//!
//! Each sweep runs inside a batch's transaction, so its deletions are journalled and durable
//! with the batch; the pages they free are reused after the next checkpoint.

use palisade_policy::digest::Sha256Digest;
use redb::ReadableTable;

use crate::{Retention, StoreError};

use super::tables::{
    lease_key, lease_prefix, unavailable, Part, Tables, RECEIPT_ANCHOR, SWEEP_PER_BATCH,
};

/// Longest wait between two looks at the oldest receipt.
const RECHECK_MS: u64 = 60_000;

/// The writer's sweeping state across batches.
pub(super) struct Sweeper {
    pub(super) retention: Retention,
    /// Unix ms before which the oldest v1 receipt cannot be due: saves reading it every batch.
    receipts_due_ms: u64,
    /// The same for the oldest entry of the receipt log.
    entries_due_ms: u64,
}

impl Sweeper {
    pub(super) fn new(retention: Retention) -> Self {
        Self {
            retention,
            receipts_due_ms: 0,
            entries_due_ms: 0,
        }
    }

    /// When the data of a lease expiring at `expires_at_ms` may go.
    pub(super) fn lease_due(&self, expires_at_ms: i64) -> u64 {
        (expires_at_ms.max(0) as u64).saturating_add(self.retention.leases.as_millis() as u64)
    }

    /// Runs every sweep once, each removing at most [`SWEEP_PER_BATCH`] plus `jobs` entries:
    /// a batch of `jobs` jobs adds at most that many leases or receipts, so the sweeps keep
    /// pace with any load while no commit grows by more than a constant factor.
    pub(super) fn run(
        &mut self,
        t: &mut Tables<'_>,
        stored_keys: bool,
        jobs: usize,
    ) -> Result<(), StoreError> {
        let now = t.now_ms.max(0) as u64;
        let limit = SWEEP_PER_BATCH + jobs;
        if stored_keys {
            sweep_idempotency(t, now, limit)?;
        }
        sweep_leases(t, self, now, limit)?;
        sweep_escrows(t, now, limit)?;
        super::relay::sweep(t, now, limit)?;
        super::budgets::sweep(t, now, limit)?;
        super::rcns::sweep(t, now, limit)?;
        if let Some(keep) = self.retention.receipts {
            if now >= self.receipts_due_ms {
                // Looked at again within a minute at most, whatever the oldest receipt says,
                // so a wall-clock step cannot postpone retention by a whole period.
                self.receipts_due_ms =
                    sweep_receipts(t, now, keep.as_millis() as u64, limit)?.min(now + RECHECK_MS);
            }
            if now >= self.entries_due_ms {
                self.entries_due_ms =
                    sweep_entries(t, now, keep.as_millis() as u64, limit)?.min(now + RECHECK_MS);
            }
        }
        Ok(())
    }
}

/// Up to `limit` entries of a `(due ms, name)` index due at or before `now`, oldest first
/// (collected first: the caller deletes them from the same table).
fn due_entries(
    index: &redb::Table<'_, (u64, &'static str), ()>,
    now: u64,
    limit: usize,
) -> Result<Vec<(u64, String)>, StoreError> {
    let mut due = Vec::new();
    for row in index
        .range::<(u64, &str)>(..(now.saturating_add(1), ""))
        .map_err(unavailable)?
        .take(limit)
    {
        let (k, _) = row.map_err(unavailable)?;
        let (at, name) = k.value();
        due.push((at, name.to_owned()));
    }
    Ok(due)
}

/// Removes up to `limit` expired idempotency keys (SPEC §5.6 retention).
fn sweep_idempotency(t: &mut Tables<'_>, now: u64, limit: usize) -> Result<(), StoreError> {
    for (at, key) in due_entries(&t.expiry, now, limit)? {
        t.delete_expiry(at, &key)?;
        // A key re-stored later has a later expiry: remove the record only if it is this one.
        let current_expiry = t
            .idempotency
            .get(key.as_str())
            .map_err(unavailable)?
            .and_then(|v| crate::StoredOutcome::from_bytes(v.value()).ok())
            .map(|o| o.expires_ms.max(0) as u64);
        if current_expiry.is_none_or(|e| e <= at) {
            t.delete_idempotency(&key)?;
        }
    }
    Ok(())
}

/// Removes the data (record, inverse, snapshot, receipt index) of up to `limit` leases whose
/// removal is due. A lease re-recorded with a later expiry has a later due entry too; an
/// earlier entry finds the record's own due time later and leaves it.
fn sweep_leases(
    t: &mut Tables<'_>,
    sweeper: &Sweeper,
    now: u64,
    limit: usize,
) -> Result<(), StoreError> {
    for (at, id) in due_entries(&t.lease_expiry, now, limit)? {
        t.delete_lease_due(at, &id)?;
        if recorded_later(t, sweeper, at, &id)? {
            continue;
        }
        let prefix = lease_prefix(&id);
        let mut end = prefix.clone();
        end.push(u8::MAX);
        let mut keys = Vec::new();
        for row in t
            .leases
            .range::<&[u8]>(prefix.as_slice()..end.as_slice())
            .map_err(unavailable)?
        {
            let (k, _) = row.map_err(unavailable)?;
            keys.push(k.value().to_vec());
        }
        for k in keys {
            t.delete_lease(&k)?;
        }
    }
    Ok(())
}

/// Removes up to `limit` escrows whose removal is due, whatever their state.
fn sweep_escrows(t: &mut Tables<'_>, now: u64, limit: usize) -> Result<(), StoreError> {
    for (at, id) in due_entries(&t.escrow_due, now, limit)? {
        t.delete_escrow_due(at, &id)?;
        t.delete_escrow(&id)?;
    }
    Ok(())
}

/// Whether `lease_id`'s record says its data is due later than `at`: an inverse staged before
/// its lease was recorded has an earlier entry than the record's own.
fn recorded_later(
    t: &Tables<'_>,
    sweeper: &Sweeper,
    at: u64,
    lease_id: &str,
) -> Result<bool, StoreError> {
    let record = t
        .leases
        .get(lease_key(lease_id, Part::Record, None).as_slice())
        .map_err(unavailable)?
        .and_then(|v| crate::LeaseRecord::from_bytes(v.value()).ok());
    Ok(record.is_some_and(|r| sweeper.lease_due(r.expires_at_ms) > at))
}

/// The keys of up to `limit` rows of `table` (receipts by sequence or log index, each JSON
/// with an `at`) older than `keep_ms`, oldest first, and when the oldest remaining row comes
/// due. A row whose time cannot be read is never removed by guessing: the scan stops at it
/// (and looks again after a full retention period).
fn due_receipts(
    table: &redb::Table<'_, u64, &'static [u8]>,
    now: u64,
    keep_ms: u64,
    limit: usize,
) -> Result<(Vec<u64>, u64), StoreError> {
    let cutoff = now.saturating_sub(keep_ms);
    let mut due = Vec::new();
    let mut next_due = now.saturating_add(keep_ms);
    for row in table.iter().map_err(unavailable)? {
        let (key, jcs) = row.map_err(unavailable)?;
        let Some(at) = receipt_at_ms(jcs.value()) else {
            tracing::warn!(
                key = key.value(),
                "receipt retention: a receipt without a readable `at`; sweep stopped"
            );
            break;
        };
        if at >= cutoff {
            next_due = at.saturating_add(keep_ms);
            break;
        }
        due.push(key.value());
        if due.len() >= limit {
            next_due = 0;
            break;
        }
    }
    Ok((due, next_due))
}

/// Removes up to `limit` v1 receipts older than `keep_ms`, oldest first, and moves the
/// chain's anchor past them. Returns when the oldest remaining receipt comes due.
fn sweep_receipts(
    t: &mut Tables<'_>,
    now: u64,
    keep_ms: u64,
    limit: usize,
) -> Result<u64, StoreError> {
    let (removed, next_due) = due_receipts(&t.receipts, now, keep_ms, limit)?;
    let Some(&last_seq) = removed.last() else {
        return Ok(next_due);
    };
    let last_digest = t
        .receipts
        .get(last_seq)
        .map_err(unavailable)?
        .map(|v| Sha256Digest::of(v.value()))
        .ok_or_else(|| unavailable("receipt retention: a receipt vanished mid-sweep"))?;
    let pruned_before = super::log::read_anchor(&t.meta)?.map_or(0, |a| a.pruned);
    for seq in &removed {
        t.delete_receipt(*seq)?;
    }
    let anchor = serde_json::json!({
        "pruned": (last_seq + 1).max(pruned_before),
        "prev": last_digest.to_string(),
    });
    let bytes = serde_json::to_vec(&anchor).map_err(unavailable)?;
    t.put_meta(RECEIPT_ANCHOR, &bytes)?;
    Ok(next_due)
}

/// Removes up to `limit` entries of the receipt log older than `keep_ms`, oldest first: they
/// leave the entry bundles, while the stored hashes that prove the tree stay (SPEC §5.5).
/// Returns when the oldest remaining entry comes due.
fn sweep_entries(
    t: &mut Tables<'_>,
    now: u64,
    keep_ms: u64,
    limit: usize,
) -> Result<u64, StoreError> {
    let (removed, next_due) = due_receipts(&t.entries, now, keep_ms, limit)?;
    for index in removed {
        t.delete_entry(index)?;
    }
    Ok(next_due)
}

/// A stored receipt's `at` (RFC 3339) in unix ms.
fn receipt_at_ms(jcs: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct At<'a> {
        #[serde(borrow)]
        at: std::borrow::Cow<'a, str>,
    }
    let at: At<'_> = serde_json::from_slice(jcs).ok()?;
    let t =
        time::OffsetDateTime::parse(&at.at, &time::format_description::well_known::Rfc3339).ok()?;
    u64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}
