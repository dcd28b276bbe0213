//! Reads shared by the trait's lookups.

use crate::store::StoreError;

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
}
