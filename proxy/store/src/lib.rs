//! The state store (SPEC §10): what must survive a crash.
//!
//! The trait's methods are the transactions the write pipeline needs, not a key-value API:
//! "advance this resource's fence and stage this lease's inverse and snapshot, atomically, or
//! tell me the epoch that beat me" is one call, so a second backend (PostgreSQL, many replicas)
//! implements the same contract with its own locking and cannot be composed wrongly.
//!
//! Durability: every method that changes state returns only after the change is durable
//! (fsync'd). The embedded backend batches concurrent callers into one transaction and one
//! fsync (group commit), so durability costs one disk flush per batch, not per write.
//!
//! The per-resource write lock is here too ([`Fences::lock`]): one sidecar owns an embedded
//! store, so its lock is in-process ([`locks::ResourceLocks`]); a shared backend takes it in
//! the database, so that every replica respects it.

pub mod clock;
pub mod embedded;
mod error;
pub mod journal;
pub mod locks;
pub mod log_query;
pub mod log_read;
pub mod metrics;
pub mod postgres;
pub mod rcns;
pub mod records;
pub mod relay;

pub use error::StoreError;
use futures_util::future::BoxFuture;
use palisade_policy::log::merkle::Hash;
use palisade_policy::log::Head;
use palisade_policy::receipt::{ReceiptBody, SealedReceipt};
pub use rcns::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord};
pub use records::{
    Attachments, BudgetSpend, BudgetVerdict, EscrowRecord, EscrowState, EscrowUpdate, FreezeChange,
    HeldProtocol, HeldRequest, IdempotencyRecord, LeaseRecord, LeaseState, StoredOutcome,
};
pub use relay::{RelayEntry, RelayLimits, RelayMessage, RelayPosted, RelayQuery};

/// The answer to [`IdempotencyKeys::reserve_key`].
#[derive(Debug, Clone, PartialEq)]
pub enum KeyState {
    /// The key is this request's until its outcome is stored or it is released.
    Reserved,
    /// Another request (on this or another replica) holds the key; its fingerprint, when known.
    Running { fingerprint: Option<String> },
    /// The key's stored outcome.
    Stored(StoredOutcome),
}

/// What a write makes durable before it is forwarded (SPEC §5.3, §5.4).
#[derive(Debug, Clone)]
pub struct WriteIntent {
    /// The resource key (SPEC §4.3).
    pub resource: String,
    /// The lease's `cas_fence_epoch`; must be greater than the resource's current epoch.
    pub epoch: u64,
    pub lease_id: String,
    /// The lease's expiry (unix ms): its data is removed [`Retention::leases`] after it.
    pub expires_at_ms: i64,
    /// The lease's record: digest, mode, expiry, agent, state.
    pub lease_record: LeaseRecord,
    /// The JCS of the inverse payload, when one was staged.
    pub inverse: Option<Vec<u8>>,
    /// The pre-image representation, for SNAPSHOT_RESTORE (empty when the resource was absent).
    pub snapshot: Option<Vec<u8>>,
}

/// Retention is configuration (`store.lease_retention`, `store.receipt_retention`); the
/// store applies it.
/// How long the store keeps what it no longer needs for enforcement (SPEC §10; the choices
/// are in docs/decisions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// How long a lease's record, staged inverse, snapshot and receipt index stay after the
    /// lease expires (no write or compensation is accepted under it by then; this is for
    /// lookups and investigations). An inverse staged under a lease id the store has no record
    /// of is kept this long from staging.
    pub leases: std::time::Duration,
    /// Receipts older than this are removed, oldest first, leaving an anchor that `audit
    /// verify` starts from. `None`: kept forever.
    pub receipts: Option<std::time::Duration>,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            leases: std::time::Duration::from_secs(24 * 3600),
            receipts: Some(std::time::Duration::from_secs(30 * 24 * 3600)),
        }
    }
}

/// Where the retained part of the receipt chain starts, once older receipts were removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainAnchor {
    /// Receipts removed so far (the sequence number of the first retained one).
    pub pruned: u64,
    /// The digest of the last removed receipt: the first retained one's `prev`.
    pub prev: palisade_policy::digest::Sha256Digest,
}

