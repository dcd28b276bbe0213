//! Held writes in PostgreSQL (SPEC §5.4): one row per escrow, its state moved by
//! compare-and-set inside the transaction that holds the row, so that replicas approving at
//! once cannot both count.

use futures_util::future::BoxFuture;

use super::tx::{escrow_state_is, put_escrow, unavailable};
use super::PostgresStore;
use crate::{EscrowRecord, EscrowUpdate, Escrows, StoreError};

impl Escrows for PostgresStore {
    fn escrow_put(&self, update: EscrowUpdate) -> BoxFuture<'_, Result<bool, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            if update.expect.is_none() {
                // Creation: the row must not exist; ON CONFLICT decides a race.
                let bytes = serde_json::to_vec(&update.record).map_err(unavailable)?;
                let n = tx
                    .execute(
                        "INSERT INTO escrows (id, record, expires_ms) VALUES ($1, $2, $3)
                         ON CONFLICT (id) DO NOTHING",
                        &[&update.id, &bytes, &update.expires_at_ms],
                    )
                    .await
                    .map_err(unavailable)?;
                tx.commit().await.map_err(unavailable)?;
                return Ok(n == 1);
            }
            if !escrow_state_is(&tx, &update).await? {
                return Ok(false);
            }
            put_escrow(
                &tx,
                &update.id,
                &update.record.to_bytes(),
                update.expires_at_ms,
            )
            .await?;
            tx.commit().await.map_err(unavailable)?;
            Ok(true)
        })
    }

    fn escrow<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<EscrowRecord>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT record FROM escrows WHERE id = $1", &[&id])
                .await
                .map_err(unavailable)?;
            row.map(|r| EscrowRecord::from_bytes(r.get::<_, &[u8]>(0)))
                .transpose()
        })
    }

    fn escrows(&self, limit: usize) -> BoxFuture<'_, Result<Vec<EscrowRecord>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            // Ids are UUIDv7: by id is by creation.
            let rows = client
                .query(
                    "SELECT record FROM escrows ORDER BY id LIMIT $1",
                    &[&(limit.min(i64::MAX as usize) as i64)],
                )
                .await
                .map_err(unavailable)?;
            // One unreadable record must not hide the others from the operators.
            Ok(rows
                .iter()
                .filter_map(|r| {
                    EscrowRecord::from_bytes(r.get::<_, &[u8]>(0))
                        .inspect_err(|e| tracing::warn!(error = %e, "escrow record skipped"))
                        .ok()
                })
                .collect())
        })
    }
}
