//! The redb tables and one write transaction's view of them ([`Tables`]): every change
//! goes through its methods, which also append it to the batch's redo record.

use redb::{ReadableTable, TableDefinition};

use crate::journal::Redo;
use crate::StoreError;

/// Resource key → last committed epoch. Byte keys: redb would check `&str` keys for UTF-8 on
/// every comparison.
pub(super) const FENCES: TableDefinition<&[u8], u64> = TableDefinition::new("fences");
/// Everything about a lease, under keys that start with the lease id ([`lease_key`]): its
/// record, staged inverse, pre-image snapshot and the sequence numbers of its receipts. One
/// table with the lease's entries side by side means one write touches few pages: a write's
/// cost is dominated by the pages each commit must flush (measured with
/// `examples/store_load.rs`: five tables per write ran at half the rate of this layout).
pub(super) const LEASE_DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("lease_data");
/// Sequence number → JCS of a version 1.0 receipt, signature included: the retained part of
/// the chain a store kept before the receipt log. Nothing is added to it; retention empties it.
pub(super) const RECEIPTS: TableDefinition<u64, &[u8]> = TableDefinition::new("receipts");
/// The receipt log (SPEC §5.5): entry index → the entry (a receipt's JCS).
pub(super) const LOG_ENTRIES: TableDefinition<u64, &[u8]> = TableDefinition::new("log_entries");
/// The receipt log's stored hashes (Go tlog's layout, `policy::log::merkle`): stored-hash index
/// → 32 bytes. Kept for ever: retention removes entries, never hashes.
pub(super) const LOG_HASHES: TableDefinition<u64, &[u8]> = TableDefinition::new("log_hashes");

/// What a [`LEASE_DATA`] entry holds.
#[derive(Clone, Copy)]
#[repr(u8)]
pub(super) enum Part {
    Record = b'r',
    Inverse = b'i',
    Snapshot = b's',
    /// Followed by a v1 receipt's sequence number (big-endian), with an empty value.
    Receipt = b'c',
    /// Followed by a log entry's index (big-endian), with an empty value.
    Entry = b'e',
}

/// `len(lease_id) · lease_id · part [· seq]`. The length prefix (lease ids are at most 128
/// bytes) keeps one lease's keys from being a prefix of another's.
pub(super) fn lease_key(lease_id: &str, part: Part, seq: Option<u64>) -> Vec<u8> {
    let mut k = lease_prefix(lease_id);
    k.push(part as u8);
    if let Some(seq) = seq {
        k.extend_from_slice(&seq.to_be_bytes());
    }
    k
}

/// `len(lease_id) · lease_id`: what every key of one lease starts with.
pub(super) fn lease_prefix(lease_id: &str) -> Vec<u8> {
    let id = lease_id.as_bytes();
    let mut k = Vec::with_capacity(id.len() + 10);
    k.push(u8::try_from(id.len()).unwrap_or(u8::MAX));
    k.extend_from_slice(id);
    k
}

/// Scoped idempotency key → its stored outcome (JSON, with `expires_ms`).
pub(super) const IDEMPOTENCY: TableDefinition<&str, &[u8]> = TableDefinition::new("idempotency");
/// (expiry in unix ms, scoped key): lets the writer sweep expired keys oldest first.
pub(super) const IDEMPOTENCY_EXPIRY: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("idempotency_expiry");
/// Escrow id (UUIDv7, so ids sort by creation) → escrow record (JSON).
pub(super) const ESCROWS: TableDefinition<&str, &[u8]> = TableDefinition::new("escrows");

/// Freeze id → the freeze (SPEC §14; `policy::freeze::Freeze`, JSON).
pub(super) const FREEZES: TableDefinition<&str, &[u8]> = TableDefinition::new("freezes");
/// Budget spends (SPEC §14): `key (16) · at_ms (8, BE) · seq (8, BE)`, no value
/// (`embedded::budgets`).
pub(super) const BUDGETS: TableDefinition<&[u8], ()> = TableDefinition::new("budgets");
/// The same spends by age (`at_ms · key · seq`), so the sweep finds the oldest first.
pub(super) const BUDGET_AGE: TableDefinition<&[u8], ()> = TableDefinition::new("budget_age");

