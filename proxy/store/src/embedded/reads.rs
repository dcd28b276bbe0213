//! The embedded store's point reads: the overlay of uncommitted batches first, then redb.

use std::sync::atomic::Ordering;

use redb::{ReadableTable, TableDefinition};

use crate::{EscrowRecord, StoreError, StoredOutcome};

use super::jobs::Job;
use super::overlay::Seen;
use super::tables::{
    lease_key, unavailable, Part, ESCROWS, FREEZES, IDEMPOTENCY, LEASE_DATA, T_IDEMPOTENCY,
    T_LEASE_DATA,
};
use super::EmbeddedStore;

impl EmbeddedStore {
    /// Point read of a table the overlay keeps: the overlay first, then redb.
    pub(super) fn read_bytes(
        &self,
        (id, table): (u8, TableDefinition<&str, &[u8]>),
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match self.overlay.get(id, key.as_bytes()) {
            Seen::Value(v) => return Ok(Some(v.into())),
            Seen::Deleted => return Ok(None),
            Seen::Unchanged => {}
        }
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = rtx.open_table(table).map_err(unavailable)?;
        let v = table.get(key).map_err(unavailable)?;
        Ok(v.map(|v| v.value().to_vec()))
    }

    pub(super) fn read_lease(
        &self,
        lease_id: &str,
        part: Part,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let key = lease_key(lease_id, part, None);
        match self.overlay.get(T_LEASE_DATA, &key) {
            Seen::Value(v) => return Ok(Some(v.into())),
            Seen::Deleted => return Ok(None),
            Seen::Unchanged => {}
        }
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = rtx.open_table(LEASE_DATA).map_err(unavailable)?;
        let v = table.get(key.as_slice()).map_err(unavailable)?;
        Ok(v.map(|v| v.value().to_vec()))
    }

    /// Commits the writer's open transaction when it holds answered batches, so a range read
    /// of redb sees every change a caller was told of.
    pub(super) async fn settle(&self) -> Result<(), StoreError> {
        if self.unsettled.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        self.ask(Job::Settle).await
    }

    /// The stored outcome of a scoped idempotency key, unless it has expired.
    pub(super) fn idempotency(&self, key: &str) -> Result<Option<StoredOutcome>, StoreError> {
        let Some(bytes) = self.read_bytes((T_IDEMPOTENCY, IDEMPOTENCY), key)? else {
            return Ok(None);
        };
        let outcome = StoredOutcome::from_bytes(&bytes)?;
        // Expired but not yet swept: gone, as far as callers can tell.
        Ok(Some(outcome).filter(|o| o.expires_ms > self.clock.now_ms()))
    }

    /// Up to `limit` escrow records, in id order (UUIDv7: by creation).
    /// Every freeze stored (SPEC §14), as written. A file from before freezes has none.
    pub(super) async fn read_freezes(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        self.settle().await?;
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = match rtx.open_table(FREEZES) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(unavailable(e)),
        };
        let mut out = Vec::new();
        for row in table.iter().map_err(unavailable)? {
            out.push(row.map_err(unavailable)?.1.value().to_vec());
        }
        Ok(out)
    }

    pub(super) async fn read_escrows(&self, limit: usize) -> Result<Vec<EscrowRecord>, StoreError> {
        self.settle().await?;
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = rtx.open_table(ESCROWS).map_err(unavailable)?;
        let mut out = Vec::new();
        for row in table.iter().map_err(unavailable)? {
            let (_, v) = row.map_err(unavailable)?;
            // One unreadable record must not hide the others from the operators.
            match EscrowRecord::from_bytes(v.value()) {
                Ok(rec) => out.push(rec),
                Err(e) => tracing::warn!(error = %e, "escrow record skipped"),
            }
            if out.len() >= limit {
                break;
            }
        }
        Ok(out)
    }
}
