//! The `embedded` store: one local redb file, ACID, for a single sidecar replica. Why redb:
//! pure Rust, one file, copy-on-write B-trees with checksummed commits, so a crash leaves the
//! last committed transaction intact (docs/decisions.md, "State store").
//!
//! One writer thread owns every write transaction: it takes every job waiting, applies them in
//! order in *one* transaction, makes it durable once, then answers (group commit). The receipt
//! log's head lives there, so receipts are totally ordered and each batch's are integrated
//! under one checkpoint (`jobs::seal`). Durable means the batch is in the redo journal
//! ([`super::journal`]), fsync'd; redb commits without its own fsync, and a durable redb
//! commit (a checkpoint) follows every `writer::CHECKPOINT_COMMITS` commits, past
//! `writer::CHECKPOINT_BYTES` of journal, after a second without writes, and on a clean stop.
//! Checkpoints keep the file proportional to its data (redb reuses pages only after a durable
//! commit). Opening replays the journal first.
//!
//! Batches share a redb transaction ([`writer::COMMIT_BATCHES`] per commit), so redb lags the
//! journal by a few batches. Point reads look in the [`overlay`] of durable-but-uncommitted
//! changes first, then in a read transaction on the caller's thread; range reads (a lease's
//! receipts, the log, relay pages, escrow lists, freezes) first ask the writer to commit
//! ([`EmbeddedStore::settle`]). Budgets are checked and spent in the writer (`budgets`).

mod budgets;
mod jobs;
mod log;
mod negotiation;
mod overlay;
mod rcns;
mod reads;
mod relay;
mod replay;
mod sweep;
mod tables;
mod writer;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use palisade_policy::log::merkle::Hash;
use palisade_policy::log::{Head, Signer};
use palisade_policy::receipt::{self, ReceiptBody, SealedReceipt};
use redb::Database;
use tokio::sync::oneshot;

use crate::clock::{AnchoredClock, SharedClock};
use crate::{
    Advance, Attachments, BudgetSpend, BudgetVerdict, Compensation, EscrowRecord, EscrowUpdate,
    Escrows, Fences, IdempotencyKeys, KeyState, LeaseReceipt, LeaseRecord, Leases, LogEntries,
    ReceiptLog, Receipts, ResourceGuard, Retention, Stops, StoreError, WriteIntent,
};

use jobs::Job;
use overlay::{Overlay, Seen};
use tables::{unavailable, Part, ESCROWS, FENCES, LOG_HASHES, META, T_ESCROWS, T_FENCES};
use writer::{journal_path, recover, writer, Shared, Start};

/// redb's page cache. Its default, 1 GiB, grew the sidecar's RSS to 1.32 GB in a 10-minute
/// load, over the chart's 512 MiB limit (docs/performance.md, issue 36); writes read few pages
/// twice, and the journal, not the cache, makes a batch durable.
pub const CACHE_BYTES: usize = 64 << 20;

pub struct EmbeddedStore {
    db: Arc<Database>,
    /// To the writer thread. The thread ends when the store (the last sender) is dropped.
    jobs: mpsc::Sender<Job>,
    /// Batches committed by the writer (tests and metrics see group commit).
    commits: Arc<AtomicU64>,
    /// Durable changes redb does not hold yet (see the module doc).
    overlay: Arc<Overlay>,
    unsettled: Arc<AtomicU64>, // batches in the writer's open transaction
    /// Set when a batch or a commit fails, until a restart replays the journal (the writer
    /// refuses every later job; `writer::Open::broken` says why); `/readyz` reports it.
    failed: Arc<AtomicBool>,
    /// Joined on drop, so the file's lock is released when the store is gone.
    writer: Option<std::thread::JoinHandle<()>>,
    /// Per-resource write locks (the file has one owner: in process suffices).
    locks: crate::locks::ResourceLocks,
    /// Idempotency reservations (in process, as the locks).
    keys: Arc<crate::locks::InFlightKeys>,
    /// The store's time (expiry of keys, relay messages, RCNS records), shared with the writer.
    clock: SharedClock,
    /// Signs the log's checkpoints (the writer's copy); here for the empty log's checkpoint.
    signer: Arc<Signer>,
}

impl Drop for EmbeddedStore {
    fn drop(&mut self) {
        // Closing the channel ends the writer after its current batch.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(handle) = self.writer.take() {
            let _ = handle.join();
        }
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store file with the default [`Retention`]. `signer` signs the
    /// checkpoints of the receipt log this store keeps.
    pub fn open(path: &Path, signer: Arc<Signer>) -> Result<Self, StoreError> {
        Self::open_with(
            path,
            signer,
            Retention::default(),
            Arc::new(AnchoredClock::new()),
        )
    }

