//! The negotiation relay's messages in PostgreSQL (`store::relay`), shared by every replica.
//!
//! Posts take the one `relay_head` row `FOR UPDATE`: cursors are handed out in commit order,
//! so a reader that has seen cursor N never later meets a message under a smaller one (a
//! sequence would hand out N+1 to a transaction that commits before N's). The row also counts
//! the messages kept, for the relay's total cap without a `count(*)` per post. Relay traffic
//! is a few messages per negotiation, so one post at a time is not a limit.

use deadpool_postgres::Object;

use crate::relay::Record;
use crate::{RelayEntry, RelayLimits, RelayMessage, RelayPosted, RelayQuery, StoreError};

use super::tx::{unavailable, unavailable_msg};

fn i64_of(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

pub(super) async fn post(
    client: &mut Object,
    m: &RelayMessage,
    limits: RelayLimits,
    now: i64,
) -> Result<RelayPosted, StoreError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    let head = tx
        .query_one(
            "SELECT next, kept FROM relay_head WHERE id = 1 FOR UPDATE",
            &[],
        )
        .await
        .map_err(unavailable)?;
    let (next, mut kept): (i64, i64) = (head.get(0), head.get(1));
    if let Some(row) = tx
        .query_opt(
            "SELECT pos, expires_ms FROM relay_messages WHERE signature = $1",
            &[&m.signature],
        )
        .await
        .map_err(unavailable)?
    {
        if row.get::<_, i64>(1) > now {
            return Ok(RelayPosted::Duplicate {
                cursor: row.get::<_, i64>(0) as u64,
            });
        }
        // Expired, not yet swept: it goes now, and the message is kept anew.
        tx.execute(
            "DELETE FROM relay_messages WHERE signature = $1",
            &[&m.signature],
        )
        .await
        .map_err(unavailable)?;
        kept -= 1;
    }
    let in_tx: i64 = tx
        .query_one(
            "SELECT count(*) FROM relay_messages WHERE tx_id = $1 AND expires_ms > $2",
            &[&m.tx_id, &now],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    if in_tx >= i64_of(limits.per_tx) {
        return Ok(RelayPosted::TxFull);
    }
    if kept >= i64_of(limits.total) {
        return Ok(RelayPosted::Full);
    }
    let record = Record::of(m);
    let bytes = serde_json::to_vec(&record).map_err(|_| unavailable_msg("relay record"))?;
    tx.execute(
        "INSERT INTO relay_messages (pos, tx_id, signature, record, expires_ms)
         VALUES ($1, $2, $3, $4, $5)",
        &[&next, &m.tx_id, &m.signature, &bytes, &m.expires_ms],
    )
    .await
    .map_err(unavailable)?;
    for (chain, address) in record.party_keys() {
        tx.execute(
            "INSERT INTO relay_parties (address, pos, chain) VALUES ($1, $2, $3)",
            &[&address.as_slice(), &next, &i64_of(chain)],
        )
        .await
        .map_err(unavailable)?;
    }
    tx.execute(
        "UPDATE relay_head SET next = $1, kept = $2 WHERE id = 1",
        &[&(next + 1), &(kept + 1)],
    )
    .await
    .map_err(unavailable)?;
    tx.commit().await.map_err(unavailable)?;
    Ok(RelayPosted::Stored {
        cursor: next as u64,
    })
}

pub(super) async fn page(
    client: &Object,
    query: &RelayQuery,
    after: u64,
    limit: usize,
    now: i64,
) -> Result<Vec<RelayEntry>, StoreError> {
    let (after, limit) = (i64_of(after), i64::try_from(limit).unwrap_or(i64::MAX));
    let rows = match query {
        RelayQuery::Tx(tx_id) => client
            .query(
                "SELECT pos, record FROM relay_messages
                 WHERE tx_id = $1 AND pos > $2 AND expires_ms > $3 ORDER BY pos LIMIT $4",
                &[tx_id, &after, &now, &limit],
            )
            .await
            .map_err(unavailable)?,
        RelayQuery::Party { address, chain } => {
            let chain = chain.map(i64_of);
            client
                .query(
                    "SELECT m.pos, m.record FROM relay_parties p JOIN relay_messages m USING (pos)
                     WHERE p.address = $1 AND ($2::bigint IS NULL OR p.chain = $2)
                       AND p.pos > $3 AND m.expires_ms > $4
                     ORDER BY p.pos LIMIT $5",
                    &[&address.as_slice(), &chain, &after, &now, &limit],
                )
                .await
                .map_err(unavailable)?
        }
    };
    rows.iter()
        .map(|r| {
            let record: Record = serde_json::from_slice(r.get::<_, &[u8]>(1))
                .map_err(|_| unavailable_msg("a relay record cannot be read"))?;
            Ok(record.entry(r.get::<_, i64>(0) as u64))
        })
        .collect()
}

/// Removes up to `limit` expired messages (their parties go with them); the count of kept
/// messages follows. Inside the sweeper's transaction.
pub(super) async fn sweep(
    tx: &deadpool_postgres::Transaction<'_>,
    now: i64,
    limit: i64,
) -> Result<u64, StoreError> {
    // The head first, as a post takes it: a post removing an expired duplicate and this sweep
    // would otherwise wait on each other's locks in opposite orders.
    tx.execute("SELECT 1 FROM relay_head WHERE id = 1 FOR UPDATE", &[])
        .await
        .map_err(unavailable)?;
    let removed: i64 = tx
        .query_one(
            "WITH gone AS (DELETE FROM relay_messages WHERE pos IN
                 (SELECT pos FROM relay_messages WHERE expires_ms <= $1 ORDER BY pos LIMIT $2)
               RETURNING pos),
             counted AS (UPDATE relay_head SET kept = kept - (SELECT count(*) FROM gone)
               WHERE id = 1 RETURNING kept)
             SELECT count(*) FROM gone",
            &[&now, &limit],
        )
        .await
        .map_err(unavailable)?
        .get(0);
    Ok(removed as u64)
}
