//! The freezes in force (SPEC §14), as every write is matched against them: a copy in memory,
//! swapped whole (arc-swap), so a write reads it without a lock or a store round trip.
//!
//! The copy changes two ways:
//! - this sidecar's admin API makes or lifts a freeze: the store has it (with its receipt)
//!   before the answer, and the copy is replaced at once;
//! - with a shared store, a poll every [`POLL`] reads what other replicas made. A poll that
//!   began before a local change is dropped ([`Freezes::generation`]), so it never brings back
//!   a list older than the change.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use palisade_policy::freeze::{self, Freeze, WriteKeys};

/// How often a shared store's freezes are read again: a freeze holds at every replica within
/// this and one query of its answer (SPEC §14 asks for 1 s).
pub const POLL: Duration = Duration::from_millis(250);

#[derive(Default)]
pub struct Freezes {
    list: ArcSwap<Vec<Freeze>>,
    generation: AtomicU64,
    /// Held by the admin API while it makes or lifts a freeze: one change at a time, so the
    /// list each change leaves is the store's after it.
    pub changes: tokio::sync::Mutex<()>,
}

impl Freezes {
    /// The freezes as stored (JSON records); one that cannot be read is skipped with a
    /// warning, so that it cannot hide the others.
    pub fn decode(records: &[Vec<u8>]) -> Vec<Freeze> {
        records
            .iter()
            .filter_map(|r| {
                serde_json::from_slice(r)
                    .inspect_err(|e| tracing::error!(error = %e, "a stored freeze cannot be read"))
                    .ok()
            })
            .collect()
    }

    pub fn all(&self) -> Arc<Vec<Freeze>> {
        self.list.load_full()
    }

    /// The first freeze that stops a write with `keys` at `now_ms`.
    pub fn stopping(&self, keys: &WriteKeys<'_>, now_ms: i64) -> Option<Freeze> {
        let list = self.list.load();
        if list.is_empty() {
            return None;
        }
        freeze::stopping(&list, keys, now_ms).cloned()
    }

    /// The count of a change made here; a poll that read before it is stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Replaces the list after a change made here (the store has it).
    pub fn changed(&self, list: Vec<Freeze>) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.set(list);
    }

    /// Replaces the list with a poll's, unless a local change came after the poll began.
    pub fn polled(&self, began_at: u64, list: Vec<Freeze>) {
        if self.generation() == began_at {
            self.set(list);
        }
    }

    fn set(&self, list: Vec<Freeze>) {
        metrics::gauge!("palisade_freezes_active").set(list.len() as f64);
        self.list.store(Arc::new(list));
    }
}