    /// Opens (or creates) the store file, removing what is past `retention` as it writes, by
    /// `clock`'s time.
    pub fn open_with(
        path: &Path,
        signer: Arc<Signer>,
        retention: Retention,
        clock: SharedClock,
    ) -> Result<Self, StoreError> {
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(path)
            .map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        // Create every table up front so readers never meet a missing one.
        let wtx = db.begin_write().map_err(unavailable)?;
        tables::create_all(&wtx)?;
        wtx.commit().map_err(unavailable)?;
        let journal = recover(&db, &journal_path(path))?;
        let db = Arc::new(db);
        let head = {
            let rtx = db.begin_read().map_err(unavailable)?;
            log::read_head(&rtx.open_table(META).map_err(unavailable)?, &signer)?
        };
        let (jobs, rx) = mpsc::channel();
        let commits = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let overlay = Arc::new(Overlay::default());
        let unsettled = Arc::new(AtomicU64::new(0));
        let shared = Shared {
            db: db.clone(),
            commits: commits.clone(),
            failed: failed.clone(),
            overlay: overlay.clone(),
            unsettled: unsettled.clone(),
        };
        let writer_clock = clock.clone();
        let writer_signer = signer.clone();
        let writer_path = path.to_owned();
        let writer = std::thread::Builder::new()
            .name("palisade-store".into())
            .spawn(move || {
                let start = Start {
                    path: writer_path,
                    journal,
                    signer: writer_signer,
                    head,
                    retention,
                    clock: writer_clock,
                };
                writer(shared, start, rx)
            })
            .map_err(unavailable)?;
        Ok(Self {
            db,
            jobs,
            commits,
            overlay,
            unsettled,
            failed,
            writer: Some(writer),
            locks: Default::default(),
            keys: Default::default(),
            clock,
            signer,
        })
    }

    /// Write transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))
    }

    fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Job,
    ) -> BoxFuture<'_, Result<T, StoreError>>
    where
        T: Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let sent = self.send(make(tx));
        Box::pin(async move {
            sent?;
            rx.await
                .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
        })
    }
}

impl Fences for EmbeddedStore {
    fn lock<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<ResourceGuard, StoreError>> {
        Box::pin(async move { Ok(ResourceGuard::new(self.locks.lock(resource).await)) })
    }

    fn confirm<'a>(&'a self, _: &'a ResourceGuard) -> BoxFuture<'a, Result<(), StoreError>> {
        // An in-process lock cannot be lost while its guard lives.
        Box::pin(async { Ok(()) })
    }

    fn epoch<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            match self.overlay.get(T_FENCES, resource.as_bytes()) {
                Seen::Value(v) => {
                    let epoch = <[u8; 8]>::try_from(&*v).map_err(|_| unavailable("bad epoch"))?;
                    return Ok(u64::from_be_bytes(epoch));
                }
                // Fences are never removed; kept for completeness.
                Seen::Deleted => return Ok(0),
                Seen::Unchanged => {}
            }
            let rtx = self.db.begin_read().map_err(unavailable)?;
            let table = rtx.open_table(FENCES).map_err(unavailable)?;
            let v = table.get(resource.as_bytes()).map_err(unavailable)?;
            Ok(v.map_or(0, |v| v.value()))
        })
    }

    fn advance(&self, intent: WriteIntent) -> BoxFuture<'_, Result<Advance, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            self.send(Job::Advance(intent, tx))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
        })
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            if self.failed.load(Ordering::Relaxed) {
                return Err(StoreError::Unavailable(
                    "the last write transaction failed".into(),
                ));
            }
            self.epoch("").await.map(|_| ())
        })
    }
}

impl Leases for EmbeddedStore {
    fn stage(
        &self,
        lease_id: String,
        record: Option<LeaseRecord>,
        inverse: Option<Vec<u8>>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let (reply, rx) = oneshot::channel();
            self.send(Job::Stage {
                lease_id,
                record,
                inverse,
                reply,
            })?;
            rx.await
                .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
        })
    }

    fn inverse<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move { self.read_lease(lease_id, Part::Inverse) })
    }

    fn lease_record<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, StoreError>> {
        Box::pin(async move {
            self.read_lease(lease_id, Part::Record)?
                .map(|b| LeaseRecord::from_bytes(&b))
                .transpose()
        })
    }

    fn lease_receipts<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseReceipt>, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            log::lease_receipts(&self.db.begin_read().map_err(unavailable)?, lease_id)
        })
    }

    fn snapshot<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move { self.read_lease(lease_id, Part::Snapshot) })
    }

    fn begin_compensation(
        &self,
        lease_id: String,
        resource: String,
    ) -> BoxFuture<'_, Result<Compensation, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            self.send(Job::Compensate((lease_id, resource), tx))?;
            rx.await
                .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))?
        })
    }
}

