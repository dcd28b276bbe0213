//! RCNS records in PostgreSQL (`store::rcns`), shared by every replica: one row per (kind,
//! key). A create is one transaction: an expired row under the key goes, the caps are
//! counted, the row is inserted unless a live one holds the key (`ON CONFLICT DO NOTHING`
//! settles a race between replicas to one winner; the loser reads the winner's row). The
//! caps are counted without a lock, so replicas creating at the same instant may pass one
//! cap by their number: caps bound storage, not a tally anyone relies on.

use deadpool_postgres::Object;

use crate::rcns::Stored;
use crate::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, StoreError};

use super::tx::{unavailable, unavailable_msg};

fn kind_of(k: RcnsKind) -> i16 {
    i16::from(k.tag())
}

fn stored(bytes: &[u8]) -> Result<Stored, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| unavailable_msg("an RCNS record cannot be read"))
}

pub(super) async fn put(
    client: &mut Object,
    r: &RcnsRecord,
    mode: RcnsPutMode,
    now: i64,
) -> Result<RcnsPut, StoreError> {
    let kind = kind_of(r.kind);
    let body = serde_json::to_vec(&Stored::of(r)).map_err(|_| unavailable_msg("rcns record"))?;
    let tx = client.transaction().await.map_err(unavailable)?;
    match mode {
        RcnsPutMode::Touch => {
            let row = tx
                .query_opt(
                    "SELECT record FROM rcns_records
                     WHERE kind = $1 AND key = $2 AND expires_ms > $3 FOR UPDATE",
                    &[&kind, &r.key, &now],
                )
                .await
                .map_err(unavailable)?;
            let Some(row) = row else {
                return Ok(RcnsPut::Missing);
            };
            let mut old = stored(row.get::<_, &[u8]>(0))?;
            old.exp = r.expires_ms;
            let bytes = serde_json::to_vec(&old).map_err(|_| unavailable_msg("rcns record"))?;
            tx.execute(
                "UPDATE rcns_records SET record = $3, expires_ms = $4 WHERE kind = $1 AND key = $2",
                &[&kind, &r.key, &bytes, &r.expires_ms],
            )
            .await
            .map_err(unavailable)?;
        }
        RcnsPutMode::Replace => {
            tx.execute(
                "INSERT INTO rcns_records (kind, key, owner, record, expires_ms)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (kind, key) DO UPDATE SET owner = EXCLUDED.owner,
                   record = EXCLUDED.record, expires_ms = EXCLUDED.expires_ms",
                &[&kind, &r.key, &r.owner, &body, &r.expires_ms],
            )
            .await
            .map_err(unavailable)?;
        }
        RcnsPutMode::Create { per_owner, total } => {
            tx.execute(
                "DELETE FROM rcns_records WHERE kind = $1 AND key = $2 AND expires_ms <= $3",
                &[&kind, &r.key, &now],
            )
            .await
            .map_err(unavailable)?;
            let counts = tx
                .query_one(
                    "SELECT count(*) FILTER (WHERE owner = $2), count(*) FROM rcns_records
                     WHERE kind = $1 AND expires_ms > $3",
                    &[&kind, &r.owner, &now],
                )
                .await
                .map_err(unavailable)?;
            let (mine, all): (i64, i64) = (counts.get(0), counts.get(1));
            let existing = tx
                .query_opt(
                    "SELECT record FROM rcns_records WHERE kind = $1 AND key = $2",
                    &[&kind, &r.key],
                )
                .await
                .map_err(unavailable)?;
            if let Some(row) = existing {
                let old = stored(row.get::<_, &[u8]>(0))?.record(r.kind, r.key.clone());
                return Ok(RcnsPut::Exists(Box::new(old)));
            }
            if mine as u64 >= per_owner {
                return Ok(RcnsPut::OwnerFull);
            }
            if all as u64 >= total {
                return Ok(RcnsPut::Full);
            }
            let inserted = tx
                .execute(
                    "INSERT INTO rcns_records (kind, key, owner, record, expires_ms)
                     VALUES ($1, $2, $3, $4, $5) ON CONFLICT (kind, key) DO NOTHING",
                    &[&kind, &r.key, &r.owner, &body, &r.expires_ms],
                )
                .await
                .map_err(unavailable)?;
            if inserted == 0 {
                // Another replica's create committed between our read and our insert.
                let row = tx
                    .query_one(
                        "SELECT record FROM rcns_records WHERE kind = $1 AND key = $2",
                        &[&kind, &r.key],
                    )
                    .await
                    .map_err(unavailable)?;
                let old = stored(row.get::<_, &[u8]>(0))?.record(r.kind, r.key.clone());
                return Ok(RcnsPut::Exists(Box::new(old)));
            }
        }
    }
    tx.commit().await.map_err(unavailable)?;
    Ok(RcnsPut::Stored)
}

pub(super) async fn get(
    client: &Object,
    kind: RcnsKind,
    key: &str,
    now: i64,
) -> Result<Option<RcnsRecord>, StoreError> {
    let row = client
        .query_opt(
            "SELECT record FROM rcns_records WHERE kind = $1 AND key = $2 AND expires_ms > $3",
            &[&kind_of(kind), &key, &now],
        )
        .await
        .map_err(unavailable)?;
    row.map(|r| Ok(stored(r.get::<_, &[u8]>(0))?.record(kind, key.to_owned())))
        .transpose()
}

pub(super) async fn list(
    client: &Object,
    kind: RcnsKind,
    owner: Option<&str>,
    limit: usize,
    now: i64,
) -> Result<Vec<RcnsRecord>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let rows = client
        .query(
            "SELECT key, record FROM rcns_records
             WHERE kind = $1 AND ($2::text IS NULL OR owner = $2) AND expires_ms > $3
             ORDER BY key LIMIT $4",
            &[&kind_of(kind), &owner, &now, &limit],
        )
        .await
        .map_err(unavailable)?;
    rows.iter()
        .map(|r| Ok(stored(r.get::<_, &[u8]>(1))?.record(kind, r.get::<_, String>(0))))
        .collect()
}

/// Removes up to `limit` expired records. Inside the sweeper's transaction.
pub(super) async fn sweep(
    tx: &deadpool_postgres::Transaction<'_>,
    now: i64,
    limit: i64,
) -> Result<u64, StoreError> {
    tx.execute(
        "DELETE FROM rcns_records WHERE (kind, key) IN
           (SELECT kind, key FROM rcns_records WHERE expires_ms <= $1 LIMIT $2)",
        &[&now, &limit],
    )
    .await
    .map_err(unavailable)
}