/// (due time in unix ms, lease id): when a lease's data may be removed (its expiry plus
/// [`crate::Retention::leases`]). Lets the writer sweep them oldest first.
pub(super) const LEASE_EXPIRY: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("lease_expiry");
/// (due time in unix ms, escrow id): when an escrow may be removed (its lease's expiry plus
/// [`crate::Retention::leases`]).
pub(super) const ESCROW_DUE: TableDefinition<(u64, &str), ()> = TableDefinition::new("escrow_due");
/// Negotiation-relay messages (seed 001 §6.3): cursor → record (`store::relay::Record`, JSON).
pub(super) const RELAY_MESSAGES: TableDefinition<u64, &[u8]> =
    TableDefinition::new("relay_messages");
/// The relay's indexes, by a tag byte (`embedded::relay`): per transaction, per party, per
/// signature.
pub(super) const RELAY_INDEX: TableDefinition<&[u8], &[u8]> = TableDefinition::new("relay_index");
/// RCNS records and their indexes, by a tag byte (`embedded::rcns`).
pub(super) const RCNS: TableDefinition<&[u8], &[u8]> = TableDefinition::new("rcns");
/// Small named values: [`RECEIPT_ANCHOR`].
pub(super) const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
/// `META` key of the receipt chain's anchor (JSON `{"pruned":N,"prev":"sha256:…"}`), present
/// once receipts were removed under retention.
pub(super) const RECEIPT_ANCHOR: &str = "receipt_anchor";
/// `META` key of the receipt log's head (`policy::log::Head`, JSON): its size and newest
/// checkpoint. Absent: the log is empty.
pub(super) const LOG_HEAD: &str = "log_head";

/// Entries each sweep may remove in one transaction, beyond one per job in the batch
/// (`sweep::Sweeper::run`): the sweeps keep pace with new entries without ever making one
/// commit long.
pub(super) const SWEEP_PER_BATCH: usize = 64;

/// Table ids in journal records.
pub(super) const T_FENCES: u8 = 1;
pub(super) const T_LEASE_DATA: u8 = 2;
pub(super) const T_RECEIPTS: u8 = 3;
pub(super) const T_IDEMPOTENCY: u8 = 4;
pub(super) const T_IDEMPOTENCY_EXPIRY: u8 = 5;
pub(super) const T_ESCROWS: u8 = 6;
pub(super) const T_LEASE_EXPIRY: u8 = 7;
pub(super) const T_META: u8 = 8;
pub(super) const T_RELAY_MESSAGES: u8 = 9;
pub(super) const T_RELAY_INDEX: u8 = 10;
pub(super) const T_ESCROW_DUE: u8 = 11;
pub(super) const T_RCNS: u8 = 12;
pub(super) const T_LOG_ENTRIES: u8 = 13;
pub(super) const T_LOG_HASHES: u8 = 14;
pub(super) const T_FREEZES: u8 = 15;
pub(super) const T_BUDGETS: u8 = 16;
pub(super) const T_BUDGET_AGE: u8 = 17;