impl Receipts for EmbeddedStore {
    fn append_receipt_with(
        &self,
        body: ReceiptBody,
        attach: Attachments,
    ) -> BoxFuture<'_, Result<Option<SealedReceipt>, StoreError>> {
        // The entry's JCS here, on the caller's task: the writer thread only hashes and signs.
        match receipt::entry(&body) {
            Ok(entry) => self.ask(|tx| Job::Receipt(Box::new((body, entry, attach)), tx)),
            Err(e) => Box::pin(async move { Err(unavailable(e)) }),
        }
    }

    fn receipt_log(&self) -> BoxFuture<'_, Result<ReceiptLog, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            log::legacy(&self.db.begin_read().map_err(unavailable)?)
        })
    }

    fn log_head(&self) -> BoxFuture<'_, Result<Head, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            let rtx = self.db.begin_read().map_err(unavailable)?;
            log::read_head(&rtx.open_table(META).map_err(unavailable)?, &self.signer)
        })
    }

    fn log_hashes(&self, indexes: Vec<u64>) -> BoxFuture<'_, Result<Vec<Hash>, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            let rtx = self.db.begin_read().map_err(unavailable)?;
            log::read_hashes(&rtx.open_table(LOG_HASHES).map_err(unavailable)?, &indexes)
        })
    }

    fn log_entries(&self, from: u64, to: u64) -> BoxFuture<'_, Result<LogEntries, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            log::entries(&self.db.begin_read().map_err(unavailable)?, from, to)
        })
    }
}

impl IdempotencyKeys for EmbeddedStore {
    fn reserve_key<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        _owner: &'a str,
        _hold_until_ms: i64,
    ) -> BoxFuture<'a, Result<KeyState, StoreError>> {
        Box::pin(async move {
            // Reserved before the lookup, so two requests with one key cannot both miss it.
            if let Err(running) = self.keys.take(key, fingerprint) {
                return Ok(KeyState::Running {
                    fingerprint: Some(running),
                });
            }
            match self.idempotency(key) {
                Ok(None) => Ok(KeyState::Reserved),
                Ok(Some(stored)) => {
                    self.keys.release(key);
                    Ok(KeyState::Stored(stored))
                }
                Err(e) => {
                    self.keys.release(key);
                    Err(e)
                }
            }
        })
    }

    fn release_key(
        &self,
        key: String,
        _owner: String,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        // At once: a retry right after a refusal finds the key free.
        self.keys.release(&key);
        Box::pin(async { Ok(()) })
    }
}

impl Escrows for EmbeddedStore {
    fn escrow_put(&self, update: EscrowUpdate) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.ask(|tx| Job::EscrowPut(Box::new(update), tx))
    }

    fn escrow<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<EscrowRecord>, StoreError>> {
        Box::pin(async move {
            self.read_bytes((T_ESCROWS, ESCROWS), id)?
                .map(|b| EscrowRecord::from_bytes(&b))
                .transpose()
        })
    }

    fn escrows(&self, limit: usize) -> BoxFuture<'_, Result<Vec<EscrowRecord>, StoreError>> {
        Box::pin(self.read_escrows(limit))
    }
}

impl Stops for EmbeddedStore {
    fn budget_spend(
        &self,
        s: Vec<BudgetSpend>,
    ) -> BoxFuture<'_, Result<BudgetVerdict, StoreError>> {
        self.ask(|tx| Job::Budget(Box::new(Ok(s)), tx))
    }

    fn budget_refund(&self, spent: Vec<Vec<u8>>) -> BoxFuture<'_, Result<(), StoreError>> {
        let asked = self.ask(|tx| Job::Budget(Box::new(Err(spent)), tx));
        Box::pin(async move { asked.await.map(drop) })
    }

    fn freezes(&self) -> BoxFuture<'_, Result<Vec<Vec<u8>>, StoreError>> {
        Box::pin(self.read_freezes())
    }
}

#[cfg(test)]
mod crash_points;
#[cfg(test)]
mod tests;