/// Entries of the receipt log: `(index, the receipt's JCS)`, in index order.
pub type LogEntries = Vec<(u64, Vec<u8>)>;

/// A receipt naming a lease, as the store keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseReceipt {
    /// Its index in the receipt log; `None` for a v1 receipt from before the log.
    pub index: Option<u64>,
    /// Its JCS.
    pub bytes: Vec<u8>,
}

/// The retained part of the receipt chain.
#[derive(Debug, Clone, Default)]
pub struct ReceiptLog {
    /// `None` when the chain is whole (nothing was removed under [`Retention::receipts`]).
    pub anchor: Option<ChainAnchor>,
    /// The JCS of each retained receipt, in chain order.
    pub receipts: Vec<Vec<u8>>,
}

/// The answer to [`Fences::advance`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advance {
    /// The epoch moved to the intent's epoch; everything in the intent is durable.
    Advanced,
    /// The resource's epoch was already `current` ≥ the intent's: nothing changed.
    Stale { current: u64 },
}

/// The answer to [`Leases::begin_compensation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compensation {
    /// The lease is now `compensated` and its resource's epoch advanced to `epoch`, durably:
    /// the inverse may be sent, fenced with `epoch`.
    Started {
        epoch: u64,
    },
    AlreadyCompensated,
    /// The lease has no committed write (granted only, or unknown).
    NotCommitted,
}

/// Held while one resource's write is checked, forwarded and receipted (SPEC §5.3): dropping
/// it releases the lock. What it holds is the backend's.
pub struct ResourceGuard(Box<dyn std::any::Any + Send + Sync>);

impl ResourceGuard {
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self(Box::new(held))
    }

    /// What the backend keeps in the guard, if it is a `T`.
    pub fn held<T: 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

/// The state store (SPEC §10), one trait per concern (issue 55: none over ten methods), so that
/// a stage can name the part it uses. Every backend implements them all; `dyn Store` is the
/// whole store (a trait object's methods need no import); on a concrete backend, import the
/// concern whose methods you call.
pub trait Store:
    Fences + Leases + Receipts + IdempotencyKeys + Escrows + Relay + RcnsRecords + Stops
{
}

impl<T: Fences + Leases + Receipts + IdempotencyKeys + Escrows + Relay + RcnsRecords + Stops> Store
    for T
{
}

/// The per-resource write lock and fence epochs (SPEC §5.3), and whether the store answers.
pub trait Fences: Send + Sync {
    /// Takes `resource`'s write lock, waiting for it; held until the guard is dropped.
    fn lock<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<ResourceGuard, StoreError>>;

    /// [`Fences::lock`], then [`Fences::epoch`] as seen once the lock is held (check 11); a
    /// backend may do both in one round trip.
    fn lock_and_epoch<'a>(
        &'a self,
        resource: &'a str,
    ) -> BoxFuture<'a, Result<(ResourceGuard, u64), StoreError>> {
        Box::pin(async move {
            let guard = self.lock(resource).await?;
            let epoch = self.epoch(resource).await?;
            Ok((guard, epoch))
        })
    }

    /// Confirms that `guard`'s lock is still held, just before the write it guards is sent: a
    /// shared backend's lock lives in a database session, which a restart or a cut connection
    /// ends (and the lock with it). A lock held now was held since it was taken.
    fn confirm<'a>(&'a self, guard: &'a ResourceGuard) -> BoxFuture<'a, Result<(), StoreError>>;

    /// The last committed epoch of `resource` (0 when never written).
    fn epoch<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<u64, StoreError>>;

    /// Compare-and-advance the fence and stage the lease's data, atomically and durably.
    /// Epochs never move backwards: a stale intent changes nothing.
    fn advance(&self, intent: WriteIntent) -> BoxFuture<'_, Result<Advance, StoreError>>;

    /// Whether the store can take writes now (for `/readyz`): it answers reads and its last
    /// write transaction, if any, did not fail.
    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>>;
}

