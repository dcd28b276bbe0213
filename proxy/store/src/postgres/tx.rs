//! The statements the postgres store's transactions share.

use crate::records::{self, CompensationStep};
use crate::Compensation;
use crate::{EscrowUpdate, LeaseRecord, LeaseState};
use deadpool_postgres::tokio_postgres;

use crate::StoreError;

/// `lease_data.part` values, as the embedded store's key parts.
pub(super) const RECORD: i8 = b'r' as i8;
pub(super) const INVERSE: i8 = b'i' as i8;
pub(super) const SNAPSHOT: i8 = b's' as i8;
pub(super) const RECEIPT: i8 = b'c' as i8;
/// A lease's log entry index (`seq` is the entry's index).
pub(super) const ENTRY: i8 = b'e' as i8;
/// `lease_data.seq` of the parts that have no sequence number.
pub(super) const NO_SEQ: i64 = -1;

/// An error with its causes: tokio-postgres says "db error" and keeps the server's message
/// (e.g. "password authentication failed for user …") as its source. Neither holds the URL.
pub(super) fn unavailable(e: impl std::error::Error) -> StoreError {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    StoreError::Unavailable(format!("postgres: {text}"))
}

pub(super) fn unavailable_msg(why: &str) -> StoreError {
    StoreError::Unavailable(format!("postgres: {why}"))
}

/// Puts one `lease_data` part.
pub(super) async fn put_part(
    tx: &tokio_postgres::Transaction<'_>,
    lease_id: &str,
    part: i8,
    seq: i64,
    value: &[u8],
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO lease_data (lease_id, part, seq, value) VALUES ($1, $2, $3, $4)
         ON CONFLICT (lease_id, part, seq) DO UPDATE SET value = EXCLUDED.value",
        &[&lease_id, &part, &seq, &value],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// Whether `update` applies to its escrow as stored (`records::escrow_update_applies`),
/// locking the escrow's row if present.
pub(super) async fn escrow_state_is(
    tx: &tokio_postgres::Transaction<'_>,
    update: &EscrowUpdate,
) -> Result<bool, StoreError> {
    let id = update.id.as_str();
    let row = tx
        .query_opt(
            "SELECT record FROM escrows WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(unavailable)?;
    let current: Option<&[u8]> = row.as_ref().map(|r| r.get(0));
    Ok(records::escrow_update_applies(current, update))
}

/// Stores escrow `id`'s record; `expires_ms` (its lease's expiry) when it is created, kept
/// by later updates.
pub(super) async fn put_escrow(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    bytes: &[u8],
    expires_ms: Option<i64>,
) -> Result<(), StoreError> {
    tx.execute(
        "INSERT INTO escrows (id, record, expires_ms) VALUES ($1, $2, $3)
         ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record,
           expires_ms = coalesce(EXCLUDED.expires_ms, escrows.expires_ms)",
        &[&id, &bytes, &expires_ms],
    )
    .await
    .map_err(unavailable)?;
    Ok(())
}

/// A freeze made (`Some`, its record) or lifted (SPEC §14).
pub(super) async fn set_freeze(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    record: Option<&[u8]>,
) -> Result<(), StoreError> {
    let done = match record {
        Some(bytes) => {
            tx.execute(
                "INSERT INTO freezes (id, record) VALUES ($1, $2)
                 ON CONFLICT (id) DO UPDATE SET record = EXCLUDED.record",
                &[&id, &bytes],
            )
            .await
        }
        None => {
            tx.execute("DELETE FROM freezes WHERE id = $1", &[&id])
                .await
        }
    };
    done.map_err(unavailable)?;
    Ok(())
}

/// Sets a lease record's `state`, if the record exists.
pub(super) async fn set_lease_state(
    tx: &tokio_postgres::Transaction<'_>,
    lease_id: &str,
    state: LeaseState,
) -> Result<(), StoreError> {
    let row = tx
        .query_opt(
            "SELECT value FROM lease_data WHERE lease_id = $1 AND part = $2 AND seq = $3",
            &[&lease_id, &RECORD, &NO_SEQ],
        )
        .await
        .map_err(unavailable)?;
    let Some(row) = row else {
        return Ok(());
    };
    let mut rec = LeaseRecord::from_bytes(row.get::<_, &[u8]>(0))?;
    rec.state = state;
    put_part(tx, lease_id, RECORD, NO_SEQ, &rec.to_bytes()).await
}

/// Marks `lease_id` compensated and advances its resource's fence, in one transaction, when
/// its record says it is committed ([`records::compensation_step`]).
pub(super) async fn compensate(
    client: &mut deadpool_postgres::Object,
    lease_id: &str,
    resource: &str,
) -> Result<Compensation, StoreError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    let row = tx
        .query_opt(
            "SELECT value FROM lease_data WHERE lease_id = $1 AND part = $2 AND seq = $3
                     FOR UPDATE",
            &[&lease_id, &RECORD, &NO_SEQ],
        )
        .await
        .map_err(unavailable)?;
    let record = row
        .map(|r| LeaseRecord::from_bytes(r.get::<_, &[u8]>(0)))
        .transpose()?;
    let answer = match records::compensation_step(record) {
        CompensationStep::Begin { record } => {
            let row = tx
                .query_one(
                    "INSERT INTO fences (resource, epoch) VALUES ($1, 1)
                             ON CONFLICT (resource) DO UPDATE SET epoch = fences.epoch + 1
                             RETURNING epoch",
                    &[&resource],
                )
                .await
                .map_err(unavailable)?;
            let epoch = row.get::<_, i64>(0) as u64;
            let done = records::compensated(*record, epoch);
            put_part(&tx, lease_id, RECORD, NO_SEQ, &done.to_bytes()).await?;
            Compensation::Started { epoch }
        }
        CompensationStep::Already => Compensation::AlreadyCompensated,
        CompensationStep::NotCommitted => Compensation::NotCommitted,
    };
    tx.commit().await.map_err(unavailable)?;
    Ok(answer)
}
