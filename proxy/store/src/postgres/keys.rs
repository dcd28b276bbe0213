//! Idempotency reservations as rows (SPEC §5.6 across replicas): a request reserves its key
//! with a row whose `owner` is set; storing the key's outcome (in the receipt's batch) clears
//! `owner`; a refusal before forwarding deletes the row it owns. A reservation whose hold has
//! passed belongs to a request that died, and is taken over, as is an expired outcome.

use deadpool_postgres::Object;

use crate::{KeyState, StoreError, StoredOutcome};

/// What a reservation's row holds until its outcome replaces it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Reserved {
    fingerprint: String,
}

use super::tx::unavailable;

/// Reserve, or say who has the key, in one statement. The outer `SELECT` sees the row as it
/// was before this statement: absent, or the one that kept the insert from happening.
const RESERVE: &str = "WITH mine AS (
    INSERT INTO idempotency (key, record, expires_ms, owner) VALUES ($1, $2, $3, $4)
    ON CONFLICT (key) DO UPDATE SET record = EXCLUDED.record, expires_ms = EXCLUDED.expires_ms,
      owner = EXCLUDED.owner
    WHERE idempotency.expires_ms <= $5
    RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM mine), i.record, i.owner
  FROM (SELECT 1) one LEFT JOIN idempotency i ON i.key = $1";

const RELEASE: &str = "DELETE FROM idempotency WHERE key = $1 AND owner = $2";

pub(super) async fn reserve(
    client: &Object,
    key: &str,
    fingerprint: &str,
    owner: &str,
    hold_until_ms: i64,
    now: i64,
) -> Result<KeyState, StoreError> {
    let record = serde_json::to_vec(&Reserved {
        fingerprint: fingerprint.to_owned(),
    })
    .map_err(unavailable)?;
    let st = client.prepare_cached(RESERVE).await.map_err(unavailable)?;
    let row = client
        .query_one(&st, &[&key, &record, &hold_until_ms, &owner, &now])
        .await
        .map_err(unavailable)?;
    if row.get::<_, bool>(0) {
        return Ok(KeyState::Reserved);
    }
    let record: Option<&[u8]> = row.get(1);
    let running: Option<&str> = row.get(2);
    Ok(match (record, running) {
        (Some(rec), None) => KeyState::Stored(StoredOutcome::from_bytes(rec)?),
        (Some(rec), Some(_)) => KeyState::Running {
            fingerprint: serde_json::from_slice::<Reserved>(rec)
                .ok()
                .map(|r| r.fingerprint),
        },
        // Reserved by a request that committed after this statement's snapshot: it is
        // running (or just finished, and a retry will see its outcome).
        (None, _) => KeyState::Running { fingerprint: None },
    })
}

pub(super) async fn release(client: &Object, key: &str, owner: &str) -> Result<(), StoreError> {
    let st = client.prepare_cached(RELEASE).await.map_err(unavailable)?;
    client
        .execute(&st, &[&key, &owner])
        .await
        .map_err(unavailable)?;
    Ok(())
}
