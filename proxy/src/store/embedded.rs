//! The `embedded` store: one local redb file, ACID, for a single sidecar replica.
//!
//! Why redb: pure Rust (no C toolchain or server), one file, copy-on-write B-trees with
//! checksummed commits, so a crash at any instant leaves the last committed transaction intact
//! (no WAL replay to get wrong); `Durability::Immediate` fsyncs on commit.
//!
//! Writes go through one writer thread that owns every write transaction. Callers send jobs
//! over a channel; the thread takes every job waiting, applies them in arrival order in *one*
//! transaction, makes it durable once, then answers each caller. Under load, many writes
//! share an fsync (group commit); alone, a write pays one. The receipt chain's head lives in
//! that thread, so receipts are totally ordered without a lock.
//!
//! Durable means: the batch's changes are appended to the redo journal ([`super::journal`])
//! and fsync'd, then the redb transaction commits without its own fsync. A durable redb
//! commit (a checkpoint) follows when the journal passes [`CHECKPOINT_BYTES`], after a second
//! without writes, and on a clean stop, which also removes the emptied journal. Opening the
//! store replays whatever the journal holds first.
//!
//! Reads (`epoch`, `inverse`, `receipts`) use redb read transactions on the caller's thread:
//! they see the last committed state and never wait for the writer.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use palisade_policy::receipt::{self, ReceiptBody, ReceiptKind, SealedReceipt};
use redb::{Database, Durability, ReadableTable, ReadableTableMetadata, TableDefinition};
use tokio::sync::oneshot;

use super::journal::{self, Journal, Redo};
use super::{Advance, Attachments, Compensation, EscrowUpdate, Store, StoreError, WriteIntent};

/// Resource key → last committed epoch. Byte keys: redb would check `&str` keys for UTF-8 on
/// every comparison.
const FENCES: TableDefinition<&[u8], u64> = TableDefinition::new("fences");
/// Everything about a lease, under keys that start with the lease id ([`lease_key`]): its
/// record, staged inverse, pre-image snapshot and the sequence numbers of its receipts. One
/// table with the lease's entries side by side means one write touches few pages: a write's
/// cost is dominated by the pages each commit must flush (measured with
/// `examples/store_load.rs`: five tables per write ran at half the rate of this layout).
const LEASE_DATA: TableDefinition<&[u8], &[u8]> = TableDefinition::new("lease_data");
/// Sequence number → JCS of the sealed receipt, signature included.
const RECEIPTS: TableDefinition<u64, &[u8]> = TableDefinition::new("receipts");

/// What a [`LEASE_DATA`] entry holds.
#[derive(Clone, Copy)]
#[repr(u8)]
enum Part {
    Record = b'r',
    Inverse = b'i',
    Snapshot = b's',
    /// Followed by the receipt's sequence number (big-endian), with an empty value.
    Receipt = b'c',
}

/// `len(lease_id) · lease_id · part [· seq]`. The length prefix (lease ids are at most 128
/// bytes) keeps one lease's keys from being a prefix of another's.
fn lease_key(lease_id: &str, part: Part, seq: Option<u64>) -> Vec<u8> {
    let id = lease_id.as_bytes();
    let mut k = Vec::with_capacity(id.len() + 10);
    k.push(u8::try_from(id.len()).unwrap_or(u8::MAX));
    k.extend_from_slice(id);
    k.push(part as u8);
    if let Some(seq) = seq {
        k.extend_from_slice(&seq.to_be_bytes());
    }
    k
}

/// Scoped idempotency key → its stored outcome (JSON, with `expires_ms`).
const IDEMPOTENCY: TableDefinition<&str, &[u8]> = TableDefinition::new("idempotency");
/// (expiry in unix ms, scoped key): lets the writer sweep expired keys oldest first.
const IDEMPOTENCY_EXPIRY: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("idempotency_expiry");
/// Escrow id (UUIDv7, so ids sort by creation) → escrow record (JSON).
const ESCROWS: TableDefinition<&str, &[u8]> = TableDefinition::new("escrows");

/// Expired idempotency keys removed per transaction that stores one: the sweep keeps pace with
/// new keys without ever making one commit long.
const SWEEP_PER_BATCH: usize = 64;

