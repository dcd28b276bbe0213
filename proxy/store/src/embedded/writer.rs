//! The writer thread: takes every job waiting, applies them in the open redb transaction,
//! makes the batch durable with one journal append and fsync, answers each caller; commits
//! redb every few batches and checkpoints it.

use crate::clock::SharedClock;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use palisade_policy::log::{Head, Signer};
use redb::{Database, Durability, WriteTransaction};

use crate::journal::{self, Journal};
use crate::{Retention, StoreError};

use super::jobs::{apply, Job};
use super::overlay::Overlay;
use super::sweep::Sweeper;
use super::tables::{unavailable, Tables};

/// Most jobs one batch takes, so one slow batch cannot grow without bound.
pub(super) const MAX_BATCH: usize = 512;

/// Batches that share one redb commit. Each commit writes every page its transaction dirtied;
/// batches sharing one write the pages they share (B-tree roots and branches, the receipts
/// table's last leaf) once. `examples/store_load.rs`, 16 writers: 1 → 130 µs of CPU per
/// write, 4 → 97, 8 → 88, 16 → 86 (two runs each). The overlay holds at most this many
/// batches, and a failed batch replays at most this many records.
pub(super) const COMMIT_BATCHES: usize = 8;
/// An open transaction with no new job for this long is committed, so a quiet store's redb
/// state (what range reads and a restart start from) catches up quickly.
pub(super) const COMMIT_IDLE: Duration = Duration::from_millis(5);

/// Journal size that triggers a checkpoint. Bounds both replay time after a crash and the
/// memory redb holds for commits not yet checkpointed.
pub(super) const CHECKPOINT_BYTES: u64 = 16 << 20;
/// Non-durable redb commits between checkpoints. redb frees the pages a commit replaces only
/// at a durable commit (`Durability::None` commits never free pages), so without this a busy
/// writer that never passes `CHECKPOINT_BYTES` quickly grows the file by every page it has
/// ever copied: measured 46–94 KB per write with no checkpoints, 3–4 KB with one every 64
/// single-batch commits.
pub(super) const CHECKPOINT_COMMITS: u64 = 8;
/// A quiet writer checkpoints after this long, so an idle store is one file on disk.
pub(super) const CHECKPOINT_IDLE: Duration = Duration::from_secs(1);

/// What the writer thread starts from.
pub(super) struct Start {
    /// The store file, for the [`Flusher`].
    pub(super) path: std::path::PathBuf,
    pub(super) journal: Journal,
    /// Signs the log's checkpoints.
    pub(super) signer: Arc<Signer>,
    /// The receipt log's head as the file holds it.
    pub(super) head: Head,
    pub(super) retention: Retention,
    /// The store's time: expiries set and judged in a batch.
    pub(super) clock: SharedClock,
}

/// What the writer shares with the store's readers.
pub(super) struct Shared {
    pub(super) db: Arc<Database>,
    /// Batches committed (journal appends answered): lets tests and metrics see group commit.
    pub(super) commits: Arc<AtomicU64>,
    /// Set when a write transaction fails, cleared when one commits.
    pub(super) failed: Arc<AtomicBool>,
    /// Durable changes not yet in redb, for point reads.
    pub(super) overlay: Arc<Overlay>,
    /// Batches in the open transaction: a range read asks for a commit when it is not zero.
    pub(super) unsettled: Arc<AtomicU64>,
}

/// The redb transaction that batches go into.
struct Open {
    wtx: Option<WriteTransaction>,
    /// Batches in `wtx`.
    batches: usize,
    commits_since_checkpoint: u64,
    /// Set by any failure: every later job is refused until a restart replays the journal.
    /// Why not carry on: after a failed append the journal's tail is uncertain (a record
    /// appended after a torn one would be lost on replay), and after a failed batch or commit
    /// the open transaction no longer matches what was answered. redb itself refuses writes
    /// after an I/O error until the file is reopened. Fail closed; `/readyz` says so.
    broken: bool,
    flusher: Option<Flusher>,
}

