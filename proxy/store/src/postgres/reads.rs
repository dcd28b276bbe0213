//! Reads shared by the trait's lookups, and the budgets' one-statement check (SPEC §14).

use crate::{BudgetSpend, BudgetVerdict, StoreError};

use super::tx::{unavailable, NO_SEQ};

impl super::PostgresStore {
    pub(super) async fn lease_part(
        &self,
        lease_id: &str,
        part: i8,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT value FROM lease_data WHERE lease_id = $1 AND part = $2 AND seq = $3",
                &[&lease_id, &part, &NO_SEQ],
            )
            .await
            .map_err(unavailable)?;
        Ok(row.map(|r| r.get(0)))
    }

    /// Every freeze (SPEC §14), oldest first (ids are UUIDv7).
    pub(super) async fn read_freezes(&self) -> Result<Vec<Vec<u8>>, StoreError> {
        let client = self.client().await?;
        let rows = client
            .query("SELECT record FROM freezes ORDER BY id", &[])
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(|r| r.get::<_, Vec<u8>>(0)).collect())
    }

    /// One round trip: `palisade_budget_spend` (schema 8) checks and spends every rule.
    pub(super) async fn spend_budget(
        &self,
        s: Vec<BudgetSpend>,
    ) -> Result<BudgetVerdict, StoreError> {
        let client = self.client().await?;
        let keys: Vec<Vec<u8>> = s.iter().map(|b| b.key.to_vec()).collect();
        let limits: Vec<i64> = s.iter().map(|b| i64::from(b.limit)).collect();
        let windows: Vec<i64> = s
            .iter()
            .map(|b| i64::try_from(b.window_ms).unwrap_or(i64::MAX))
            .collect();
        let now = self.clock.now_ms();
        let st = client
            .prepare_cached("SELECT over, retry_ms, ids FROM palisade_budget_spend($1, $2, $3, $4)")
            .await
            .map_err(unavailable)?;
        let row = client
            .query_one(&st, &[&keys, &limits, &windows, &now])
            .await
            .map_err(unavailable)?;
        let (over, retry_ms, ids): (i32, i64, Vec<i64>) = (row.get(0), row.get(1), row.get(2));
        if over > 0 {
            return Ok(BudgetVerdict::Over {
                rule: usize::try_from(over - 1).unwrap_or(0),
                retry_after_ms: u64::try_from(retry_ms).unwrap_or(1),
            });
        }
        Ok(BudgetVerdict::Spent(
            ids.iter().map(|id| id.to_be_bytes().to_vec()).collect(),
        ))
    }

    pub(super) async fn refund_budget(&self, spent: Vec<Vec<u8>>) -> Result<(), StoreError> {
        let ids: Vec<i64> = spent
            .iter()
            .filter_map(|b| {
                <[u8; 8]>::try_from(b.as_slice())
                    .ok()
                    .map(i64::from_be_bytes)
            })
            .collect();
        let client = self.client().await?;
        client
            .execute("DELETE FROM budget_spends WHERE id = ANY($1)", &[&ids])
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}
