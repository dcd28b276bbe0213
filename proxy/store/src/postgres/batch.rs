//! Group commit for the postgres store: one writer task per replica takes every fence advance
//! and receipt append waiting (up to [`MAX_BATCH`]) and applies them in *one* transaction, so
//! concurrent writes share a commit (and its WAL flush), and the shared log head's row lock is
//! taken once per batch, which integrates its receipts and signs one checkpoint. Statements are prepared once per
//! connection and pipelined: a batch costs a handful of round trips whatever its size.
//!
//! A batch that fails before `COMMIT` was sent changed nothing: every job in it gets
//! `Unavailable` (or the batch is run again after a deadlock or serialisation failure, which
//! rolled it back). A batch whose `COMMIT` got no answer may or may not have committed: every
//! job gets `Uncertain` and nothing is retried.

use crate::clock::{Clock, SharedClock};
use crate::records;
use crate::LeaseState;
use std::collections::HashMap;
use std::sync::Arc;

use deadpool_postgres::{tokio_postgres, Pool};
use futures_util::future::try_join_all;
use palisade_policy::log::merkle::{Fetched, Hash};
use palisade_policy::log::{self, Signer};
use palisade_policy::receipt::{Entry, ReceiptBody, ReceiptKind, SealedReceipt};
use tokio::sync::{mpsc, oneshot};

use crate::{Advance, Attachments, StoreError, WriteIntent};

use super::tx::{escrow_state_is, put_escrow, set_lease_state, unavailable, unavailable_msg};

type Param<'a> = dyn tokio_postgres::types::ToSql + Sync + 'a;

/// Most jobs in one transaction.
pub(super) const MAX_BATCH: usize = 64;
/// Runs of a batch that a deadlock or serialisation failure rolled back.
const ATTEMPTS: usize = 3;

pub(super) enum Job {
    Advance(
        Box<WriteIntent>,
        oneshot::Sender<Result<Advance, StoreError>>,
    ),
    Append(
        Box<(ReceiptBody, Entry, Attachments)>,
        oneshot::Sender<Result<Option<SealedReceipt>, StoreError>>,
    ),
}