/// Lease records, staged inverses and snapshots, and compensation (SPEC §5.4, §5.7).
pub trait Leases: Send + Sync {
    /// Stores a lease record (a grant) and/or its inverse payload durably, replacing earlier
    /// ones for the same `lease_id`. Moves no epoch.
    fn stage(
        &self,
        lease_id: String,
        record: Option<LeaseRecord>,
        inverse: Option<Vec<u8>>,
    ) -> BoxFuture<'_, Result<(), StoreError>>;

    /// The lease record stored at grant or commit, if any.
    fn lease_record<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, StoreError>>;

    /// Every retained receipt that names `lease_id`: v1 receipts kept from before the log
    /// (`index: None`) in chain order, then the log's entries in index order.
    fn lease_receipts<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseReceipt>, StoreError>>;

    /// The pre-image snapshot kept for a SNAPSHOT_RESTORE lease, if any.
    fn snapshot<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Marks a committed lease compensated and advances the fence of `resource` (the
    /// inverse's: SPEC §5.4), atomically, so that a lease is compensated at most once and the
    /// inverse travels with that resource's next epoch, never an older one.
    fn begin_compensation(
        &self,
        lease_id: String,
        resource: String,
    ) -> BoxFuture<'_, Result<Compensation, StoreError>>;

    /// The staged inverse payload of a lease, if any.
    fn inverse<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
}

/// The receipt log (SPEC §5.5): appending receipts and reading the tree.
pub trait Receipts: Send + Sync {
    /// Appends `body` to the receipt log as its next entry, in the batch whose one checkpoint
    /// covers it, and stores it durably; the answer is the receipt with its envelope, only
    /// once that checkpoint is durable. Entries are appended in one total order.
    fn append_receipt(
        &self,
        body: ReceiptBody,
    ) -> BoxFuture<'_, Result<SealedReceipt, StoreError>> {
        Box::pin(async move {
            self.append_receipt_with(body, Attachments::default())
                .await?
                .ok_or_else(|| {
                    StoreError::Unavailable("receipt without attachments refused".into())
                })
        })
    }

    /// As [`Receipts::append_receipt`], storing `attach` in the same transaction. `Ok(None)`: an
    /// escrow update's expected state did not hold, and nothing (not even the receipt) was
    /// stored.
    fn append_receipt_with(
        &self,
        body: ReceiptBody,
        attach: Attachments,
    ) -> BoxFuture<'_, Result<Option<SealedReceipt>, StoreError>>;

    /// The retained part of the version 1.0 receipt chain a store kept from before the receipt
    /// log, with where it starts (for `palisade audit verify`), read at one point in time.
    fn receipt_log(&self) -> BoxFuture<'_, Result<ReceiptLog, StoreError>>;

    /// The receipt log's head: its size and newest checkpoint (the signed empty checkpoint
    /// when it has no entry).
    fn log_head(&self) -> BoxFuture<'_, Result<Head, StoreError>>;

    /// The log's stored hashes at `indexes` (each below `stored_hash_count` of the head's
    /// size), in the order asked; an error if one is missing.
    fn log_hashes(&self, indexes: Vec<u64>) -> BoxFuture<'_, Result<Vec<Hash>, StoreError>>;

    /// The retained entries with an index in `from..to`, in index order (entries past
    /// `store.receipt_retention` are gone; their hashes are not).
    fn log_entries(&self, from: u64, to: u64) -> BoxFuture<'_, Result<LogEntries, StoreError>>;

    /// Every retained entry of the receipt log, in index order.
    fn receipts(&self) -> BoxFuture<'_, Result<Vec<Vec<u8>>, StoreError>> {
        Box::pin(async move {
            let head = self.log_head().await?;
            Ok(self
                .log_entries(0, head.size)
                .await?
                .into_iter()
                .map(|(_, e)| e)
                .collect())
        })
    }
}

