//! The `postgres` store (SPEC §10): the same contract as the embedded one, for any number of
//! sidecars sharing one PostgreSQL database, so that they behave as one sidecar.
//!
//! Every method is one transaction; `COMMIT` (`synchronous_commit = on`) is the durable point.
//! The fence compare-and-advance is one `INSERT … ON CONFLICT DO UPDATE … WHERE epoch < new`,
//! so two replicas racing for one epoch cannot both win. One receipt log for all replicas: a
//! batch takes `log_head` `FOR UPDATE`, so replicas integrate in turn. The per-resource write
//! lock is a session advisory lock on a pool of its own (a lock holder waiting for a work
//! connection could otherwise starve the pool it holds), released with the guard, or by the
//! server when a replica dies. Fence advances and receipts go through one writer task per
//! replica ([`batch`]); idempotency reservations are shared rows ([`keys`]); one replica at a
//! time sweeps what retention lets go ([`sweep`]); budgets are one function call (`reads`).

mod batch;
mod connect;
mod escrows;
pub use connect::{ClientTls, Connect, Roots, Verify};
mod keys;
mod lock;
mod log;
mod negotiation;
mod rcns;
mod reads;
mod relay;
mod schema;
mod sweep;
mod tx;

use std::sync::Arc;

use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use futures_util::future::BoxFuture;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::log::merkle::Hash;
use palisade_policy::log::{Head, Signer};
use palisade_policy::receipt::{self, ReceiptBody, SealedReceipt};
use tokio::sync::{mpsc, oneshot};

use batch::Job;
use tx::{compensate, put_part, unavailable, unavailable_msg, INVERSE, NO_SEQ, RECORD, SNAPSHOT};

use crate::clock::SharedClock;
use crate::records;
use crate::{
    Advance, Attachments, Compensation, Fences, IdempotencyKeys, KeyState, LeaseReceipt, Leases,
    LogEntries, ReceiptLog, Receipts, ResourceGuard, Stops, StoreError, WriteIntent,
};
use crate::{BudgetSpend, BudgetVerdict, LeaseRecord};

pub struct PostgresStore {
    pool: Pool,
    locks: Pool, // connections holding a resource's advisory lock (the module doc)
    jobs: mpsc::Sender<Job>, // to this replica's batch writer
    /// Ended when the store goes.
    sweeper: Option<tokio::task::JoinHandle<()>>,
    /// One relay post at a time per replica: posts queue on `relay_head` anyway, and each
    /// waiting one would hold a pooled connection that fence writes need.
    relay_gate: tokio::sync::Mutex<()>,
    /// The store's time (see [`Connect::clock`]).
    clock: SharedClock,
    /// Signs the log's checkpoints (the batch writer's copy), here for the empty log's.
    signer: Arc<Signer>,
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.sweeper.as_ref().map(tokio::task::JoinHandle::abort);
    }
}

impl PostgresStore {
    /// Connects, applies migrations, starts the batch writer
    /// and the sweeper.
    pub async fn open(c: Connect<'_>, signer: Arc<Signer>) -> Result<Self, StoreError> {
        let mut store = Self::connect(&c, signer).await?;
        let mut client = store.client().await?;
        schema::migrate(&mut client, &Sha256Digest::empty().to_string()).await?;
        drop(client);
        store.sweeper = Some(sweep::spawn(
            store.pool.clone(),
            c.retention,
            c.clock.clone(),
        ));
        Ok(store)
    }

    /// Connects and checks the schema without changing it (`palisade store check`, `audit
    /// verify`); the schema version, or an error saying what to do.
    pub async fn open_existing(
        c: Connect<'_>,
        signer: Arc<Signer>,
    ) -> Result<(Self, i32), StoreError> {
        let store = Self::connect(&c, signer).await?;
        let client = store.client().await?;
        let version = schema::check(&client).await?;
        drop(client);
        Ok((store, version))
    }