/// Most jobs one transaction takes, so one slow batch cannot grow without bound.
const MAX_BATCH: usize = 512;

/// Journal size that triggers a checkpoint. Bounds both replay time after a crash and the
/// memory redb holds for commits not yet checkpointed.
const CHECKPOINT_BYTES: u64 = 16 << 20;
/// A quiet writer checkpoints after this long, so an idle store is one file on disk.
const CHECKPOINT_IDLE: std::time::Duration = std::time::Duration::from_secs(1);

/// Table ids in journal records.
const T_FENCES: u8 = 1;
const T_LEASE_DATA: u8 = 2;
const T_RECEIPTS: u8 = 3;
const T_IDEMPOTENCY: u8 = 4;
const T_IDEMPOTENCY_EXPIRY: u8 = 5;
const T_ESCROWS: u8 = 6;

enum Job {
    Advance(WriteIntent, oneshot::Sender<Result<Advance, StoreError>>),
    Compensate(String, oneshot::Sender<Result<Compensation, StoreError>>),
    Stage {
        lease_id: String,
        record: Option<Vec<u8>>,
        inverse: Option<Vec<u8>>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    Receipt(
        Box<(ReceiptBody, Attachments)>,
        oneshot::Sender<Result<Option<SealedReceipt>, StoreError>>,
    ),
    EscrowPut(EscrowUpdate, oneshot::Sender<Result<bool, StoreError>>),
}

pub struct EmbeddedStore {
    db: Arc<Database>,
    /// To the writer thread. The thread ends when the store (the last sender) is dropped.
    jobs: mpsc::Sender<Job>,
    /// Transactions committed by the writer: lets tests and metrics see group commit.
    commits: Arc<AtomicU64>,
    /// Set when a write transaction fails, cleared when one commits. redb refuses every write
    /// after an I/O error until the file is reopened, so in practice this stays set until a
    /// restart; `/readyz` reports it.
    failed: Arc<AtomicBool>,
    /// Joined on drop, so the file's lock is released when the store is gone.
    writer: Option<std::thread::JoinHandle<()>>,
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

fn unavailable(e: impl std::fmt::Display) -> StoreError {
    StoreError::Unavailable(e.to_string())
}

/// The receipt chain's position: the next sequence number and the digest `prev` must carry.
#[derive(Clone, Copy)]
struct ChainHead {
    next_seq: u64,
    head: Sha256Digest,
}

fn read_chain_head(db: &Database) -> Result<ChainHead, StoreError> {
    let rtx = db.begin_read().map_err(unavailable)?;
    let table = rtx.open_table(RECEIPTS).map_err(unavailable)?;
    let last = table.last().map_err(unavailable)?;
    let head = match last {
        Some((seq, jcs)) => ChainHead {
            next_seq: seq.value() + 1,
            head: Sha256Digest::of(jcs.value()),
        },
        None => ChainHead {
            next_seq: 0,
            head: Sha256Digest::empty(),
        },
    };
    Ok(head)
}

impl EmbeddedStore {
    /// Opens (or creates) the store file. `key` signs the receipts this store appends.
    pub fn open(path: &Path, key: Arc<KeyPair>) -> Result<Self, StoreError> {
        let db =
            Database::create(path).map_err(|e| unavailable(format!("{}: {e}", path.display())))?;
        // Create every table up front so readers never meet a missing one.
        let wtx = db.begin_write().map_err(unavailable)?;
        {
            wtx.open_table(FENCES).map_err(unavailable)?;
            wtx.open_table(LEASE_DATA).map_err(unavailable)?;
            wtx.open_table(RECEIPTS).map_err(unavailable)?;
            wtx.open_table(IDEMPOTENCY).map_err(unavailable)?;
            wtx.open_table(IDEMPOTENCY_EXPIRY).map_err(unavailable)?;
            wtx.open_table(ESCROWS).map_err(unavailable)?;
        }
        wtx.commit().map_err(unavailable)?;
        let journal = recover(&db, &journal_path(path))?;
        let db = Arc::new(db);
        let head = read_chain_head(&db)?;
        let (jobs, rx) = mpsc::channel();
        let commits = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let writer = {
            let db = db.clone();
            let commits = commits.clone();
            let failed = failed.clone();
            std::thread::Builder::new()
                .name("palisade-store".into())
                .spawn(move || writer(db, journal, key, head, rx, commits, failed))
                .map_err(unavailable)?
        };
        Ok(Self {
            db,
            jobs,
            commits,
            failed,
            writer: Some(writer),
        })
    }