/// Idempotency keys (SPEC §5.6): a key reserved for one request, then its outcome.
pub trait IdempotencyKeys: Send + Sync {
    /// Reserves an idempotency key for the request with `fingerprint` (SPEC §5.6), unless a
    /// request holds it or its outcome is stored. `owner` names this reservation (for
    /// [`IdempotencyKeys::release_key`]); `hold_until_ms` is when a reservation whose request died may be
    /// taken over (the lease's spent epoch keeps such a write from running twice).
    fn reserve_key<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        owner: &'a str,
        hold_until_ms: i64,
    ) -> BoxFuture<'a, Result<KeyState, StoreError>>;

    /// Releases the reservation `owner` holds on `key`, if it still does (a stored outcome is
    /// never removed). Runs from `Drop`, so the future owns what it needs; a backend that can
    /// release at once does so before returning it.
    fn release_key(&self, key: String, owner: String)
        -> BoxFuture<'static, Result<(), StoreError>>;
}

/// Held writes (SPEC §5.4, HUMAN_ESCROW).
pub trait Escrows: Send + Sync {
    /// Applies an escrow update without a receipt; `false` when its expected state did not hold.
    fn escrow_put(&self, update: EscrowUpdate) -> BoxFuture<'_, Result<bool, StoreError>>;

    /// An escrow's record.
    fn escrow<'a>(&'a self, id: &'a str)
        -> BoxFuture<'a, Result<Option<EscrowRecord>, StoreError>>;

    /// Up to `limit` escrow records, oldest first.
    fn escrows(&self, limit: usize) -> BoxFuture<'_, Result<Vec<EscrowRecord>, StoreError>>;
}

/// The AIP-2.1 negotiation relay's messages (seed 001 §6.3).
pub trait Relay: Send + Sync {
    /// Keeps a negotiation-relay message (seed 001 §6.3) durably under the next cursor,
    /// unless one with its signature is kept already or a cap in `limits` is reached; the
    /// check and the insert are one transaction, across replicas too.
    fn relay_post(
        &self,
        message: RelayMessage,
        limits: RelayLimits,
    ) -> BoxFuture<'_, Result<RelayPosted, StoreError>>;

    /// Up to `limit` unexpired relay messages matching `query` with a cursor after `after`,
    /// in cursor order.
    fn relay_page<'a>(
        &'a self,
        query: &'a RelayQuery,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RelayEntry>, StoreError>>;
}

/// RCNS proposals and synthesized contracts (seed 000).
pub trait RcnsRecords: Send + Sync {
    /// Stores an RCNS record durably (`store::rcns`); a `Create` checks the key and the caps
    /// in the same transaction.
    fn rcns_put(
        &self,
        record: RcnsRecord,
        mode: RcnsPutMode,
    ) -> BoxFuture<'_, Result<RcnsPut, StoreError>>;

    /// The live record of `kind` under `key`.
    fn rcns_get<'a>(
        &'a self,
        kind: RcnsKind,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<RcnsRecord>, StoreError>>;

    /// Up to `limit` live records of `kind`, of `owner` when given, in key order.
    fn rcns_list<'a>(
        &'a self,
        kind: RcnsKind,
        owner: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RcnsRecord>, StoreError>>;
}

/// Freezes and write budgets (SPEC §14).
pub trait Stops: Send + Sync {
    /// Every freeze stored (SPEC §14), as written (made with
    /// [`Receipts::append_receipt_with`] and [`Attachments::freeze`], beside its receipt).
    fn freezes(&self) -> BoxFuture<'_, Result<Vec<Vec<u8>>, StoreError>>;

    /// SPEC §14: checks every rule's sliding window at the store's now and, when all have room,
    /// spends one unit of each, atomically (exact across replicas sharing the store).
    fn budget_spend(
        &self,
        spends: Vec<BudgetSpend>,
    ) -> BoxFuture<'_, Result<BudgetVerdict, StoreError>>;

    /// Gives back what [`Stops::budget_spend`] spent for a write that then went nowhere.
    fn budget_refund(&self, spent: Vec<Vec<u8>>) -> BoxFuture<'_, Result<(), StoreError>>;
}
