//! The statements the postgres store's transactions share.

use deadpool_postgres::tokio_postgres;

use crate::store::StoreError;

/// `lease_data.part` values, as the embedded store's key parts.
pub(super) const RECORD: i8 = b'r' as i8;
pub(super) const INVERSE: i8 = b'i' as i8;
pub(super) const SNAPSHOT: i8 = b's' as i8;
pub(super) const RECEIPT: i8 = b'c' as i8;
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

/// Whether escrow `id` is in state `expect` (`None`: absent), locking its row if present.
pub(super) async fn escrow_state_is(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    expect: Option<&str>,
) -> Result<bool, StoreError> {
    let row = tx
        .query_opt(
            "SELECT record FROM escrows WHERE id = $1 FOR UPDATE",
            &[&id],
        )
        .await
        .map_err(unavailable)?;
    let current: Option<serde_json::Value> =
        row.and_then(|r| serde_json::from_slice(r.get::<_, &[u8]>(0)).ok());
    Ok(match (current, expect) {
        (None, None) => true,
        (Some(rec), Some(state)) => rec["state"] == state,
        _ => false,
    })
}

/// Stores escrow `id`'s record; `expires_ms` (its lease's expiry) when it is created, kept
/// by later updates.
pub(super) async fn put_escrow(
    tx: &tokio_postgres::Transaction<'_>,
    id: &str,
    record: &serde_json::Value,
    expires_ms: Option<i64>,
) -> Result<(), StoreError> {
    let bytes = serde_json::to_vec(record).map_err(unavailable)?;
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

/// Sets a lease record's `state`, if the record exists.
pub(super) async fn set_lease_state(
    tx: &tokio_postgres::Transaction<'_>,
    lease_id: &str,
    state: &str,
) -> Result<(), StoreError> {
    let row = tx
        .query_opt(
            "SELECT value FROM lease_data WHERE lease_id = $1 AND part = $2 AND seq = $3",
            &[&lease_id, &RECORD, &NO_SEQ],
        )
        .await
        .map_err(unavailable)?;
    let Some(mut rec) =
        row.and_then(|r| serde_json::from_slice::<serde_json::Value>(r.get::<_, &[u8]>(0)).ok())
    else {
        return Ok(());
    };
    rec["state"] = state.into();
    let bytes = serde_json::to_vec(&rec).map_err(unavailable)?;
    put_part(tx, lease_id, RECORD, NO_SEQ, &bytes).await
}