/// The fence CAS and the lease's data in one statement: the parts are written only if the
/// epoch advanced. `before` is the epoch in the statement's snapshot (for the 409's `current`).
const ADVANCE: &str = "WITH won AS (
    INSERT INTO fences (resource, epoch) VALUES ($1, $2)
    ON CONFLICT (resource) DO UPDATE SET epoch = EXCLUDED.epoch
    WHERE fences.epoch < EXCLUDED.epoch RETURNING epoch),
  parts AS (
    INSERT INTO lease_data (lease_id, part, seq, value)
    SELECT $3, p.part, -1, p.value
    FROM (VALUES ('r'::\"char\", $4::bytea), ('i'::\"char\", $5::bytea), ('s'::\"char\", $6::bytea))
         AS p(part, value)
    WHERE p.value IS NOT NULL AND EXISTS (SELECT 1 FROM won)
    ON CONFLICT (lease_id, part, seq) DO UPDATE SET value = EXCLUDED.value),
  expiry AS (
    INSERT INTO lease_expiry (lease_id, expires_ms) SELECT $3, $7 WHERE EXISTS (SELECT 1 FROM won)
    ON CONFLICT (lease_id) DO UPDATE SET expires_ms = EXCLUDED.expires_ms)
  SELECT (SELECT epoch FROM won), (SELECT epoch FROM fences WHERE resource = $1)";

const HEAD: &str = "SELECT size FROM log_head WHERE id = 1 FOR UPDATE";
const FRONTIER: &str = "SELECT idx, hash FROM log_hashes WHERE idx = ANY($1)";
const ENTRIES: &str = "INSERT INTO log_entries (idx, entry, at_ms)
    SELECT i, e, $3 FROM unnest($1::bigint[], $2::bytea[]) AS u(i, e)";
const HASHES: &str = "INSERT INTO log_hashes (idx, hash)
    SELECT i, h FROM unnest($1::bigint[], $2::bytea[]) AS u(i, h)";
const ENTRY_INDEX: &str = "INSERT INTO lease_data (lease_id, part, seq, value)
    SELECT l, 'e', s, '' FROM unnest($1::text[], $2::bigint[]) AS u(l, s)
    ON CONFLICT (lease_id, part, seq) DO NOTHING";
const OUTCOMES: &str = "INSERT INTO idempotency (key, record, expires_ms, owner)
    SELECT k, r, e, NULL FROM unnest($1::text[], $2::bytea[], $3::bigint[]) AS u(k, r, e)
    ON CONFLICT (key) DO UPDATE SET record = EXCLUDED.record, expires_ms = EXCLUDED.expires_ms,
    owner = NULL";
const SET_HEAD: &str = "UPDATE log_head SET size = $1, note = $2 WHERE id = 1";

/// Starts the writer task; it ends when every sender is dropped.
pub(super) fn spawn(pool: Pool, signer: Arc<Signer>, clock: SharedClock) -> mpsc::Sender<Job> {
    let (tx, mut rx) = mpsc::channel::<Job>(4 * MAX_BATCH);
    tokio::spawn(async move {
        let mut jobs = Vec::with_capacity(MAX_BATCH);
        while rx.recv_many(&mut jobs, MAX_BATCH).await > 0 {
            run(&pool, &signer, clock.as_ref(), std::mem::take(&mut jobs)).await;
        }
    });
    tx
}

enum Answer {
    Advance(Result<Advance, StoreError>),
    Append(Option<SealedReceipt>),
}

enum Failure {
    /// Nothing was committed; `retry`: the server rolled back a deadlock or serialisation
    /// failure, and running the batch again is safe.
    RolledBack { error: StoreError, retry: bool },
    /// `COMMIT` was sent and not answered.
    Uncertain(StoreError),
}

fn rolled_back(e: tokio_postgres::Error) -> Failure {
    use tokio_postgres::error::SqlState;
    let retry = e.code().is_some_and(|c| {
        *c == SqlState::T_R_DEADLOCK_DETECTED || *c == SqlState::T_R_SERIALIZATION_FAILURE
    });
    Failure::RolledBack {
        error: unavailable(e),
        retry,
    }
}

fn failed(e: StoreError) -> Failure {
    Failure::RolledBack {
        error: e,
        retry: false,
    }
}

async fn run(pool: &Pool, signer: &Signer, clock: &dyn Clock, jobs: Vec<Job>) {
    let waited = tokio::time::Instant::now();
    let mut attempt = 1;
    let outcome = loop {
        match apply(pool, signer, clock.now_ms(), &jobs).await {
            Err(Failure::RolledBack { retry: true, .. }) if attempt < ATTEMPTS => attempt += 1,
            other => break other,
        }
    };
    metrics::histogram!(crate::metrics::STORE_OP_DURATION, "op" => "commit")
        .record(waited.elapsed().as_secs_f64());
    metrics::histogram!(crate::metrics::STORE_BATCH_JOBS).record(jobs.len() as f64);
    let error = match outcome {
        Ok(answers) => {
            for (job, answer) in jobs.into_iter().zip(answers) {
                match (job, answer) {
                    (Job::Advance(_, reply), Answer::Advance(a)) => {
                        let _ = reply.send(a);
                    }
                    (Job::Append(_, reply), Answer::Append(a)) => {
                        let _ = reply.send(Ok(a));
                    }
                    // `apply` answers each job with its own kind, in order.
                    (Job::Advance(_, reply), _) => {
                        let _ = reply.send(Err(unavailable_msg("batch answers out of order")));
                    }
                    (Job::Append(_, reply), _) => {
                        let _ = reply.send(Err(unavailable_msg("batch answers out of order")));
                    }
                }
            }
            return;
        }
        Err(Failure::RolledBack { error, .. }) => error,
        Err(Failure::Uncertain(error)) => error,
    };
    tracing::warn!(error = %error, jobs = jobs.len(), "postgres batch not committed");
    for job in jobs {
        match job {
            Job::Advance(_, reply) => {
                let _ = reply.send(Err(error.clone()));
            }
            Job::Append(_, reply) => {
                let _ = reply.send(Err(error.clone()));
            }
        }
    }
}

/// One transaction for `jobs`: the advances (pipelined), then the receipts, integrated in
/// arrival order on the shared log head. Fence rows are locked before the head row in every
/// batch of every replica, and a resource's write lock keeps two replicas from advancing one
/// fence at once.
async fn apply(
    pool: &Pool,
    signer: &Signer,
    now: i64,
    jobs: &[Job],
) -> Result<Vec<Answer>, Failure> {
    let mut client = pool.get().await.map_err(|e| failed(unavailable(e)))?;
    let tx = client.transaction().await.map_err(rolled_back)?;
    let mut answers: Vec<Option<Answer>> = jobs.iter().map(|_| None).collect();

    let advances: Vec<(usize, &WriteIntent)> = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| match j {
            Job::Advance(intent, _) => Some((i, &**intent)),
            Job::Append(..) => None,
        })
        .collect();
    if !advances.is_empty() {
        let st = tx.prepare_cached(ADVANCE).await.map_err(rolled_back)?;
        let rows = try_join_all(advances.iter().map(|(_, i)| {
            let st = &st;
            let tx = &tx;
            async move {
                let record = i.lease_record.to_bytes();
                let epoch = i64::try_from(i.epoch).map_err(|_| {
                    failed(unavailable_msg("an epoch beyond 2^63 cannot be stored"))
                })?;
                tx.query_one(
                    st,
                    &[
                        &i.resource,
                        &epoch,
                        &i.lease_id,
                        &record,
                        &i.inverse,
                        &i.snapshot,
                        &i.expires_at_ms,
                    ],
                )
                .await
                .map_err(rolled_back)
            }
        }))
        .await?;
        for ((at, intent), row) in advances.iter().zip(rows) {
            let won: Option<i64> = row.get(0);
            let before: Option<i64> = row.get(1);
            let answer = match (won, before) {
                (Some(_), _) => Advance::Advanced,
                (None, Some(current)) if current as u64 >= intent.epoch => Advance::Stale {
                    current: current as u64,
                },
                // A newer epoch committed after this statement's snapshot: read it now.
                (None, _) => {
                    let row = tx
                        .query_one(
                            "SELECT epoch FROM fences WHERE resource = $1",
                            &[&intent.resource],
                        )
                        .await
                        .map_err(rolled_back)?;
                    Advance::Stale {
                        current: row.get::<_, i64>(0) as u64,
                    }
                }
            };
            answers[*at] = Some(Answer::Advance(Ok(answer)));
        }
    }

    let appends: Vec<(usize, &(ReceiptBody, Entry, Attachments))> = jobs
        .iter()
        .enumerate()
        .filter_map(|(i, j)| match j {
            Job::Append(a, _) => Some((i, &**a)),
            Job::Advance(..) => None,
        })
        .collect();
    if !appends.is_empty() {
        append(&tx, signer, now, &appends, &mut answers).await?;
    }

    // A server's answer to COMMIT (even an error) is certain; no answer is not.
    if let Err(e) = tx.commit().await {
        return Err(if e.as_db_error().is_some() {
            rolled_back(e)
        } else {
            Failure::Uncertain(StoreError::Uncertain(format!("postgres: {e}")))
        });
    }
    answers
        .into_iter()
        .map(|a| a.ok_or_else(|| Failure::Uncertain(unavailable_msg("a job got no answer"))))
        .collect()
}

/// A batch's receipt waiting for the batch's checkpoint.
struct Pending<'b> {
    answer: usize,
    entry: Entry,
    attach: &'b Attachments,
}