/// Writes the store file's dirty pages back off the writer thread (issue 36). A non-durable
/// redb commit leaves its pages in the page cache; the durable checkpoint every
/// [`CHECKPOINT_COMMITS`] commits then waited for all of them on the writer thread (5–10 ms
/// measured, every ~60 ms under load: the p99 of every write queued behind it). This thread
/// `fdatasync`s its own descriptor of the file after each non-durable commit, so the
/// checkpoint finds little left to write. Writing pages back earlier is what the kernel may
/// do at any time anyway; redb's crash safety does not depend on when.
struct Flusher {
    wake: Option<mpsc::SyncSender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flusher {
    fn start(path: &Path) -> Option<Flusher> {
        let file = std::fs::File::open(path).ok()?;
        let (wake, rx) = mpsc::sync_channel::<()>(1);
        let thread = std::thread::Builder::new()
            .name("palisade-flush".into())
            .spawn(move || {
                while rx.recv().is_ok() {
                    if let Err(e) = file.sync_data() {
                        // The checkpoint's own fsync reports what matters.
                        tracing::debug!(error = %e, "store file write-back failed");
                    }
                }
            })
            .ok()?;
        Some(Flusher {
            wake: Some(wake),
            thread: Some(thread),
        })
    }

    /// Asks for a write-back; one already pending covers this commit too.
    fn nudge(&self) {
        if let Some(w) = &self.wake {
            let _ = w.try_send(());
        }
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        self.wake.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Open {
    fn transaction(&mut self, db: &Database) -> Result<&WriteTransaction, StoreError> {
        if self.broken {
            return Err(StoreError::Unavailable(
                "the store lost its open transaction; restart to replay the journal".into(),
            ));
        }
        if self.wtx.is_none() {
            let mut wtx = db.begin_write().map_err(unavailable)?;
            // Durability comes from the journal (see the module doc).
            wtx.set_durability(Durability::None);
            self.wtx = Some(wtx);
        }
        self.wtx
            .as_ref()
            .ok_or_else(|| StoreError::Unavailable("no open transaction".into()))
    }

    /// Commits the open transaction to redb, durably when a checkpoint is due (then the
    /// journal is emptied), and clears the overlay.
    fn commit(&mut self, sh: &Shared, journal: &mut Journal, force_checkpoint: bool) {
        let Some(mut wtx) = self.wtx.take() else {
            return;
        };
        let checkpoint = force_checkpoint
            || journal.len() > CHECKPOINT_BYTES
            || self.commits_since_checkpoint + 1 >= CHECKPOINT_COMMITS;
        if checkpoint {
            wtx.set_durability(Durability::Immediate);
        }
        let started = tokio::time::Instant::now();
        match wtx.commit() {
            Ok(()) => {
                sh.unsettled.store(0, Ordering::Release);
                sh.overlay.clear();
                self.batches = 0;
                self.commits_since_checkpoint += 1;
                if checkpoint {
                    self.commits_since_checkpoint = 0;
                    if let Err(e) = journal.reset() {
                        // redb holds everything; the journal replays harmlessly.
                        tracing::warn!(error = %e, "store journal not emptied after a checkpoint");
                    }
                } else if let Some(f) = &self.flusher {
                    f.nudge();
                }
                let op = if checkpoint {
                    "checkpoint"
                } else {
                    "redb_commit"
                };
                metrics::histogram!(crate::metrics::STORE_OP_DURATION, "op" => op)
                    .record(started.elapsed().as_secs_f64());
            }
            Err(e) => self.break_down(sh, &e),
        }
    }

    /// Stops taking writes (see [`Open::broken`]); the overlay keeps what was answered
    /// visible to point reads.
    fn break_down(&mut self, sh: &Shared, e: &dyn std::fmt::Display) {
        tracing::error!(error = %e, "store write failed; refusing writes until a restart replays the journal");
        sh.failed.store(true, Ordering::Relaxed);
        self.wtx = None;
        self.broken = true;
    }
}

/// The writer thread: batches jobs into transactions until every sender is gone.
pub(super) fn writer(sh: Shared, start: Start, rx: mpsc::Receiver<Job>) {
    let Start {
        path,
        mut journal,
        signer,
        mut head,
        retention,
        clock,
    } = start;
    let mut sweeper = Sweeper::new(retention);
    use crate::metrics::{STORE_BATCH_JOBS, STORE_OP_DURATION};
    let commit_time = metrics::histogram!(STORE_OP_DURATION, "op" => "commit");
    let batch_jobs = metrics::histogram!(STORE_BATCH_JOBS);
    let mut open = Open {
        wtx: None,
        batches: 0,
        commits_since_checkpoint: 0,
        broken: false,
        flusher: Flusher::start(&path),
    };
    loop {
        let wait = if open.wtx.is_some() {
            COMMIT_IDLE
        } else {
            CHECKPOINT_IDLE
        };
        let first = match rx.recv_timeout(wait) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if open.wtx.is_some() {
                    open.commit(&sh, &mut journal, false);
                } else if !journal.is_empty() && !open.broken {
                    open.commit_empty_checkpoint(&sh, &mut journal);
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
        let result = open.transaction(&sh.db).and_then(|wtx| {
            let now = clock.now_ms();
            let log = super::jobs::Tip {
                signer: &signer,
                head: &head,
            };
            apply(wtx, &mut journal, log, &mut sweeper, &batch, now)
        });
        commit_time.record(started.elapsed().as_secs_f64());
        batch_jobs.record(batch.len() as f64);
        match result {
            Ok(super::jobs::Applied {
                answers,
                head: new_head,
                redo: record,
            }) => {
                // Durable now: visible to point reads before anyone is answered.
                if !record.is_empty() {
                    sh.overlay.absorb(&record);
                }
                open.batches += 1;
                sh.unsettled.store(open.batches as u64, Ordering::Release);
                if let Some(h) = new_head {
                    head = h;
                }
                sh.commits.fetch_add(1, Ordering::Relaxed);
                let mut settles = Vec::new();
                for (job, answer) in batch.into_iter().zip(answers) {
                    if job.is_settle() {
                        settles.push((job, answer));
                    } else {
                        job.answer(answer);
                    }
                }
                if !settles.is_empty()
                    || open.batches >= COMMIT_BATCHES
                    || journal.len() > CHECKPOINT_BYTES
                {
                    open.commit(&sh, &mut journal, false);
                }
                for (job, answer) in settles {
                    if open.wtx.is_none() && !open.broken {
                        job.answer(answer);
                    } else {
                        job.fail(StoreError::Unavailable("the store could not commit".into()));
                    }
                }
            }
            Err(e) => {
                if !open.broken {
                    open.break_down(&sh, &e);
                }
                for job in batch {
                    job.fail(e.clone());
                }
            }
        }
    }
    // A clean stop: fold everything into the file and remove the journal.
    if !open.broken {
        if open.wtx.is_some() {
            open.commit(&sh, &mut journal, true);
        } else {
            open.commit_empty_checkpoint(&sh, &mut journal);
        }
        if open.wtx.is_none() && !open.broken && journal.is_empty() {
            if let Err(e) = journal.remove() {
                tracing::warn!(error = %e, "store journal not removed after the final checkpoint");
            }
        }
    }
}

impl Open {
    /// A durable commit with nothing open: makes the earlier non-durable commits durable.
    fn commit_empty_checkpoint(&mut self, sh: &Shared, journal: &mut Journal) {
        if self.transaction(&sh.db).is_ok() {
            self.commit(sh, journal, true);
        }
    }
}

pub(super) fn journal_path(store: &Path) -> std::path::PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    name.into()
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
        // Replay copies recorded changes; no expiry is judged, so the time is unused.
        let mut t = Tables::open(&wtx, 0)?;
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