/// Creates every table (a new file), so that readers never meet a missing one.
pub(super) fn create_all(wtx: &redb::WriteTransaction) -> Result<(), StoreError> {
    wtx.open_table(FENCES).map_err(unavailable)?;
    wtx.open_table(LEASE_DATA).map_err(unavailable)?;
    wtx.open_table(RECEIPTS).map_err(unavailable)?;
    wtx.open_table(IDEMPOTENCY).map_err(unavailable)?;
    wtx.open_table(IDEMPOTENCY_EXPIRY).map_err(unavailable)?;
    wtx.open_table(ESCROWS).map_err(unavailable)?;
    wtx.open_table(LEASE_EXPIRY).map_err(unavailable)?;
    wtx.open_table(META).map_err(unavailable)?;
    wtx.open_table(RELAY_MESSAGES).map_err(unavailable)?;
    wtx.open_table(RELAY_INDEX).map_err(unavailable)?;
    wtx.open_table(ESCROW_DUE).map_err(unavailable)?;
    wtx.open_table(RCNS).map_err(unavailable)?;
    wtx.open_table(LOG_ENTRIES).map_err(unavailable)?;
    wtx.open_table(LOG_HASHES).map_err(unavailable)?;
    wtx.open_table(FREEZES).map_err(unavailable)?;
    wtx.open_table(BUDGETS).map_err(unavailable)?;
    wtx.open_table(BUDGET_AGE).map_err(unavailable)?;
    Ok(())
}

pub(super) fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// The tables of one write transaction. Every change goes through here, so it is both applied
/// and recorded for the journal.
pub(super) struct Tables<'t> {
    pub(super) fences: redb::Table<'t, &'static [u8], u64>,
    pub(super) leases: redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(super) receipts: redb::Table<'t, u64, &'static [u8]>,
    pub(super) idempotency: redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) expiry: redb::Table<'t, (u64, &'static str), ()>,
    pub(super) escrows: redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) lease_expiry: redb::Table<'t, (u64, &'static str), ()>,
    pub(super) meta: redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) relay: redb::Table<'t, u64, &'static [u8]>,
    pub(super) relay_index: redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(super) escrow_due: redb::Table<'t, (u64, &'static str), ()>,
    pub(super) rcns: redb::Table<'t, &'static [u8], &'static [u8]>,
    pub(super) entries: redb::Table<'t, u64, &'static [u8]>,
    pub(super) hashes: redb::Table<'t, u64, &'static [u8]>,
    pub(super) freezes: redb::Table<'t, &'static str, &'static [u8]>,
    pub(super) budgets: redb::Table<'t, &'static [u8], ()>,
    pub(super) budget_age: redb::Table<'t, &'static [u8], ()>,
    pub(super) redo: Redo,
    /// The batch's time (unix ms), read once from the store's clock: every expiry the batch
    /// sets or judges is relative to it.
    pub(super) now_ms: i64,
}

pub(super) fn expiry_key(at: u64, key: &str) -> Vec<u8> {
    let mut k = at.to_be_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    k
}

impl<'t> Tables<'t> {
    pub(super) fn open(wtx: &'t redb::WriteTransaction, now_ms: i64) -> Result<Self, StoreError> {
        Ok(Self {
            fences: wtx.open_table(FENCES).map_err(unavailable)?,
            leases: wtx.open_table(LEASE_DATA).map_err(unavailable)?,
            receipts: wtx.open_table(RECEIPTS).map_err(unavailable)?,
            idempotency: wtx.open_table(IDEMPOTENCY).map_err(unavailable)?,
            expiry: wtx.open_table(IDEMPOTENCY_EXPIRY).map_err(unavailable)?,
            escrows: wtx.open_table(ESCROWS).map_err(unavailable)?,
            lease_expiry: wtx.open_table(LEASE_EXPIRY).map_err(unavailable)?,
            meta: wtx.open_table(META).map_err(unavailable)?,
            relay: wtx.open_table(RELAY_MESSAGES).map_err(unavailable)?,
            relay_index: wtx.open_table(RELAY_INDEX).map_err(unavailable)?,
            escrow_due: wtx.open_table(ESCROW_DUE).map_err(unavailable)?,
            rcns: wtx.open_table(RCNS).map_err(unavailable)?,
            entries: wtx.open_table(LOG_ENTRIES).map_err(unavailable)?,
            hashes: wtx.open_table(LOG_HASHES).map_err(unavailable)?,
            freezes: wtx.open_table(FREEZES).map_err(unavailable)?,
            budgets: wtx.open_table(BUDGETS).map_err(unavailable)?,
            budget_age: wtx.open_table(BUDGET_AGE).map_err(unavailable)?,
            redo: Redo::default(),
            now_ms,
        })
    }

