//! Reads of one row, shared by the trait's lookups.

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
}
