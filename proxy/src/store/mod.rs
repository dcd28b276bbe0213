//! The state store (SPEC §10) is the crate `palisade-store` (issue 55); this module names it
//! where the sidecar always has (`crate::store::…`) and opens it from the configuration,
//! which is the sidecar's, not the store's.

pub use palisade_store::*;

use std::sync::Arc;

use palisade_policy::log::Signer;

use crate::clock::SharedClock;
use crate::config::Config;
use postgres::{Connect, PostgresStore};

/// The URL `config` names: `store.url_env` wins over `store.url` (SPEC §10). Never logged
/// or echoed (it may hold a password).
pub fn url_from_config(config: &Config) -> Result<String, StoreError> {
    match &config.store.url_env {
        Some(var) => std::env::var(var)
            .map_err(|_| StoreError::Unavailable(format!("store.url_env: {var} is not set"))),
        None => Ok(config.store.url.clone().unwrap_or_default()),
    }
}

/// The connection settings `config` gives for `url`, TLS made as the data plane makes it.
pub fn connect_from_config<'a>(config: &Config, url: &'a str, clock: SharedClock) -> Connect<'a> {
    Connect {
        url,
        pool_size: config.store.pool_size,
        statement_timeout: config.store.statement_timeout,
        retention: config.store.retention,
        clock,
        tls: crate::net::db_tls::client_config,
    }
}

/// Opens the PostgreSQL store `config` names, migrating its schema (a sidecar's start).
pub async fn open_postgres(
    config: &Config,
    signer: Arc<Signer>,
    clock: SharedClock,
) -> Result<PostgresStore, StoreError> {
    let url = url_from_config(config)?;
    PostgresStore::open(connect_from_config(config, &url, clock), signer).await
}

/// Opens the PostgreSQL store `config` names with its schema checked, not changed (operator
/// commands); with the schema version.
pub async fn open_existing_postgres(
    config: &Config,
    signer: Arc<Signer>,
) -> Result<(PostgresStore, i32), StoreError> {
    let url = url_from_config(config)?;
    let clock = Arc::new(crate::clock::AnchoredClock::new());
    PostgresStore::open_existing(connect_from_config(config, &url, clock), signer).await
}
