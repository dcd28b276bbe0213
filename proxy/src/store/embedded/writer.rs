//! The writer thread: takes every job waiting, applies them in one transaction, makes the
//! batch durable with one journal append and fsync, answers each caller; checkpoints redb.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use palisade_policy::keys::KeyPair;
use redb::{Database, Durability};

use crate::store::journal::{self, Journal};
use crate::store::{Advance, Retention, StoreError};

use super::jobs::{apply, Answer, Job};
use super::sweep::Sweeper;
use super::tables::{unavailable, ChainHead, Tables};

/// Most jobs one transaction takes, so one slow batch cannot grow without bound.
pub(super) const MAX_BATCH: usize = 512;

/// Journal size that triggers a checkpoint. Bounds both replay time after a crash and the
/// memory redb holds for commits not yet checkpointed.
pub(super) const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Non-durable commits between checkpoints. redb frees the pages a commit replaces only at a
/// durable commit (`Durability::None` commits never free pages), so without this a busy
/// writer that never passes `CHECKPOINT_BYTES` quickly grows the file by every page it has
/// ever copied: measured 46–94 KB per write before, 3–4 KB after (16 and 64 measured the
/// same; 64 keeps the extra fsyncs under 2 % of commits).
pub(super) const CHECKPOINT_COMMITS: u64 = 64;
/// A quiet writer checkpoints after this long, so an idle store is one file on disk.
pub(super) const CHECKPOINT_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// What the writer thread starts from.
pub(super) struct Start {
    pub(super) journal: Journal,
    /// Signs the receipts.
    pub(super) key: Arc<KeyPair>,
    /// The receipt chain's head as the file holds it.
    pub(super) chain: ChainHead,
    pub(super) retention: Retention,
}

/// The writer thread: batches jobs into transactions until every sender is gone.
pub(super) fn writer(
    db: Arc<Database>,
    start: Start,
    rx: mpsc::Receiver<Job>,
    commits: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
) {
    let Start {
        mut journal,
        key,
        mut chain,
        retention,
    } = start;
    let mut sweeper = Sweeper::new(retention);
    use crate::telemetry::{FENCE_ADVANCES, STORE_BATCH_JOBS, STORE_OP_DURATION};
    let commit_time = metrics::histogram!(STORE_OP_DURATION, "op" => "commit");
    let batch_jobs = metrics::histogram!(STORE_BATCH_JOBS);
    let advances = metrics::counter!(FENCE_ADVANCES);
    let mut since_checkpoint = 0u64;
    loop {
        let first = match rx.recv_timeout(CHECKPOINT_IDLE) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !journal.is_empty() && checkpoint(&db, &mut journal, &failed) {
                    since_checkpoint = 0;
                }
                continue;
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        let started = tokio::time::Instant::now();
        let result = apply(&db, &mut journal, &key, chain, &mut sweeper, &batch);
        commit_time.record(started.elapsed().as_secs_f64());
        batch_jobs.record(batch.len() as f64);
        match result {
            Ok((answers, new_chain)) => {
                since_checkpoint += 1;
                if (journal.len() > CHECKPOINT_BYTES || since_checkpoint >= CHECKPOINT_COMMITS)
                    && checkpoint(&db, &mut journal, &failed)
                {
                    since_checkpoint = 0;
                }
                // Only now, after the commit, is the new chain head real.
                chain = new_chain;
                commits.fetch_add(1, Ordering::Relaxed);
                failed.store(false, Ordering::Relaxed);
                for (job, answer) in batch.into_iter().zip(answers) {
                    match (job, answer) {
                        (Job::Advance(_, reply), Answer::Advance(a)) => {
                            if a == Advance::Advanced {
                                advances.increment(1);
                            }
                            let _ = reply.send(Ok(a));
                        }
                        (Job::Receipt(_, reply), Answer::Receipt(r)) => {
                            let _ = reply.send(Ok(r.map(|r| *r)));
                        }
                        (Job::EscrowPut(_, reply), Answer::EscrowPut(done)) => {
                            let _ = reply.send(Ok(done));
                        }
                        (Job::Stage { reply, .. }, Answer::Staged) => {
                            let _ = reply.send(Ok(()));
                        }
                        (Job::Compensate(_, reply), Answer::Compensate(c)) => {
                            let _ = reply.send(Ok(c));
                        }
                        (Job::RelayPost(_, reply), Answer::RelayPost(p)) => {
                            let _ = reply.send(Ok(p));
                        }
                        // `apply` answers each job with its own kind, in order.
                        _ => unreachable!("answers follow the jobs' order and kinds"),
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "store transaction failed; refusing its writes");
                failed.store(true, Ordering::Relaxed);
                for job in batch {
                    match job {
                        Job::Advance(_, reply) => {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Job::Receipt(_, reply) => {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Job::Stage { reply, .. } => {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Job::Compensate(_, reply) => {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Job::EscrowPut(_, reply) => {
                            let _ = reply.send(Err(e.clone()));
                        }
                        Job::RelayPost(_, reply) => {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        }
    }
    // A clean stop: fold the journal into the file and remove it.
    if checkpoint(&db, &mut journal, &failed) {
        if let Err(e) = journal.remove() {
            tracing::warn!(error = %e, "store journal not removed after the final checkpoint");
        }
    }
}

pub(super) fn journal_path(store: &Path) -> std::path::PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    name.into()
}

/// A durable redb commit of everything committed so far, then an empty journal. `false` (and
/// the journal kept, so nothing is lost) if it failed.
pub(super) fn checkpoint(db: &Database, journal: &mut Journal, failed: &AtomicBool) -> bool {
    let started = tokio::time::Instant::now();
    let durable = db.begin_write().map_err(unavailable).and_then(|mut wtx| {
        wtx.set_durability(Durability::Immediate);
        wtx.commit().map_err(unavailable)
    });
    let done = durable.and_then(|()| journal.reset().map_err(unavailable));
    metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "checkpoint")
        .record(started.elapsed().as_secs_f64());
    match done {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "store checkpoint failed; the journal keeps every change");
            failed.store(true, Ordering::Relaxed);
            false
        }
    }
}

/// Replays the journal at `path` into `db` (one durable transaction), empties it and returns
/// it for the writer. A record that cannot be read refuses the open: guessing could lose an
/// epoch.
pub(super) fn recover(db: &Database, path: &Path) -> Result<Journal, StoreError> {
    let (mut journal, records) =
        Journal::open(path).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
    if records.is_empty() {
        return Ok(journal);
    }
    let mut wtx = db.begin_write().map_err(unavailable)?;
    wtx.set_durability(Durability::Immediate);
    {
        let mut t = Tables::open(&wtx)?;
        for record in &records {
            let changes = journal::changes(record)
                .ok_or_else(|| unavailable("store journal: a record cannot be read"))?;
            for c in changes {
                t.replay(&c)?;
            }
        }
    }
    wtx.commit().map_err(unavailable)?;
    tracing::info!(records = records.len(), "store journal replayed");
    journal.reset().map_err(unavailable)?;
    Ok(journal)
}
