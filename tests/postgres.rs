//! The `postgres` store (SPEC §10, issue 16) against a real PostgreSQL. Each test starts its
//! own throw-away cluster (`postgres/cluster.rs`: Debian's `initdb` + `pg_ctl`, a Unix socket
//! and TLS on loopback, in a temp dir) and the sidecars it needs in front of one upstream
//! (two on the socket, one over TLS `verify-full` with a password), so that a failure names
//! what broke and no test's state leaks into another's. The store contract
//! (`it/store_contract.rs`) runs here on PostgreSQL as it runs on the embedded store.
//!
//! The scenarios that load the machine (a race of 1,000 writes, a replica killed, the
//! database stopped, both under load) take [`HEAVY`] in turn, so their timings are their own.
// Test helpers are outside the 6-parameter limit of clippy.toml (issue 55), which is the product's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_arguments)]

#[path = "it/support/mod.rs"]
mod support;

#[path = "it/store_contract.rs"]
mod store_contract;

#[path = "postgres/approvals.rs"]
mod approvals;
#[path = "postgres/client.rs"]
mod client;
#[path = "postgres/cluster.rs"]
mod cluster;
#[path = "postgres/shared.rs"]
mod shared;
#[path = "postgres/stop.rs"]
mod stop;

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::StatusCode;
use palisade::store::postgres::{Connect, PostgresStore};
use palisade::store::WriteIntent;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use client::*;
use cluster::*;
use palisade::store::Escrows;
use palisade::store::Fences;
use palisade::store::Leases;
use shared::*;
use support::writes::*;
use support::*;

#[path = "postgres/faults.rs"]
mod faults;
#[path = "postgres/once.rs"]
mod once;
#[path = "postgres/operations.rs"]
mod operations;
#[path = "postgres/rules.rs"]
mod rules;

/// Held by the scenarios that load the machine, one at a time.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A cluster, an upstream, and the URLs replicas reach the database by.
struct Fleet {
    cluster: Cluster,
    upstream: Upstream,
    /// The Unix socket (trust).
    socket: String,
    /// TLS `verify-full` to `localhost`, with the password.
    tls: String,
}

impl Fleet {
    async fn start() -> Fleet {
        let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
        let socket = cluster.socket_url();
        let tls = cluster.tls_url("localhost", PASSWORD, "verify-full", Some(&cluster.ca));
        Fleet {
            upstream: Upstream::start().await,
            cluster,
            socket,
            tls,
        }
    }

    /// A sidecar on the database at `url`, with `ptcl.pre_image` as given; every replica
    /// serves the AIP-2.1 relay too.
    fn replica_with(&self, url: &str, pre_image: &str) -> Palisade {
        let dir = tempfile::tempdir().unwrap();
        let store = format!(
            "kind = \"postgres\"\nurl = \"{url}\"\n[ptcl]\npre_image = \"{pre_image}\"\n{RELAY}"
        );
        let text = write_config(&self.upstream, dir.path(), "", &store);
        Palisade::start_in(dir, &text)
    }

    fn replica(&self, url: &str) -> Palisade {
        self.replica_with(url, "off")
    }

    /// A replica on the database at `url` with `extra` configuration after the store's.
    fn replica_configured(&self, url: &str, extra: &str) -> Palisade {
        let dir = tempfile::tempdir().unwrap();
        let store =
            format!("kind = \"postgres\"\nurl = \"{url}\"\n[ptcl]\npre_image = \"off\"\n{extra}");
        let text = write_config(&self.upstream, dir.path(), "", &store);
        Palisade::start_in(dir, &text)
    }

    /// A configuration file `<name>.toml` in `dir` for the database at `url`, for the
    /// operator commands (`store check`, `audit verify`, …).
    fn config_file(&self, dir: &std::path::Path, name: &str, url: &str) -> std::path::PathBuf {
        let store = format!("kind = \"postgres\"\nurl = \"{url}\"\n");
        let text = write_config(&self.upstream, dir, "", &store);
        let path = dir.join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    }
}

/// The store contract on PostgreSQL: one cluster per scenario, the store on its socket.
mod contract {
    use super::*;
    use palisade::clock::SetClock;
    use palisade::store::Store;
    use store_contract::{contract_tests, key, T0};

    async fn postgres() -> (Arc<dyn Store>, Arc<SetClock>, Cluster) {
        let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
        let clock = SetClock::at(T0);
        let url = cluster.socket_url();
        let c = Connect {
            clock: clock.clone(),
            ..connect(&url)
        };
        let store = PostgresStore::open(c, key()).await.unwrap();
        (Arc::new(store), clock, cluster)
    }

    contract_tests!(postgres);
}
