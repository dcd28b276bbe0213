//! The store contract (`store_contract.rs`) on the embedded store; `tests/postgres.rs` runs
//! the same scenarios on PostgreSQL.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use palisade::clock::SetClock;
use palisade::store::embedded::EmbeddedStore;
use palisade::store::{Retention, Store};

use crate::store_contract::{contract_tests, key, T0};

async fn embedded() -> (Arc<dyn Store>, Arc<SetClock>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let clock = SetClock::at(T0);
    let store = EmbeddedStore::open_with(
        &dir.path().join("state.redb"),
        key(),
        Retention::default(),
        clock.clone(),
    )
    .unwrap();
    (Arc::new(store), clock, dir)
}

contract_tests!(embedded);
