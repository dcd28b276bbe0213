//! The embedded store's negotiation records: the AIP-2.1 relay's messages and RCNS records,
//! written through the store's writer and read from a settled snapshot. Apart from `mod.rs`
//! so that the tables' own modules (`relay`, `rcns`), which the writer's jobs call, import
//! nothing that imports them.

use futures_util::future::BoxFuture;

use super::jobs::Job;
use super::tables::unavailable;
use super::{rcns, relay, EmbeddedStore};
use crate::{
    RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, RcnsRecords, Relay, RelayEntry, RelayLimits,
    RelayMessage, RelayPosted, RelayQuery, StoreError,
};

/// The store's relay: posted through the writer, paged from a settled snapshot.
impl Relay for EmbeddedStore {
    fn relay_post(
        &self,
        message: RelayMessage,
        limits: RelayLimits,
    ) -> BoxFuture<'_, Result<RelayPosted, StoreError>> {
        self.ask(|tx| Job::RelayPost(Box::new((message, limits)), tx))
    }

    fn relay_page<'a>(
        &'a self,
        query: &'a RelayQuery,
        after: u64,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RelayEntry>, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            let rtx = self.db.begin_read().map_err(unavailable)?;
            relay::page(&rtx, query, after, limit, self.clock.now_ms())
        })
    }
}

/// The store's RCNS records: written through the writer, read from a settled snapshot.
impl RcnsRecords for EmbeddedStore {
    fn rcns_put(
        &self,
        record: RcnsRecord,
        mode: RcnsPutMode,
    ) -> BoxFuture<'_, Result<RcnsPut, StoreError>> {
        self.ask(|tx| Job::RcnsPut(Box::new((record, mode)), tx))
    }

    fn rcns_get<'a>(
        &'a self,
        kind: RcnsKind,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<RcnsRecord>, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            rcns::get(
                &self.db.begin_read().map_err(unavailable)?,
                kind,
                key,
                self.clock.now_ms(),
            )
        })
    }

    fn rcns_list<'a>(
        &'a self,
        kind: RcnsKind,
        owner: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<RcnsRecord>, StoreError>> {
        Box::pin(async move {
            self.settle().await?;
            rcns::list(
                &self.db.begin_read().map_err(unavailable)?,
                kind,
                owner,
                limit,
                self.clock.now_ms(),
            )
        })
    }
}
