//! Removing what the postgres store no longer has to keep (the embedded store's sweeps, as
//! statements): expired idempotency keys and lapsed reservations, the data of leases past
//! `store.lease_retention` and the escrows held under them, receipts past
//! `store.receipt_retention` with the chain's anchor moved past them, negotiation-relay
//! messages past their TTL, budget spends and keys a day old. Every replica runs the sweeper; a transaction-level advisory lock lets one
//! at a time work, and each round removes a bounded number of rows so no transaction is long.

use deadpool_postgres::{Object, Pool};
use palisade_policy::digest::Sha256Digest;

use crate::{ChainAnchor, ReceiptLog, Retention, StoreError};

use super::tx::{unavailable, unavailable_msg};
use crate::clock::SharedClock;

/// Rows one round removes from each table, at most.
const PER_ROUND: i64 = 1_000;
/// The pause between rounds; a round that hit [`PER_ROUND`] is followed at once.
const PAUSE: std::time::Duration = std::time::Duration::from_secs(10);
/// The advisory lock key of the sweeper ("sweeper" in ASCII).
const SWEEP_LOCK: i64 = 0x0073_7765_6570_6572;

pub(super) fn spawn(
    pool: Pool,
    retention: Retention,
    clock: SharedClock,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let full = match pool.get().await {
                Ok(mut client) => match round(&mut client, retention, clock.now_ms()).await {
                    Ok(full) => full,
                    Err(e) => {
                        tracing::debug!(error = %e, "postgres sweep skipped");
                        false
                    }
                },
                Err(_) => false,
            };
            if !full {
                tokio::time::sleep(PAUSE).await;
            }
        }
    })
}

/// One round; `true` if some table had more due than one round removes.
pub(super) async fn round(
    client: &mut Object,
    retention: Retention,
    now: i64,
) -> Result<bool, StoreError> {
    let tx = client.transaction().await.map_err(unavailable)?;
    let row = tx
        .query_one("SELECT pg_try_advisory_xact_lock($1)", &[&SWEEP_LOCK])
        .await
        .map_err(unavailable)?;
    if !row.get::<_, bool>(0) {
        return Ok(false); // another replica is sweeping
    }
    let keys = tx
        .execute(
            "DELETE FROM idempotency WHERE key IN
               (SELECT key FROM idempotency WHERE expires_ms <= $1 LIMIT $2)",
            &[&now, &PER_ROUND],
        )
        .await
        .map_err(unavailable)?;
    let lease_cutoff =
        now.saturating_sub(retention.leases.as_millis().min(i64::MAX as u128) as i64);
    let leases = tx
        .query_one(
            "WITH due AS (DELETE FROM lease_expiry WHERE lease_id IN
                 (SELECT lease_id FROM lease_expiry WHERE expires_ms <= $1 LIMIT $2)
               RETURNING lease_id),
             gone AS (DELETE FROM lease_data WHERE lease_id IN (SELECT lease_id FROM due))
             SELECT count(*) FROM due",
            &[&lease_cutoff, &PER_ROUND],
        )
        .await
        .map_err(unavailable)?
        .get::<_, i64>(0);
    // Escrows go with their lease's data.
    let escrows = tx
        .execute(
            "DELETE FROM escrows WHERE id IN
               (SELECT id FROM escrows WHERE expires_ms <= $1 LIMIT $2)",
            &[&lease_cutoff, &PER_ROUND],
        )
        .await
        .map_err(unavailable)?;
    let mut receipts = 0;
    if let Some(keep) = retention.receipts {
        let cutoff = now.saturating_sub(keep.as_millis().min(i64::MAX as u128) as i64);
        // The oldest receipts, in chain order; the prefix of them past the cutoff goes.
        let rows = tx
            .query(
                "SELECT seq, at_ms FROM receipts ORDER BY seq LIMIT $1",
                &[&PER_ROUND],
            )
            .await
            .map_err(unavailable)?;
        let last = rows
            .iter()
            .take_while(|r| r.get::<_, i64>(1) <= cutoff)
            .last()
            .map(|r| r.get::<_, i64>(0));
        if let Some(last) = last {
            let jcs: Vec<u8> = tx
                .query_one("SELECT jcs FROM receipts WHERE seq = $1", &[&last])
                .await
                .map_err(unavailable)?
                .get(0);
            receipts = tx
                .execute("DELETE FROM receipts WHERE seq <= $1", &[&last])
                .await
                .map_err(unavailable)?;
            tx.execute(
                "INSERT INTO chain_anchor (id, pruned, prev) VALUES (1, $1, $2)
                 ON CONFLICT (id) DO UPDATE SET pruned = EXCLUDED.pruned, prev = EXCLUDED.prev",
                &[&(last + 1), &Sha256Digest::of(&jcs).to_string()],
            )
            .await
            .map_err(unavailable)?;
        }
        // The log's entries past the cutoff leave the bundles, oldest first; their hashes
        // (and so every checkpoint's provability) stay.
        receipts += tx
            .execute(
                "DELETE FROM log_entries WHERE idx IN
                   (SELECT idx FROM log_entries WHERE at_ms <= $1 ORDER BY idx LIMIT $2)",
                &[&cutoff, &PER_ROUND],
            )
            .await
            .map_err(unavailable)?;
    }
    // Budget spends and keys no window can reach any more (the longest is a day).
    let day_ago = now.saturating_sub(palisade_policy::budget::MAX_WINDOW_MS as i64);
    let mut budgets = 0;
    for statement in [
        "DELETE FROM budget_spends WHERE id IN
           (SELECT id FROM budget_spends WHERE at_ms <= $1 LIMIT $2)",
        "DELETE FROM budget_keys WHERE key IN
           (SELECT key FROM budget_keys WHERE last_ms <= $1 LIMIT $2)",
    ] {
        let n = tx
            .execute(statement, &[&day_ago, &PER_ROUND])
            .await
            .map_err(unavailable)?;
        budgets = budgets.max(n);
    }
    let relay = super::relay::sweep(&tx, now, PER_ROUND).await?;
    let rcns = super::rcns::sweep(&tx, now, PER_ROUND).await?;
    tx.commit().await.map_err(unavailable)?;
    let limit = PER_ROUND as u64;
    Ok(keys >= limit
        || leases as u64 >= limit
        || escrows >= limit
        || receipts >= limit
        || relay >= limit
        || rcns >= limit
        || budgets >= limit)
}

/// The anchor and every retained receipt, read in one snapshot.
pub(super) async fn receipt_log(client: &mut Object) -> Result<ReceiptLog, StoreError> {
    let tx = client
        .build_transaction()
        .isolation_level(deadpool_postgres::tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(unavailable)?;
    let anchor = tx
        .query_opt("SELECT pruned, prev FROM chain_anchor WHERE id = 1", &[])
        .await
        .map_err(unavailable)?
        .map(|r| -> Result<ChainAnchor, StoreError> {
            Ok(ChainAnchor {
                pruned: r.get::<_, i64>(0) as u64,
                prev: Sha256Digest::parse_ptcl(r.get::<_, &str>(1))
                    .map_err(|_| unavailable_msg("chain_anchor.prev is not a digest"))?,
            })
        })
        .transpose()?;
    let rows = tx
        .query("SELECT jcs FROM receipts ORDER BY seq", &[])
        .await
        .map_err(unavailable)?;
    Ok(ReceiptLog {
        anchor,
        receipts: rows.iter().map(|r| r.get(0)).collect(),
    })
}
