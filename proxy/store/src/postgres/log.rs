//! Reading the receipt log out of the database: its head, stored hashes and entries, and a
//! lease's receipts (v1 ones kept from before the log, then its entries).

use std::collections::HashMap;

use deadpool_postgres::Object;
use palisade_policy::log::merkle::Hash;
use palisade_policy::log::{Head, Signer};

use crate::{LeaseReceipt, StoreError};

use super::tx::{unavailable, unavailable_msg, ENTRY, RECEIPT};

/// The log's head; the signed empty checkpoint when nothing was integrated yet.
pub(super) async fn head(client: &Object, signer: &Signer) -> Result<Head, StoreError> {
    let row = client
        .query_one("SELECT size, note FROM log_head WHERE id = 1", &[])
        .await
        .map_err(unavailable)?;
    let (size, note): (i64, String) = (row.get(0), row.get(1));
    if note.is_empty() {
        return signer.empty().map_err(|e| unavailable_msg(&e.to_string()));
    }
    Ok(Head {
        size: size as u64,
        note,
    })
}

/// The stored hashes at `indexes`, in the order asked; an error if one is missing.
pub(super) async fn hashes(client: &Object, indexes: &[u64]) -> Result<Vec<Hash>, StoreError> {
    let wanted: Vec<i64> = indexes.iter().map(|i| *i as i64).collect();
    let rows = client
        .query(
            "SELECT idx, hash FROM log_hashes WHERE idx = ANY($1)",
            &[&wanted],
        )
        .await
        .map_err(unavailable)?;
    let mut found = HashMap::with_capacity(rows.len());
    for row in rows {
        let hash: &[u8] = row.get(1);
        let hash = <[u8; 32]>::try_from(hash)
            .map_err(|_| unavailable_msg("a stored log hash is not 32 bytes"))?;
        found.insert(row.get::<_, i64>(0) as u64, Hash(hash));
    }
    indexes
        .iter()
        .map(|i| {
            found
                .get(i)
                .copied()
                .ok_or_else(|| unavailable_msg(&format!("the log's stored hash {i} is missing")))
        })
        .collect()
}

/// The retained entries with an index in `from..to`.
pub(super) async fn entries(
    client: &Object,
    from: u64,
    to: u64,
) -> Result<crate::LogEntries, StoreError> {
    let bound = |n: u64| n.min(i64::MAX as u64) as i64;
    let rows = client
        .query(
            "SELECT idx, entry FROM log_entries WHERE idx >= $1 AND idx < $2 ORDER BY idx",
            &[&bound(from), &bound(to)],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .iter()
        .map(|r| (r.get::<_, i64>(0) as u64, r.get(1)))
        .collect())
}

/// Every retained receipt naming `lease_id`: its v1 receipts, then its log entries.
pub(super) async fn lease_receipts(
    client: &Object,
    lease_id: &str,
) -> Result<Vec<LeaseReceipt>, StoreError> {
    let rows = client
        .query(
            "SELECT r.k, r.seq, r.jcs FROM (
               SELECT 0 AS k, d.seq, r.jcs FROM lease_data d JOIN receipts r ON r.seq = d.seq
               WHERE d.lease_id = $1 AND d.part = $2
               UNION ALL
               SELECT 1, d.seq, e.entry FROM lease_data d JOIN log_entries e ON e.idx = d.seq
               WHERE d.lease_id = $1 AND d.part = $3) r ORDER BY k, seq",
            &[&lease_id, &RECEIPT, &ENTRY],
        )
        .await
        .map_err(unavailable)?;
    Ok(rows
        .iter()
        .map(|r| LeaseReceipt {
            index: (r.get::<_, i32>(0) == 1).then(|| r.get::<_, i64>(1) as u64),
            bytes: r.get(2),
        })
        .collect())
}
