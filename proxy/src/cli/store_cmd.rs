//! `palisade store migrate` and `palisade store check` (SPEC §10): what an operator runs before
//! a rollout, or to see why sidecars refuse to start. Neither echoes the store URL.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use palisade_policy::log::Signer;

use super::keys::read_key;
use super::operate::load_config;
use super::Failure;
use crate::config::{Config, StoreKind};
use crate::store::postgres::PostgresStore;
use crate::store::{connect_from_config, url_from_config};

/// The sidecar key as the receipt log's signer (`receipts.origin`), as `run` makes it.
pub(super) fn key(cfg: &Config) -> Result<Arc<Signer>, Failure> {
    let path = cfg
        .signing_key
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_SIGNING_KEY));
    let pair = Arc::new(read_key(&path)?);
    Signer::new(&cfg.receipts.origin, pair)
        .map(Arc::new)
        .map_err(|e| Failure::usage(format!("receipts.origin: {e}")))
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))
}

pub(super) fn migrate(config: &Path) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    match cfg.store.kind {
        StoreKind::Embedded => {
            println!("embedded store: nothing to migrate (its tables are created when it opens)");
            Ok(())
        }
        StoreKind::Postgres => {
            let key = key(&cfg)?;
            let url = url_from_config(&cfg).map_err(|e| Failure::usage(e.to_string()))?;
            let version = runtime()?
                .block_on(PostgresStore::migrate(
                    connect_from_config(&cfg, &url, Arc::new(crate::clock::AnchoredClock::new())),
                    key,
                ))
                .map_err(|e| Failure::refused(e.to_string()))?;
            println!("ok: postgres schema version {version}");
            Ok(())
        }
    }
}

pub(super) fn check(config: &Path) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    let key = key(&cfg)?;
    let rt = runtime()?;
    match cfg.store.kind {
        StoreKind::Embedded => {
            if !cfg.store.path.exists() {
                return Err(Failure::refused(format!(
                    "{}: store file does not exist",
                    cfg.store.path.display()
                )));
            }
            let store = crate::store::embedded::EmbeddedStore::open(&cfg.store.path, key)
                .map_err(|e| Failure::refused(e.to_string()))?;
            let head = rt
                .block_on(crate::store::Receipts::log_head(&store))
                .map_err(|e| Failure::refused(e.to_string()))?;
            println!(
                "ok: embedded store {}, receipt log of {} entries",
                cfg.store.path.display(),
                head.size
            );
            Ok(())
        }
        StoreKind::Postgres => rt.block_on(async {
            let (store, version) = crate::store::open_existing_postgres(&cfg, key)
                .await
                .map_err(|e| Failure::refused(e.to_string()))?;
            let head = crate::store::Receipts::log_head(&store)
                .await
                .map_err(|e| Failure::refused(e.to_string()))?;
            println!(
                "ok: postgres schema version {version}, receipt log of {} entries",
                head.size
            );
            Ok(())
        }),
    }
}
