//! Reading the receipt log (and the v1 chain kept from before it) out of the file: its head,
//! stored hashes and entries, and a lease's receipts.

use palisade_policy::log::merkle::Hash;
use palisade_policy::log::{Head, Signer};
use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};

use crate::{ChainAnchor, LeaseReceipt, ReceiptLog, StoreError};

use super::tables::{
    lease_key, unavailable, Part, LEASE_DATA, LOG_ENTRIES, LOG_HEAD, META, RECEIPTS, RECEIPT_ANCHOR,
};

/// The receipt log's head as the file holds it; the signed empty checkpoint when the log has
/// no entry yet.
pub(super) fn read_head(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
    signer: &Signer,
) -> Result<Head, StoreError> {
    match meta.get(LOG_HEAD).map_err(unavailable)? {
        Some(v) => Head::from_bytes(v.value())
            .map_err(|e| unavailable(format!("store: the log head cannot be read: {e}"))),
        None => signer.empty().map_err(unavailable),
    }
}

/// The log's stored hashes at `indexes`, from any table view.
pub(super) fn read_hashes(
    table: &impl ReadableTable<u64, &'static [u8]>,
    indexes: &[u64],
) -> Result<Vec<Hash>, StoreError> {
    indexes
        .iter()
        .map(|i| {
            let v = table.get(*i).map_err(unavailable)?.ok_or_else(|| {
                unavailable(format!("store: the log's stored hash {i} is missing"))
            })?;
            <[u8; 32]>::try_from(v.value()).map(Hash).map_err(|_| {
                unavailable(format!("store: the log's stored hash {i} is not 32 bytes"))
            })
        })
        .collect()
}

/// The retained entries with an index in `from..to`.
pub(super) fn entries(
    rtx: &ReadTransaction,
    from: u64,
    to: u64,
) -> Result<crate::LogEntries, StoreError> {
    let table = rtx.open_table(LOG_ENTRIES).map_err(unavailable)?;
    let mut out = Vec::new();
    for row in table.range(from..to).map_err(unavailable)? {
        let (k, v) = row.map_err(unavailable)?;
        out.push((k.value(), v.value().to_vec()));
    }
    Ok(out)
}

/// The v1 chain kept from before the log: its anchor and retained receipts.
pub(super) fn legacy(rtx: &ReadTransaction) -> Result<ReceiptLog, StoreError> {
    let anchor = read_anchor(&rtx.open_table(META).map_err(unavailable)?)?;
    let table = rtx.open_table(RECEIPTS).map_err(unavailable)?;
    let mut receipts = Vec::with_capacity(table.len().map_err(unavailable)? as usize);
    for row in table.iter().map_err(unavailable)? {
        let (_, jcs) = row.map_err(unavailable)?;
        receipts.push(jcs.value().to_vec());
    }
    Ok(ReceiptLog { anchor, receipts })
}

/// Every retained receipt naming `lease_id`: its v1 receipts, then its log entries.
pub(super) fn lease_receipts(
    rtx: &ReadTransaction,
    lease_id: &str,
) -> Result<Vec<LeaseReceipt>, StoreError> {
    let index = rtx.open_table(LEASE_DATA).map_err(unavailable)?;
    let mut out = Vec::new();
    let receipts = rtx.open_table(RECEIPTS).map_err(unavailable)?;
    for seq in keyed_indexes(&index, lease_id, Part::Receipt)? {
        if let Some(v) = receipts.get(seq).map_err(unavailable)? {
            out.push(LeaseReceipt {
                index: None,
                bytes: v.value().to_vec(),
            });
        }
    }
    let entries = rtx.open_table(LOG_ENTRIES).map_err(unavailable)?;
    for i in keyed_indexes(&index, lease_id, Part::Entry)? {
        if let Some(v) = entries.get(i).map_err(unavailable)? {
            out.push(LeaseReceipt {
                index: Some(i),
                bytes: v.value().to_vec(),
            });
        }
    }
    Ok(out)
}

/// The numbers a lease's `part` keys end with (`lease_key(id, part, Some(n))`), in order.
fn keyed_indexes(
    index: &impl ReadableTable<&'static [u8], &'static [u8]>,
    lease_id: &str,
    part: Part,
) -> Result<Vec<u64>, StoreError> {
    let from = lease_key(lease_id, part, None);
    let mut to = from.clone();
    if let Some(last) = to.last_mut() {
        *last += 1;
    }
    let mut out = Vec::new();
    for row in index
        .range::<&[u8]>(from.as_slice()..to.as_slice())
        .map_err(unavailable)?
    {
        let (k, _) = row.map_err(unavailable)?;
        let k = k.value();
        if let Some(n) = k
            .get(k.len().saturating_sub(8)..)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
        {
            out.push(u64::from_be_bytes(n));
        }
    }
    Ok(out)
}

/// The v1 receipt chain's anchor, if receipts were removed.
pub(super) fn read_anchor(
    meta: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Option<ChainAnchor>, StoreError> {
    let Some(v) = meta.get(RECEIPT_ANCHOR).map_err(unavailable)? else {
        return Ok(None);
    };
    let bad = || unavailable("store: the receipt anchor cannot be read");
    let rec: serde_json::Value = serde_json::from_slice(v.value()).map_err(|_| bad())?;
    let pruned = rec["pruned"].as_u64().ok_or_else(bad)?;
    let prev = rec["prev"]
        .as_str()
        .and_then(|s| palisade_policy::digest::Sha256Digest::parse_ptcl(s).ok())
        .ok_or_else(bad)?;
    Ok(Some(ChainAnchor { pruned, prev }))
}
