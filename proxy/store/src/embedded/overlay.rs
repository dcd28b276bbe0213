//! What readers see of the batches that are durable (in the journal) but not yet committed to
//! redb.
//!
//! Why: a redb commit writes every page the transaction dirtied, even without an fsync, and
//! with one commit per batch that was a third of the store's CPU per write
//! (`examples/store_load.rs`: 130 → 88 µs per write when eight batches share a commit). So
//! the writer keeps one redb write transaction open across several batches, and readers,
//! which only see committed redb state, look here first for the point-read tables
//! ([`absorbs`]). Range reads (receipt logs, relay pages, escrow lists) do not merge: they
//! ask the writer to commit first ([`super::EmbeddedStore::settle`]).
//!
//! Ordering: the writer adds a batch here after its journal append (so nothing undurable is
//! ever visible) and before answering any of its callers; it clears this only after the redb
//! commit that holds every change here. A reader looks here *before* it opens its redb read
//! transaction, so a key missing here was either never changed since the last commit or its
//! commit is already visible to the read transaction.

use std::collections::HashMap;
use std::sync::RwLock;

use crate::journal;

use super::tables::{T_ESCROWS, T_FENCES, T_IDEMPOTENCY, T_LEASE_DATA};

/// The tables readers get single keys from.
pub(super) fn absorbs(table: u8) -> bool {
    matches!(table, T_FENCES | T_LEASE_DATA | T_IDEMPOTENCY | T_ESCROWS)
}

/// What the overlay knows about a key.
pub(super) enum Seen {
    /// Not changed since the last redb commit: read redb.
    Unchanged,
    Deleted,
    Value(Box<[u8]>),
}

/// Table id → key → the value, or `None` when deleted. Keyed by table first so a lookup
/// borrows the caller's key instead of allocating one.
type Changes = HashMap<u8, HashMap<Box<[u8]>, Option<Box<[u8]>>>>;

#[derive(Default)]
pub(super) struct Overlay {
    changes: RwLock<Changes>,
}

impl Overlay {
    pub(super) fn get(&self, table: u8, key: &[u8]) -> Seen {
        let Ok(changes) = self.changes.read() else {
            // A writer that panicked mid-update: nothing here can be trusted, and the store
            // has stopped taking writes; reads of redb are the best left.
            return Seen::Unchanged;
        };
        match changes.get(&table).and_then(|t| t.get(key)) {
            None => Seen::Unchanged,
            Some(None) => Seen::Deleted,
            Some(Some(v)) => Seen::Value(v.clone()),
        }
    }

    /// Adds a durable batch's changes (its journal record).
    pub(super) fn absorb(&self, record: &[u8]) {
        let Some(list) = journal::changes(record) else {
            return;
        };
        let Ok(mut changes) = self.changes.write() else {
            return;
        };
        for c in list.into_iter().filter(|c| absorbs(c.table)) {
            changes
                .entry(c.table)
                .or_default()
                .insert(c.key.into(), c.value.map(Into::into));
        }
    }

    /// Forgets everything: redb now holds it.
    pub(super) fn clear(&self) {
        if let Ok(mut changes) = self.changes.write() {
            changes.clear();
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.changes
            .read()
            .map_or(0, |c| c.values().map(HashMap::len).sum())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::journal::Redo;

    #[test]
    fn later_changes_win_and_other_tables_are_not_kept() {
        let o = Overlay::default();
        assert!(matches!(o.get(T_FENCES, b"r"), Seen::Unchanged));
        let mut a = Redo::default();
        a.put(T_FENCES, b"r", &1u64.to_be_bytes());
        a.put(T_LEASE_DATA, b"l", b"x");
        a.put(super::super::tables::T_RECEIPTS, b"s", b"jcs");
        o.absorb(&a.bytes);
        let mut b = Redo::default();
        b.put(T_FENCES, b"r", &2u64.to_be_bytes());
        b.delete(T_LEASE_DATA, b"l");
        o.absorb(&b.bytes);
        assert!(matches!(o.get(T_FENCES, b"r"), Seen::Value(v) if *v == 2u64.to_be_bytes()));
        assert!(matches!(o.get(T_LEASE_DATA, b"l"), Seen::Deleted));
        assert_eq!(o.len(), 2, "receipts are read by range, so not kept here");
        o.clear();
        assert!(matches!(o.get(T_FENCES, b"r"), Seen::Unchanged));
    }
}
