//! Write budgets in the embedded store (SPEC §14): each spend a row of [`BUDGETS`], keyed
//! `rule key · at_ms · seq`, so a key's window is one range. The check and the spend run in
//! the writer thread, in the batch's transaction: atomic, and durable with the batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use redb::ReadableTable;

use super::tables::{unavailable, Tables, T_BUDGETS};
use crate::store::{BudgetSpend, BudgetVerdict, StoreError};

/// Tells apart spends of one key in one millisecond; seeded from the wall clock so that a
/// restart does not reuse a row's name.
static SEQ: LazyLock<AtomicU64> = LazyLock::new(|| {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    AtomicU64::new(nanos)
});

fn row(key: &[u8; 16], at_ms: u64, seq: u64) -> Vec<u8> {
    let mut r = Vec::with_capacity(32);
    r.extend_from_slice(key);
    r.extend_from_slice(&at_ms.to_be_bytes());
    r.extend_from_slice(&seq.to_be_bytes());
    r
}

/// Checks every rule's window at the batch's now; spends one unit of each if all have room.
/// Rows that left their window are removed on the way.
pub(super) fn spend(
    t: &mut Tables<'_>,
    spends: &[BudgetSpend],
) -> Result<BudgetVerdict, StoreError> {
    let now = u64::try_from(t.now_ms).unwrap_or(0);
    for (i, s) in spends.iter().enumerate() {
        let since = now.saturating_sub(s.window_ms);
        // Rows at or before `since` left the window.
        let gone: Vec<Vec<u8>> = t
            .budgets
            .range(row(&s.key, 0, 0).as_slice()..=row(&s.key, since, u64::MAX).as_slice())
            .map_err(unavailable)?
            .map(|r| r.map(|(k, _)| k.value().to_vec()).map_err(unavailable))
            .collect::<Result<_, _>>()?;
        for k in gone {
            t.budgets.remove(k.as_slice()).map_err(unavailable)?;
            t.redo.delete(T_BUDGETS, &k);
        }
        let times: Vec<i64> = t
            .budgets
            .range(
                row(&s.key, since.saturating_add(1), 0).as_slice()
                    ..=row(&s.key, u64::MAX, u64::MAX).as_slice(),
            )
            .map_err(unavailable)?
            .map(|r| {
                r.map_err(unavailable).map(|(k, _)| {
                    let b = k.value();
                    let mut at = [0u8; 8];
                    at.copy_from_slice(&b[16..24]);
                    i64::try_from(u64::from_be_bytes(at)).unwrap_or(i64::MAX)
                })
            })
            .collect::<Result<_, _>>()?;
        let later = palisade_policy::budget::retry_after(&times, s.limit, s.window_ms, t.now_ms);
        if let Some(ms) = later {
            return Ok(BudgetVerdict::Over {
                rule: i,
                retry_after_ms: ms,
            });
        }
    }
    let mut spent = Vec::with_capacity(spends.len());
    for s in spends {
        let r = row(&s.key, now, SEQ.fetch_add(1, Ordering::Relaxed));
        t.budgets.insert(r.as_slice(), ()).map_err(unavailable)?;
        t.redo.put(T_BUDGETS, &r, &[]);
        spent.push(r);
    }
    Ok(BudgetVerdict::Spent(spent))
}

/// Removes spends a write made and then did not use.
pub(super) fn refund(t: &mut Tables<'_>, spent: &[Vec<u8>]) -> Result<(), StoreError> {
    for r in spent {
        if t.budgets
            .remove(r.as_slice())
            .map_err(unavailable)?
            .is_some()
        {
            t.redo.delete(T_BUDGETS, r);
        }
    }
    Ok(())
}
