//! The PostgreSQL store's negotiation records: the AIP-2.1 relay's messages and RCNS records.
//! Apart from `mod.rs` so that the tables' own modules (`relay`, `rcns`), which the sweeper
//! calls, import nothing that imports them.

use futures_util::future::BoxFuture;

use super::{rcns, relay, PostgresStore};
use crate::{
    RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, RcnsRecords, Relay, RelayEntry, RelayLimits,
    RelayMessage, RelayPosted, RelayQuery, StoreError,
};

/// The store's relay: posts one at a time in this process (the cap is checked in the transaction).
impl Relay for PostgresStore {
    fn relay_post(
        &self,
        message: RelayMessage,
        limits: RelayLimits,
    ) -> BoxFuture<'_, Result<RelayPosted, StoreError>> {
        Box::pin(async move {
            let _turn = self.relay_gate.lock().await;
            let mut client = self.client().await?;
            relay::post(&mut client, &message, limits, self.clock.now_ms()).await
        })
    }

    fn relay_page<'a>(
        &'a self,
        query: &'a RelayQuery,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RelayEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            relay::page(&client, query, after, limit, self.clock.now_ms()).await
        })
    }
}

/// The store's RCNS records, each call its own statements on a pooled connection.
impl RcnsRecords for PostgresStore {
    fn rcns_put(
        &self,
        record: RcnsRecord,
        mode: RcnsPutMode,
    ) -> BoxFuture<'_, Result<RcnsPut, StoreError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            rcns::put(&mut self.client().await?, &record, mode, now).await
        })
    }

    fn rcns_get<'a>(
        &'a self,
        kind: RcnsKind,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<RcnsRecord>, StoreError>> {
        Box::pin(
            async move { rcns::get(&self.client().await?, kind, key, self.clock.now_ms()).await },
        )
    }

    fn rcns_list<'a>(
        &'a self,
        kind: RcnsKind,
        owner: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RcnsRecord>, StoreError>> {
        Box::pin(async move {
            let now = self.clock.now_ms();
            rcns::list(&self.client().await?, kind, owner, limit, now).await
        })
    }
}