    /// Applies the migrations this build has (`palisade store migrate`); the version after.
    pub async fn migrate(c: Connect<'_>, signer: Arc<Signer>) -> Result<i32, StoreError> {
        let store = Self::connect(&c, signer).await?;
        let mut client = store.client().await?;
        schema::migrate(&mut client, &Sha256Digest::empty().to_string()).await?;
        schema::check(&client).await
    }

    async fn connect(c: &Connect<'_>, signer: Arc<Signer>) -> Result<Self, StoreError> {
        let (mut config, tls) = connect::parse(c.url, c.tls)?;
        config.options(format!(
            "-c statement_timeout={}",
            c.statement_timeout.as_millis()
        ));
        config.connect_timeout(std::time::Duration::from_secs(5));
        let pool = |size| {
            let manager = Manager::from_config(
                config.clone(),
                tls.clone(),
                ManagerConfig {
                    recycling_method: RecyclingMethod::Fast,
                },
            );
            Pool::builder(manager)
                .max_size(size)
                .runtime(Runtime::Tokio1)
                .wait_timeout(Some(std::time::Duration::from_secs(10)))
                .create_timeout(Some(std::time::Duration::from_secs(5)))
                .build()
                .map_err(unavailable)
        };
        let work = pool(c.pool_size.max(2))?;
        Ok(Self {
            jobs: batch::spawn(work.clone(), signer.clone(), c.clock.clone()),
            pool: work,
            locks: pool(c.pool_size.max(2))?,
            sweeper: None,
            relay_gate: tokio::sync::Mutex::new(()),
            clock: c.clock.clone(),
            signer,
        })
    }

    async fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .send(job)
            .await
            .map_err(|_| unavailable_msg("the writer task is gone"))
    }

    async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.map_err(unavailable)
    }
}

impl Fences for PostgresStore {
    fn lock<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<ResourceGuard, StoreError>> {
        Box::pin(lock::lock(&self.locks, resource))
    }

    fn lock_and_epoch<'a>(
        &'a self,
        resource: &'a str,
    ) -> BoxFuture<'a, Result<(ResourceGuard, u64), StoreError>> {
        Box::pin(lock::lock_and_epoch(&self.locks, resource))
    }

    fn confirm<'a>(&'a self, guard: &'a ResourceGuard) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(lock::confirm(guard))
    }

    fn epoch<'a>(&'a self, resource: &'a str) -> BoxFuture<'a, Result<u64, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = client
                .query_opt("SELECT epoch FROM fences WHERE resource = $1", &[&resource])
                .await
                .map_err(unavailable)?;
            Ok(row.map_or(0, |r| r.get::<_, i64>(0) as u64))
        })
    }

    fn advance(&self, intent: WriteIntent) -> BoxFuture<'_, Result<Advance, StoreError>> {
        Box::pin(async move {
            let (reply, answer) = oneshot::channel();
            self.submit(Job::Advance(Box::new(intent), reply)).await?;
            answer
                .await
                .map_err(|_| unavailable_msg("the writer task is gone"))?
        })
    }

    fn ready(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            client
                .query_one("SELECT 1", &[])
                .await
                .map_err(unavailable)?;
            Ok(())
        })
    }
}

