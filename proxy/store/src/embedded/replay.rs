//! Replaying the store journal into the tables (`Tables::replay`): each change as it was
//! recorded, nothing recorded again.

use super::tables::*;
use crate::journal;
use crate::StoreError;

impl Tables<'_> {
    /// Applies one journal change (nothing is recorded: it is already in the journal).
    pub(super) fn replay(&mut self, c: &journal::Change<'_>) -> Result<(), StoreError> {
        let bad = || unavailable("store journal: a change cannot be applied");
        let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| bad());
        let u64_of = |b: &[u8]| {
            <[u8; 8]>::try_from(b)
                .map(u64::from_be_bytes)
                .map_err(|_| bad())
        };
        // `expiry_key`'s layout: due time (big-endian), then the name.
        let due_key = |k: &[u8]| -> Result<(u64, String), StoreError> {
            Ok((
                u64_of(k.get(..8).ok_or_else(bad)?)?,
                text(k.get(8..).ok_or_else(bad)?)?,
            ))
        };
        match (c.table, c.value) {
            (T_FENCES, Some(v)) => {
                self.fences.insert(c.key, u64_of(v)?).map_err(unavailable)?;
            }
            (T_LEASE_DATA, Some(v)) => {
                self.leases.insert(c.key, v).map_err(unavailable)?;
            }
            (T_LEASE_DATA, None) => {
                self.leases.remove(c.key).map_err(unavailable)?;
            }
            (T_RECEIPTS, Some(v)) => {
                self.receipts
                    .insert(u64_of(c.key)?, v)
                    .map_err(unavailable)?;
            }
            (T_RECEIPTS, None) => {
                self.receipts.remove(u64_of(c.key)?).map_err(unavailable)?;
            }
            (T_LEASE_EXPIRY, value) => {
                let (at, id) = due_key(c.key)?;
                if value.is_some() {
                    self.lease_expiry
                        .insert((at, id.as_str()), ())
                        .map_err(unavailable)?;
                } else {
                    self.lease_expiry
                        .remove((at, id.as_str()))
                        .map_err(unavailable)?;
                }
            }
            (T_META, Some(v)) => {
                self.meta
                    .insert(text(c.key)?.as_str(), v)
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY, Some(v)) => {
                self.idempotency
                    .insert(text(c.key)?.as_str(), v)
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY, None) => {
                self.idempotency
                    .remove(text(c.key)?.as_str())
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY_EXPIRY, value) => {
                let (at, key) = due_key(c.key)?;
                if value.is_some() {
                    self.expiry
                        .insert((at, key.as_str()), ())
                        .map_err(unavailable)?;
                } else {
                    self.expiry
                        .remove((at, key.as_str()))
                        .map_err(unavailable)?;
                }
            }
            (T_RELAY_MESSAGES, Some(v)) => {
                self.relay.insert(u64_of(c.key)?, v).map_err(unavailable)?;
            }
            (T_RELAY_MESSAGES, None) => {
                self.relay.remove(u64_of(c.key)?).map_err(unavailable)?;
            }
            (T_RELAY_INDEX, Some(v)) => {
                self.relay_index.insert(c.key, v).map_err(unavailable)?;
            }
            (T_RELAY_INDEX, None) => {
                self.relay_index.remove(c.key).map_err(unavailable)?;
            }
            (T_LOG_ENTRIES, Some(v)) => {
                self.entries
                    .insert(u64_of(c.key)?, v)
                    .map_err(unavailable)?;
            }
            (T_LOG_ENTRIES, None) => {
                self.entries.remove(u64_of(c.key)?).map_err(unavailable)?;
            }
            (T_LOG_HASHES, Some(v)) => {
                self.hashes.insert(u64_of(c.key)?, v).map_err(unavailable)?;
            }
            (T_RCNS, Some(v)) => drop(self.rcns.insert(c.key, v).map_err(unavailable)?),
            (T_RCNS, None) => drop(self.rcns.remove(c.key).map_err(unavailable)?),
            (T_ESCROWS, Some(v)) => {
                self.escrows
                    .insert(text(c.key)?.as_str(), v)
                    .map_err(unavailable)?;
            }
            (T_ESCROWS, None) => {
                self.escrows
                    .remove(text(c.key)?.as_str())
                    .map_err(unavailable)?;
            }
            (T_FREEZES, value) => {
                let id = text(c.key)?;
                match value {
                    Some(v) => drop(self.freezes.insert(id.as_str(), v).map_err(unavailable)?),
                    None => drop(self.freezes.remove(id.as_str()).map_err(unavailable)?),
                }
            }
            (T_BUDGETS, Some(_)) => drop(self.budgets.insert(c.key, ()).map_err(unavailable)?),
            (T_BUDGETS, None) => drop(self.budgets.remove(c.key).map_err(unavailable)?),
            (T_BUDGET_AGE, Some(_)) => {
                drop(self.budget_age.insert(c.key, ()).map_err(unavailable)?);
            }
            (T_BUDGET_AGE, None) => drop(self.budget_age.remove(c.key).map_err(unavailable)?),
            (T_ESCROW_DUE, value) => {
                let (at, id) = due_key(c.key)?;
                if value.is_some() {
                    self.escrow_due
                        .insert((at, id.as_str()), ())
                        .map_err(unavailable)?;
                } else {
                    self.escrow_due
                        .remove((at, id.as_str()))
                        .map_err(unavailable)?;
                }
            }
            _ => return Err(bad()),
        }
        Ok(())
    }
}
