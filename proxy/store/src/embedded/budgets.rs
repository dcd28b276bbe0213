//! Write budgets in the embedded store (SPEC §14): each spend a row of `BUDGETS`, keyed
//! `rule key · at_ms · seq`, so a key's window is one range, and of `BUDGET_AGE` (`at_ms ·
//! rule key · seq`), so the sweep removes what no window can hold any more (older than the
//! longest window, a day) oldest first, whatever key it is under. The check and the spend run
//! in the writer thread, in the batch's transaction: atomic, and durable with the batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;

use redb::ReadableTable;

use super::tables::{unavailable, Tables, T_BUDGETS, T_BUDGET_AGE};
use crate::{BudgetSpend, BudgetVerdict, StoreError};

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

/// A `BUDGETS` row's `BUDGET_AGE` twin: the time first.
fn aged(row: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(32);
    r.extend_from_slice(row.get(16..24).unwrap_or_default());
    r.extend_from_slice(row.get(..16).unwrap_or_default());
    r.extend_from_slice(row.get(24..).unwrap_or_default());
    r
}

/// The `BUDGETS` row of a `BUDGET_AGE` one.
fn unaged(age: &[u8]) -> Vec<u8> {
    let mut r = Vec::with_capacity(32);
    r.extend_from_slice(age.get(8..24).unwrap_or_default());
    r.extend_from_slice(age.get(..8).unwrap_or_default());
    r.extend_from_slice(age.get(24..).unwrap_or_default());
    r
}

fn insert(t: &mut Tables<'_>, r: &[u8]) -> Result<(), StoreError> {
    let a = aged(r);
    t.budgets.insert(r, ()).map_err(unavailable)?;
    t.budget_age.insert(a.as_slice(), ()).map_err(unavailable)?;
    t.redo.put(T_BUDGETS, r, &[]);
    t.redo.put(T_BUDGET_AGE, &a, &[]);
    Ok(())
}

fn remove(t: &mut Tables<'_>, r: &[u8]) -> Result<(), StoreError> {
    let a = aged(r);
    if t.budgets.remove(r).map_err(unavailable)?.is_some() {
        t.budget_age.remove(a.as_slice()).map_err(unavailable)?;
        t.redo.delete(T_BUDGETS, r);
        t.redo.delete(T_BUDGET_AGE, &a);
    }
    Ok(())
}

/// Removes at most `limit` spends older than the longest window any rule may have.
pub(super) fn sweep(t: &mut Tables<'_>, now: u64, limit: usize) -> Result<(), StoreError> {
    let before = now.saturating_sub(palisade_policy::budget::MAX_WINDOW_MS);
    let old: Vec<Vec<u8>> = t
        .budget_age
        .range(..before.to_be_bytes().as_slice())
        .map_err(unavailable)?
        .take(limit)
        .map(|r| r.map(|(k, _)| k.value().to_vec()).map_err(unavailable))
        .collect::<Result<_, _>>()?;
    for a in old {
        remove(t, &unaged(&a))?;
    }
    Ok(())
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
            remove(t, &k)?;
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
        insert(t, &r)?;
        spent.push(r);
    }
    Ok(BudgetVerdict::Spent(spent))
}

/// Removes spends a write made and then did not use.
pub(super) fn refund(t: &mut Tables<'_>, spent: &[Vec<u8>]) -> Result<(), StoreError> {
    for r in spent {
        remove(t, r)?;
    }
    Ok(())
}