impl Leases for PostgresStore {
    fn stage(
        &self,
        lease_id: String,
        record: Option<LeaseRecord>,
        inverse: Option<Vec<u8>>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(unavailable)?;
            if let Some(r) = &record {
                put_part(&tx, &lease_id, RECORD, NO_SEQ, &r.to_bytes()).await?;
            }
            if let Some(inv) = &inverse {
                put_part(&tx, &lease_id, INVERSE, NO_SEQ, inv).await?;
            }
            // Kept until the lease's expiry (from its record), else from now, plus retention.
            let expires = records::staged_expiry(record.as_ref(), self.clock.now_ms());
            tx.execute(
                "INSERT INTO lease_expiry (lease_id, expires_ms) VALUES ($1, $2)
                 ON CONFLICT (lease_id) DO UPDATE
                 SET expires_ms = GREATEST(lease_expiry.expires_ms, EXCLUDED.expires_ms)",
                &[&lease_id, &expires],
            )
            .await
            .map_err(unavailable)?;
            tx.commit().await.map_err(unavailable)
        })
    }

    fn lease_record<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<LeaseRecord>, StoreError>> {
        Box::pin(async move {
            self.lease_part(lease_id, RECORD)
                .await?
                .map(|b| LeaseRecord::from_bytes(&b))
                .transpose()
        })
    }

    fn lease_receipts<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<LeaseReceipt>, StoreError>> {
        Box::pin(async move { log::lease_receipts(&self.client().await?, lease_id).await })
    }

    fn snapshot<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(self.lease_part(lease_id, SNAPSHOT))
    }

    fn begin_compensation(
        &self,
        lease_id: String,
        resource: String,
    ) -> BoxFuture<'_, Result<Compensation, StoreError>> {
        Box::pin(async move { compensate(&mut self.client().await?, &lease_id, &resource).await })
    }

    fn inverse<'a>(
        &'a self,
        lease_id: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        Box::pin(self.lease_part(lease_id, INVERSE))
    }
}

impl Receipts for PostgresStore {
    fn append_receipt_with(
        &self,
        body: ReceiptBody,
        attach: Attachments,
    ) -> BoxFuture<'_, Result<Option<SealedReceipt>, StoreError>> {
        Box::pin(async move {
            // The entry's JCS here, on the caller's task, not in the batch.
            let entry = receipt::entry(&body).map_err(|e| unavailable_msg(&e.to_string()))?;
            let (reply, answer) = oneshot::channel();
            self.submit(Job::Append(Box::new((body, entry, attach)), reply))
                .await?;
            answer
                .await
                .map_err(|_| unavailable_msg("the writer task is gone"))?
        })
    }

    fn receipt_log(&self) -> BoxFuture<'_, Result<ReceiptLog, StoreError>> {
        Box::pin(async move {
            let mut client = self.client().await?;
            sweep::receipt_log(&mut client).await
        })
    }

    fn log_head(&self) -> BoxFuture<'_, Result<Head, StoreError>> {
        Box::pin(async move { log::head(&self.client().await?, &self.signer).await })
    }

    fn log_hashes(&self, indexes: Vec<u64>) -> BoxFuture<'_, Result<Vec<Hash>, StoreError>> {
        Box::pin(async move { log::hashes(&self.client().await?, &indexes).await })
    }

    fn log_entries(&self, from: u64, to: u64) -> BoxFuture<'_, Result<LogEntries, StoreError>> {
        Box::pin(async move { log::entries(&self.client().await?, from, to).await })
    }
}

impl IdempotencyKeys for PostgresStore {
    fn reserve_key<'a>(
        &'a self,
        key: &'a str,
        fingerprint: &'a str,
        owner: &'a str,
        hold_until_ms: i64,
    ) -> BoxFuture<'a, Result<KeyState, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let now = self.clock.now_ms();
            keys::reserve(&client, key, fingerprint, owner, hold_until_ms, now).await
        })
    }

    fn release_key(
        &self,
        key: String,
        owner: String,
    ) -> BoxFuture<'static, Result<(), StoreError>> {
        let pool = self.pool.clone();
        Box::pin(async move {
            let client = pool.get().await.map_err(unavailable)?;
            keys::release(&client, &key, &owner).await
        })
    }
}

impl Stops for PostgresStore {
    fn budget_spend(
        &self,
        s: Vec<BudgetSpend>,
    ) -> BoxFuture<'_, Result<BudgetVerdict, StoreError>> {
        Box::pin(self.spend_budget(s))
    }

    fn budget_refund(&self, spent: Vec<Vec<u8>>) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.refund_budget(spent))
    }

    fn freezes(&self) -> BoxFuture<'_, Result<Vec<Vec<u8>>, StoreError>> {
        Box::pin(self.read_freezes())
    }
}