    /// Write transactions committed so far.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    fn read_bytes(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = rtx.open_table(table).map_err(unavailable)?;
        let v = table.get(key).map_err(unavailable)?;
        Ok(v.map(|v| v.value().to_vec()))
    }

    fn read_lease(&self, lease_id: &str, part: Part) -> Result<Option<Vec<u8>>, StoreError> {
        let rtx = self.db.begin_read().map_err(unavailable)?;
        let table = rtx.open_table(LEASE_DATA).map_err(unavailable)?;
        let v = table
            .get(lease_key(lease_id, part, None).as_slice())
            .map_err(unavailable)?;
        Ok(v.map(|v| v.value().to_vec()))
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .send(job)
            .map_err(|_| StoreError::Unavailable("the store writer has stopped".into()))
    }
}

/// The writer thread: batches jobs into transactions until every sender is gone.
fn writer(
    db: Arc<Database>,
    mut journal: Journal,
    key: Arc<KeyPair>,
    mut chain: ChainHead,
    rx: mpsc::Receiver<Job>,
    commits: Arc<AtomicU64>,
    failed: Arc<AtomicBool>,
) {
    use crate::telemetry::{FENCE_ADVANCES, STORE_BATCH_JOBS, STORE_OP_DURATION};
    let commit_time = metrics::histogram!(STORE_OP_DURATION, "op" => "commit");
    let batch_jobs = metrics::histogram!(STORE_BATCH_JOBS);
    let advances = metrics::counter!(FENCE_ADVANCES);
    loop {
        let first = match rx.recv_timeout(CHECKPOINT_IDLE) {
            Ok(job) => job,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if !journal.is_empty() {
                    checkpoint(&db, &mut journal, &failed);
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
        let result = apply(&db, &mut journal, &key, chain, &batch);
        commit_time.record(started.elapsed().as_secs_f64());
        batch_jobs.record(batch.len() as f64);
        match result {
            Ok((answers, new_chain)) => {
                if journal.len() > CHECKPOINT_BYTES {
                    checkpoint(&db, &mut journal, &failed);
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

fn journal_path(store: &Path) -> std::path::PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".journal");
    name.into()
}

/// A durable redb commit of everything committed so far, then an empty journal. `false` (and
/// the journal kept, so nothing is lost) if it failed.
fn checkpoint(db: &Database, journal: &mut Journal, failed: &AtomicBool) -> bool {
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
fn recover(db: &Database, path: &Path) -> Result<Journal, StoreError> {
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

/// The tables of one write transaction. Every change goes through here, so it is both applied
/// and recorded for the journal.
struct Tables<'t> {
    fences: redb::Table<'t, &'static [u8], u64>,
    leases: redb::Table<'t, &'static [u8], &'static [u8]>,
    receipts: redb::Table<'t, u64, &'static [u8]>,
    idempotency: redb::Table<'t, &'static str, &'static [u8]>,
    expiry: redb::Table<'t, (u64, &'static str), ()>,
    escrows: redb::Table<'t, &'static str, &'static [u8]>,
    redo: Redo,
}

fn expiry_key(at: u64, key: &str) -> Vec<u8> {
    let mut k = at.to_be_bytes().to_vec();
    k.extend_from_slice(key.as_bytes());
    k
}

impl<'t> Tables<'t> {
    fn open(wtx: &'t redb::WriteTransaction) -> Result<Self, StoreError> {
        Ok(Self {
            fences: wtx.open_table(FENCES).map_err(unavailable)?,
            leases: wtx.open_table(LEASE_DATA).map_err(unavailable)?,
            receipts: wtx.open_table(RECEIPTS).map_err(unavailable)?,
            idempotency: wtx.open_table(IDEMPOTENCY).map_err(unavailable)?,
            expiry: wtx.open_table(IDEMPOTENCY_EXPIRY).map_err(unavailable)?,
            escrows: wtx.open_table(ESCROWS).map_err(unavailable)?,
            redo: Redo::default(),
        })
    }

    fn fence(&self, resource: &[u8]) -> Result<u64, StoreError> {
        Ok(self
            .fences
            .get(resource)
            .map_err(unavailable)?
            .map_or(0, |v| v.value()))
    }

    fn set_fence(&mut self, resource: &[u8], epoch: u64) -> Result<(), StoreError> {
        self.fences.insert(resource, epoch).map_err(unavailable)?;
        self.redo.put(T_FENCES, resource, &epoch.to_be_bytes());
        Ok(())
    }

    fn put_lease(&mut self, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.leases.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_LEASE_DATA, key, value);
        Ok(())
    }

    fn put_receipt(&mut self, seq: u64, jcs: &[u8]) -> Result<(), StoreError> {
        self.receipts.insert(seq, jcs).map_err(unavailable)?;
        self.redo.put(T_RECEIPTS, &seq.to_be_bytes(), jcs);
        Ok(())
    }

    fn put_idempotency(&mut self, key: &str, value: &[u8], at: u64) -> Result<(), StoreError> {
        self.idempotency.insert(key, value).map_err(unavailable)?;
        self.redo.put(T_IDEMPOTENCY, key.as_bytes(), value);
        self.expiry.insert((at, key), ()).map_err(unavailable)?;
        self.redo
            .put(T_IDEMPOTENCY_EXPIRY, &expiry_key(at, key), &[]);
        Ok(())
    }

    fn delete_idempotency(&mut self, key: &str) -> Result<(), StoreError> {
        self.idempotency.remove(key).map_err(unavailable)?;
        self.redo.delete(T_IDEMPOTENCY, key.as_bytes());
        Ok(())
    }

    fn delete_expiry(&mut self, at: u64, key: &str) -> Result<(), StoreError> {
        self.expiry.remove((at, key)).map_err(unavailable)?;
        self.redo.delete(T_IDEMPOTENCY_EXPIRY, &expiry_key(at, key));
        Ok(())
    }

    fn put_escrow(&mut self, id: &str, value: &[u8]) -> Result<(), StoreError> {
        self.escrows.insert(id, value).map_err(unavailable)?;
        self.redo.put(T_ESCROWS, id.as_bytes(), value);
        Ok(())
    }

    /// Applies one journal change (nothing is recorded: it is already in the journal).
    fn replay(&mut self, c: &journal::Change<'_>) -> Result<(), StoreError> {
        let bad = || unavailable("store journal: a change cannot be applied");
        let text = |b: &[u8]| std::str::from_utf8(b).map(str::to_owned).map_err(|_| bad());
        let u64_of = |b: &[u8]| {
            <[u8; 8]>::try_from(b)
                .map(u64::from_be_bytes)
                .map_err(|_| bad())
        };
        match (c.table, c.value) {
            (T_FENCES, Some(v)) => {
                self.fences.insert(c.key, u64_of(v)?).map_err(unavailable)?;
            }
            (T_LEASE_DATA, Some(v)) => {
                self.leases.insert(c.key, v).map_err(unavailable)?;
            }
            (T_RECEIPTS, Some(v)) => {
                self.receipts
                    .insert(u64_of(c.key)?, v)
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY, Some(v)) => {
                self.idempotency
                    .insert(text(c.key)?.as_str(), v)
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY, None) => {
                self.idempotency
                    .remove(text(c.key)?.as_str())
                    .map_err(unavailable)?;
            }
            (T_IDEMPOTENCY_EXPIRY, value) => {
                let at = u64_of(c.key.get(..8).ok_or_else(bad)?)?;
                let key = text(c.key.get(8..).ok_or_else(bad)?)?;
                if value.is_some() {
                    self.expiry
                        .insert((at, key.as_str()), ())
                        .map_err(unavailable)?;
                } else {
                    self.expiry
                        .remove((at, key.as_str()))
                        .map_err(unavailable)?;
                }
            }
            (T_ESCROWS, Some(v)) => {
                self.escrows
                    .insert(text(c.key)?.as_str(), v)
                    .map_err(unavailable)?;
            }
            _ => return Err(bad()),
        }
        Ok(())
    }
}

enum Answer {
    Advance(Advance),
    Staged,
    Compensate(Compensation),
    /// `None`: the attached escrow update's expected state did not hold.
    Receipt(Option<Box<SealedReceipt>>),
    EscrowPut(bool),
}

/// Whether the escrow `id` is in the state `expect` (`None`: absent).
fn escrow_state_is(
    escrows: &redb::Table<&str, &[u8]>,
    id: &str,
    expect: Option<&str>,
) -> Result<bool, StoreError> {
    let current: Option<serde_json::Value> = escrows
        .get(id)
        .map_err(unavailable)?
        .and_then(|v| serde_json::from_slice(v.value()).ok());
    Ok(match (current, expect) {
        (None, None) => true,
        (Some(rec), Some(state)) => rec["state"] == state,
        _ => false,
    })
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Applies a batch in one transaction, made durable by one journal append; nothing is
/// visible or answered unless the append and the commit succeed.
fn apply(
    db: &Database,
    journal: &mut Journal,
    key: &KeyPair,
    mut chain: ChainHead,
    batch: &[Job],
) -> Result<(Vec<Answer>, ChainHead), StoreError> {
    let mut wtx = db.begin_write().map_err(unavailable)?;
    // Durability comes from the journal (see the module doc).
    wtx.set_durability(Durability::None);
    let mut answers = Vec::with_capacity(batch.len());
    let redo = {
        let mut t = Tables::open(&wtx)?;
        let mut stored_keys = false;
        for job in batch {
            match job {
                Job::Advance(intent, _) => {
                    let resource = intent.resource.as_bytes();
                    let current = t.fence(resource)?;
                    if intent.epoch <= current {
                        answers.push(Answer::Advance(Advance::Stale { current }));
                        continue;
                    }
                    t.set_fence(resource, intent.epoch)?;
                    let id = intent.lease_id.as_str();
                    t.put_lease(&lease_key(id, Part::Record, None), &intent.lease_record)?;
                    if let Some(inv) = &intent.inverse {
                        t.put_lease(&lease_key(id, Part::Inverse, None), inv)?;
                    }
                    if let Some(snap) = &intent.snapshot {
                        t.put_lease(&lease_key(id, Part::Snapshot, None), snap)?;
                    }
                    answers.push(Answer::Advance(Advance::Advanced));
                }
                Job::Compensate(lease_id, _) => {
                    let record_key = lease_key(lease_id, Part::Record, None);
                    let record: Option<serde_json::Value> = t
                        .leases
                        .get(record_key.as_slice())
                        .map_err(unavailable)?
                        .and_then(|v| serde_json::from_slice(v.value()).ok());
                    let answer = match record {
                        Some(mut rec) if rec["state"] == "committed" => {
                            let resource = rec["resource"].as_str().unwrap_or_default().to_owned();
                            let epoch = t.fence(resource.as_bytes())? + 1;
                            t.set_fence(resource.as_bytes(), epoch)?;
                            rec["state"] = "compensated".into();
                            rec["compensation_epoch"] = epoch.into();
                            let bytes = serde_json::to_vec(&rec).map_err(unavailable)?;
                            t.put_lease(&record_key, &bytes)?;
                            Compensation::Started { epoch }
                        }
                        Some(rec) if rec["state"] == "compensated" => {
                            Compensation::AlreadyCompensated
                        }
                        _ => Compensation::NotCommitted,
                    };
                    answers.push(Answer::Compensate(answer));
                }
                Job::Stage {
                    lease_id,
                    record,
                    inverse,
                    ..
                } => {
                    if let Some(r) = record {
                        t.put_lease(&lease_key(lease_id, Part::Record, None), r)?;
                    }
                    if let Some(inv) = inverse {
                        t.put_lease(&lease_key(lease_id, Part::Inverse, None), inv)?;
                    }
                    answers.push(Answer::Staged);
                }
                Job::EscrowPut(update, _) => {
                    let ok = escrow_state_is(&t.escrows, &update.id, update.expect.as_deref())?;
                    if ok {
                        let bytes = serde_json::to_vec(&update.record).map_err(unavailable)?;
                        t.put_escrow(&update.id, &bytes)?;
                    }
                    answers.push(Answer::EscrowPut(ok));
                }
                Job::Receipt(job, _) => {
                    let (body, attach) = &**job;
                    if let Some(update) = &attach.escrow {
                        if !escrow_state_is(&t.escrows, &update.id, update.expect.as_deref())? {
                            answers.push(Answer::Receipt(None));
                            continue;
                        }
                    }
                    let sealed = receipt::seal(body, chain.head, key);
                    if let Some(update) = &attach.escrow {
                        let mut record = update.record.clone();
                        record["receipt"] = sealed.value.clone();
                        let bytes = serde_json::to_vec(&record).map_err(unavailable)?;
                        t.put_escrow(&update.id, &bytes)?;
                    }
                    if let Some(idem) = &attach.idempotency {
                        let mut record = idem.record.clone();
                        record["receipt"] = sealed.value.clone();
                        record["expires_ms"] = idem.expires_ms.into();
                        let bytes = serde_json::to_vec(&record).map_err(unavailable)?;
                        t.put_idempotency(&idem.key, &bytes, idem.expires_ms.max(0) as u64)?;
                        stored_keys = true;
                    }
                    t.put_receipt(chain.next_seq, &sealed.jcs)?;
                    if let (Some(lease_id), ReceiptKind::Interim) = (&body.lease_id, body.kind) {
                        // Sent but not complete: nothing to compensate (SPEC §7).
                        set_lease_state(&mut t, lease_id, "interim")?;
                    }
                    if let Some(lease_id) = &body.lease_id {
                        t.put_lease(
                            &lease_key(lease_id, Part::Receipt, Some(chain.next_seq)),
                            &[],
                        )?;
                    }
                    chain = ChainHead {
                        next_seq: chain.next_seq + 1,
                        head: sealed.digest,
                    };
                    answers.push(Answer::Receipt(Some(Box::new(sealed))));
                }
            }
        }
        if stored_keys {
            sweep_expired(&mut t)?;
        }
        t.redo
    };
    // The durable point: once the journal holds the batch, it survives a crash.
    if !redo.is_empty() {
        journal.append(&redo.bytes).map_err(unavailable)?;
    }
    wtx.commit().map_err(unavailable)?;
    Ok((answers, chain))
}

/// Sets a lease record's `state`, if the record exists.
fn set_lease_state(t: &mut Tables<'_>, lease_id: &str, state: &str) -> Result<(), StoreError> {
    let key = lease_key(lease_id, Part::Record, None);
    let record: Option<serde_json::Value> = t
        .leases
        .get(key.as_slice())
        .map_err(unavailable)?
        .and_then(|v| serde_json::from_slice(v.value()).ok());
    if let Some(mut rec) = record {
        rec["state"] = state.into();
        let bytes = serde_json::to_vec(&rec).map_err(unavailable)?;
        t.put_lease(&key, &bytes)?;
    }
    Ok(())
}

/// Removes up to [`SWEEP_PER_BATCH`] expired idempotency keys (SPEC §5.6 retention).
fn sweep_expired(t: &mut Tables<'_>) -> Result<(), StoreError> {
    let now = now_ms();
    let mut expired: Vec<(u64, String)> = Vec::new();
    for row in t
        .expiry
        .range::<(u64, &str)>(..(now, ""))
        .map_err(unavailable)?
    {
        let (k, _) = row.map_err(unavailable)?;
        let (at, key) = k.value();
        expired.push((at, key.to_owned()));
        if expired.len() >= SWEEP_PER_BATCH {
            break;
        }
    }
    for (at, key) in expired {
        t.delete_expiry(at, &key)?;
        // A key re-stored later has a later expiry: remove the record only if it is this one.
        let current_expiry = t
            .idempotency
            .get(key.as_str())
            .map_err(unavailable)?
            .and_then(|v| serde_json::from_slice::<serde_json::Value>(v.value()).ok())
            .and_then(|r| r["expires_ms"].as_u64());
        if current_expiry.is_none_or(|e| e <= at) {
            t.delete_idempotency(&key)?;
        }
    }
    Ok(())
}

impl EmbeddedStore {
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

    fn read_json(
        &self,
        table: TableDefinition<&str, &[u8]>,
        key: &str,
    ) -> Result<Option<serde_json::Value>, StoreError> {
        Ok(self
            .read_bytes(table, key)?
            .and_then(|b| serde_json::from_slice(&b).ok()))
    }
}

impl Store for EmbeddedStore {
    fn epoch<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
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

    fn append_receipt_with(
        &self,
        body: ReceiptBody,
        attach: Attachments,
    ) -> BoxFuture<'_, Result<Option<SealedReceipt>, StoreError>> {
        self.ask(|tx| Job::Receipt(Box::new((body, attach)), tx))
    }

    fn idempotency<'a>(
        &'a self,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, StoreError>> {
        Box::pin(async move {
            let record = self.read_json(IDEMPOTENCY, key)?;
            // Expired but not yet swept: gone, as far as callers can tell.
            Ok(record.filter(|r| r["expires_ms"].as_u64().is_some_and(|e| e > now_ms())))
        })
    }

    fn escrow_put(&self, update: EscrowUpdate) -> BoxFuture<'_, Result<bool, StoreError>> {
        self.ask(|tx| Job::EscrowPut(update, tx))
    }

    fn escrow<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<serde_json::Value>, StoreError>> {
        Box::pin(async move { self.read_json(ESCROWS, id) })
    }

    fn escrows(&self, limit: usize) -> BoxFuture<'_, Result<Vec<serde_json::Value>, StoreError>> {
        Box::pin(async move {
            let rtx = self.db.begin_read().map_err(unavailable)?;
            let table = rtx.open_table(ESCROWS).map_err(unavailable)?;
            let mut out = Vec::new();
            for row in table.iter().map_err(unavailable)? {
                let (_, v) = row.map_err(unavailable)?;
                if let Ok(rec) = serde_json::from_slice(v.value()) {
                    out.push(rec);
                }
                if out.len() >= limit {
                    break;
                }
            }
            Ok(out)
        })
    }

    fn stage(
        &self,
        lease_id: String,
        record: Option<Vec<u8>>,
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
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(async move { self.read_lease(lease_id, Part::Record) })
    }

    fn lease_receipts<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let rtx = self.db.begin_read().map_err(unavailable)?;
            let index = rtx.open_table(LEASE_DATA).map_err(unavailable)?;
            let from = lease_key(lease_id, Part::Receipt, None);
            let mut to = from.clone();
            if let Some(last) = to.last_mut() {
                *last += 1;
            }
            let mut seqs = Vec::new();
            for row in index
                .range::<&[u8]>(from.as_slice()..to.as_slice())
                .map_err(unavailable)?
            {
                let (k, _) = row.map_err(unavailable)?;
                let k = k.value();
                if let Some(seq) = k
                    .get(k.len().saturating_sub(8)..)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                {
                    seqs.push(u64::from_be_bytes(seq));
                }
            }
            let receipts = rtx.open_table(RECEIPTS).map_err(unavailable)?;
            let mut out = Vec::with_capacity(seqs.len());
            for seq in seqs {
                if let Some(v) = receipts.get(seq).map_err(unavailable)? {
                    out.push(v.value().to_vec());
                }
            }
            Ok(out)
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
    ) -> BoxFuture<'_, Result<Compensation, StoreError>> {
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            self.send(Job::Compensate(lease_id, tx))?;
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

    fn receipts(&self) -> BoxFuture<'_, Result<Vec<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let rtx = self.db.begin_read().map_err(unavailable)?;
            let table = rtx.open_table(RECEIPTS).map_err(unavailable)?;
            let mut out = Vec::with_capacity(table.len().map_err(unavailable)? as usize);
            for row in table.iter().map_err(unavailable)? {
                let (_, jcs) = row.map_err(unavailable)?;
                out.push(jcs.value().to_vec());
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
mod tests;