    pub(super) fn fence(&self, resource: &[u8]) -> Result<u64, StoreError> {
        Ok(self
            .fences
            .get(resource)
            .map_err(unavailable)?
            .map_or(0, |v| v.value()))
    }

    pub(super) fn set_fence(&mut self, resource: &[u8], epoch: u64) -> Result<(), StoreError> {
        self.fences.insert(resource, epoch).map_err(unavailable)?;
        self.redo.put(T_FENCES, resource, &epoch.to_be_bytes());
        Ok(())
    }

    pub(super) fn put_lease(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.leases.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_LEASE_DATA, key, value);
        Ok(())
    }

    pub(super) fn delete_lease(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.leases.remove(key).map_err(unavailable)?;
        self.redo.delete(T_LEASE_DATA, key);
        Ok(())
    }

    /// Schedules the removal of `lease_id`'s data at `due` (unix ms).
    pub(super) fn put_lease_due(&mut self, due: u64, lease_id: &str) -> Result<(), StoreError> {
        self.lease_expiry
            .insert((due, lease_id), ())
            .map_err(unavailable)?;
        self.redo
            .put(T_LEASE_EXPIRY, &expiry_key(due, lease_id), &[]);
        Ok(())
    }

    pub(super) fn delete_lease_due(&mut self, due: u64, lease_id: &str) -> Result<(), StoreError> {
        self.lease_expiry
            .remove((due, lease_id))
            .map_err(unavailable)?;
        self.redo.delete(T_LEASE_EXPIRY, &expiry_key(due, lease_id));
        Ok(())
    }

    pub(super) fn delete_receipt(&mut self, seq: u64) -> Result<(), StoreError> {
        self.receipts.remove(seq).map_err(unavailable)?;
        self.redo.delete(T_RECEIPTS, &seq.to_be_bytes());
        Ok(())
    }

    pub(super) fn put_meta(&mut self, key: &str, value: &[u8]) -> Result<(), StoreError> {
        self.meta.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_META, key.as_bytes(), value);
        Ok(())
    }

    pub(super) fn put_entry(&mut self, index: u64, entry: &[u8]) -> Result<(), StoreError> {
        self.entries.insert(index, entry).map_err(unavailable)?;
        self.redo.put(T_LOG_ENTRIES, &index.to_be_bytes(), entry);
        Ok(())
    }

    pub(super) fn delete_entry(&mut self, index: u64) -> Result<(), StoreError> {
        self.entries.remove(index).map_err(unavailable)?;
        self.redo.delete(T_LOG_ENTRIES, &index.to_be_bytes());
        Ok(())
    }

    pub(super) fn put_hash(&mut self, index: u64, hash: &[u8; 32]) -> Result<(), StoreError> {
        self.hashes
            .insert(index, hash.as_slice())
            .map_err(unavailable)?;
        self.redo.put(T_LOG_HASHES, &index.to_be_bytes(), hash);
        Ok(())
    }

    pub(super) fn put_idempotency(
        &mut self,
        key: &str,
        value: &[u8],
        at: u64,
    ) -> Result<(), StoreError> {
        self.idempotency.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_IDEMPOTENCY, key.as_bytes(), value);
        self.expiry.insert((at, key), ()).map_err(unavailable)?;
        self.redo
            .put(T_IDEMPOTENCY_EXPIRY, &expiry_key(at, key), &[]);
        Ok(())
    }

    pub(super) fn delete_idempotency(&mut self, key: &str) -> Result<(), StoreError> {
        self.idempotency.remove(key).map_err(unavailable)?;
        self.redo.delete(T_IDEMPOTENCY, key.as_bytes());
        Ok(())
    }

    pub(super) fn delete_expiry(&mut self, at: u64, key: &str) -> Result<(), StoreError> {
        self.expiry.remove((at, key)).map_err(unavailable)?;
        self.redo.delete(T_IDEMPOTENCY_EXPIRY, &expiry_key(at, key));
        Ok(())
    }

    pub(super) fn put_relay(&mut self, cursor: u64, record: &[u8]) -> Result<(), StoreError> {
        self.relay.insert(cursor, record).map_err(unavailable)?;
        self.redo
            .put(T_RELAY_MESSAGES, &cursor.to_be_bytes(), record);
        Ok(())
    }

    pub(super) fn delete_relay(&mut self, cursor: u64) -> Result<(), StoreError> {
        self.relay.remove(cursor).map_err(unavailable)?;
        self.redo.delete(T_RELAY_MESSAGES, &cursor.to_be_bytes());
        Ok(())
    }

    pub(super) fn put_relay_index(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.relay_index.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_RELAY_INDEX, key, value);
        Ok(())
    }

    pub(super) fn delete_relay_index(&mut self, key: &[u8]) -> Result<(), StoreError> {
        self.relay_index.remove(key).map_err(unavailable)?;
        self.redo.delete(T_RELAY_INDEX, key);
        Ok(())
    }

    /// Schedules the removal of escrow `id` at `due` (unix ms).
    pub(super) fn put_escrow_due(&mut self, due: u64, id: &str) -> Result<(), StoreError> {
        self.escrow_due.insert((due, id), ()).map_err(unavailable)?;
        self.redo.put(T_ESCROW_DUE, &expiry_key(due, id), &[]);
        Ok(())
    }

    pub(super) fn delete_escrow_due(&mut self, due: u64, id: &str) -> Result<(), StoreError> {
        self.escrow_due.remove((due, id)).map_err(unavailable)?;
        self.redo.delete(T_ESCROW_DUE, &expiry_key(due, id));
        Ok(())
    }

    pub(super) fn delete_escrow(&mut self, id: &str) -> Result<(), StoreError> {
        self.escrows.remove(id).map_err(unavailable)?;
        self.redo.delete(T_ESCROWS, id.as_bytes());
        Ok(())
    }

    /// A freeze made (`Some`, its record) or lifted (SPEC §14).
    pub(super) fn set_freeze(&mut self, id: &str, value: Option<&[u8]>) -> Result<(), StoreError> {
        match value {
            Some(v) => {
                self.freezes.insert(id, v).map_err(unavailable)?;
                self.redo.put(T_FREEZES, id.as_bytes(), v);
            }
            None => {
                self.freezes.remove(id).map_err(unavailable)?;
                self.redo.delete(T_FREEZES, id.as_bytes());
            }
        }
        Ok(())
    }

    pub(super) fn put_escrow(&mut self, id: &str, value: &[u8]) -> Result<(), StoreError> {
        self.escrows.insert(id, value).map_err(unavailable)?;
        self.redo.put(T_ESCROWS, id.as_bytes(), value);
        Ok(())
    }
}

/// Whether `update` applies to its escrow as stored (`records::escrow_update_applies`).
pub(super) fn escrow_state_is(
    escrows: &redb::Table<&str, &[u8]>,
    update: &crate::EscrowUpdate,
) -> Result<bool, StoreError> {
    let current = escrows.get(update.id.as_str()).map_err(unavailable)?;
    Ok(crate::records::escrow_update_applies(
        current.as_ref().map(|v| v.value()),
        update,
    ))
}

/// Sets a lease record's `state`, if the record exists.
pub(super) fn set_lease_state(
    t: &mut Tables<'_>,
    lease_id: &str,
    state: crate::LeaseState,
) -> Result<(), StoreError> {
    let key = lease_key(lease_id, Part::Record, None);
    let record = t
        .leases
        .get(key.as_slice())
        .map_err(unavailable)?
        .map(|v| crate::LeaseRecord::from_bytes(v.value()))
        .transpose()?;
    if let Some(mut rec) = record {
        rec.state = state;
        t.put_lease(&key, &rec.to_bytes())?;
    }
    Ok(())
}