/// The receipts of a batch: on the log head (taken `FOR UPDATE`: one log for every replica,
/// integrated in turn), each escrow update checked in order, then the entries integrated, one
/// checkpoint signed, and each envelope stored with what it carries.
async fn append(
    tx: &deadpool_postgres::Transaction<'_>,
    signer: &Signer,
    now: i64,
    appends: &[(usize, &(ReceiptBody, Entry, Attachments))],
    answers: &mut [Option<Answer>],
) -> Result<(), Failure> {
    let st = tx.prepare_cached(HEAD).await.map_err(rolled_back)?;
    let size: i64 = tx.query_one(&st, &[]).await.map_err(rolled_back)?.get(0);
    let size = u64::try_from(size).map_err(|_| failed(unavailable_msg("log_head.size < 0")))?;
    let (mut index_leases, mut index_seqs) = (Vec::new(), Vec::new());
    let mut pending = Vec::new();
    for (at, (body, entry, attach)) in appends {
        if let Some(update) = &attach.escrow {
            // In turn, not pipelined: a later job may depend on an earlier one's update.
            if !escrow_state_is(tx, update).await.map_err(failed)? {
                answers[*at] = Some(Answer::Append(None));
                continue;
            }
            // The new state now, for later jobs; written again with the envelope below.
            let record = records::sealed_escrow(update, &entry.value);
            put_escrow(tx, &update.id, &record, None)
                .await
                .map_err(failed)?;
        }
        let index = (size + pending.len() as u64) as i64;
        if let Some(lease_id) = &body.lease_id {
            if body.kind == ReceiptKind::Interim {
                // Sent but not complete: nothing to compensate (SPEC §7).
                set_lease_state(tx, lease_id, LeaseState::Interim)
                    .await
                    .map_err(failed)?;
            }
            index_leases.push(lease_id.as_str());
            index_seqs.push(index);
        }
        pending.push(Pending {
            answer: *at,
            entry: entry.clone(),
            attach,
        });
    }
    if pending.is_empty() {
        return Ok(());
    }
    let frontier: Vec<i64> = log::batch::frontier(size)
        .into_iter()
        .map(|i| i as i64)
        .collect();
    let st = tx.prepare_cached(FRONTIER).await.map_err(rolled_back)?;
    let rows = tx.query(&st, &[&frontier]).await.map_err(rolled_back)?;
    let mut fetched = Vec::with_capacity(rows.len());
    for row in rows {
        let hash: &[u8] = row.get(1);
        let hash = <[u8; 32]>::try_from(hash)
            .map_err(|_| failed(unavailable_msg("a stored log hash is not 32 bytes")))?;
        fetched.push((row.get::<_, i64>(0) as u64, Hash(hash)));
    }
    let (targets, entries): (Vec<_>, Vec<_>) = pending
        .into_iter()
        .map(|p| ((p.answer, p.attach), p.entry))
        .unzip();
    let sealed = log::seal::seal(
        size,
        &Fetched(fetched.into_iter().collect()),
        entries,
        signer,
    )
    .map_err(|e| failed(unavailable_msg(&format!("receipt log: {e}"))))?;
    crate::metrics::count_sealed(sealed.receipts.len(), sealed.head.size);
    let (hash_idx, hashes): (Vec<i64>, Vec<Vec<u8>>) = sealed
        .hashes
        .iter()
        .map(|(i, h)| (*i as i64, h.0.to_vec()))
        .unzip();
    let (mut entry_idx, mut entry_bytes) = (Vec::new(), Vec::new());
    // Last outcome per key wins (one statement may not update a row twice).
    let mut outcomes: HashMap<&str, (Vec<u8>, i64)> = HashMap::new();
    for ((at, attach), receipt) in targets.into_iter().zip(sealed.receipts) {
        entry_idx.push(receipt.index as i64);
        entry_bytes.push(receipt.entry.clone());
        if let Some(update) = &attach.escrow {
            let record = records::sealed_escrow(update, &receipt.value);
            put_escrow(tx, &update.id, &record, update.expires_at_ms)
                .await
                .map_err(failed)?;
        }
        if let Some(f) = &attach.freeze {
            super::tx::set_freeze(tx, &f.id, f.record.as_deref())
                .await
                .map_err(failed)?;
        }
        if let Some(idem) = &attach.idempotency {
            let bytes = records::sealed_outcome(idem, &receipt.value);
            outcomes.insert(idem.key.as_str(), (bytes, idem.expires_ms));
        }
        answers[at] = Some(Answer::Append(Some(receipt)));
    }
    let (mut keys, mut records, mut expiries) = (Vec::new(), Vec::new(), Vec::new());
    for (key, (record, expires)) in outcomes {
        keys.push(key);
        records.push(record);
        expiries.push(expires);
    }
    let new_size = sealed.head.size as i64;
    let (s1, s2, s3, s4, s5) = tokio::try_join!(
        tx.prepare_cached(ENTRIES),
        tx.prepare_cached(HASHES),
        tx.prepare_cached(ENTRY_INDEX),
        tx.prepare_cached(OUTCOMES),
        tx.prepare_cached(SET_HEAD),
    )
    .map_err(rolled_back)?;
    let p1: [&Param<'_>; 3] = [&entry_idx, &entry_bytes, &now];
    let p2: [&Param<'_>; 2] = [&hash_idx, &hashes];
    let p3: [&Param<'_>; 2] = [&index_leases, &index_seqs];
    let p4: [&Param<'_>; 3] = [&keys, &records, &expiries];
    let p5: [&Param<'_>; 2] = [&new_size, &sealed.head.note];
    tokio::try_join!(
        tx.execute(&s1, &p1),
        tx.execute(&s2, &p2),
        tx.execute(&s3, &p3),
        tx.execute(&s4, &p4),
        tx.execute(&s5, &p5),
    )
    .map_err(rolled_back)?;
    Ok(())
}
