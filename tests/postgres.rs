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

/// Writes racing for one epoch on three replicas (one over TLS `verify-full`): one goes; 1,000
/// mixed writes keep every fence rising; every receipt given is in the one log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_epoch_lets_one_write_through_across_replicas() {
    let _heavy = HEAVY.lock().await;
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let cluster = &fleet.cluster;
    let mut given: Vec<Got> = Vec::new();

    // Replica c's sessions are TLS, as `verify-full` asked.
    let tls_sessions = cluster.query(&format!(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = '{ROLE}' AND s.ssl"
    ));
    assert_ne!(tls_sessions, "0", "replica c is not on TLS");

    // 64 writes with one epoch to one resource, spread over the three at once: one goes.
    let path = "/items/race";
    let mut tasks = Vec::new();
    for i in 0..64 {
        let base = [&a, &b, &c][i % 3].url("");
        let lease = lease_for(&agent, path, 1, |_| {});
        tasks.push(tokio::spawn(async move {
            got(try_send(leased_put(&base, path, &lease, None, r#"{"qty":1}"#)).await)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let g = t.await.unwrap();
        match g.status {
            Some(StatusCode::OK) => ok += 1,
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            other => panic!("{other:?} {g:?}"),
        }
        assert!(g.receipt.is_some(), "{g:?}");
        given.push(g);
    }
    assert_eq!(ok, 1, "writes forwarded for one epoch");
    let seen = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == path)
        .count();
    assert_eq!(seen, 1, "the upstream saw {seen} writes");

    // 1,000 mixed writes from all three: fresh epochs racing each other, and stale ones.
    let next = Arc::new(AtomicU64::new(1));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let bases: Vec<String> = [&a, &b, &c].iter().map(|p| p.url("")).collect();
        let next = next.clone();
        let agent = KeyPair::from_seed(AGENT_SEED);
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..(1000 / 16 + usize::from(t < 1000 % 16)) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let path = format!("/items/mix-{}", n % 10);
                // One in five is deliberately stale (an epoch long spent, or never beaten).
                let epoch = if i % 5 == 4 { 1 } else { n + 1 };
                let lease = lease_for(&agent, &path, epoch, |_| {});
                let base = &bases[(t + i) % 3];
                let answer = got(try_send(leased_put(base, &path, &lease, None, "{}")).await);
                out.push((path, epoch, answer));
            }
            out
        }));
    }
    let mut accepted: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for t in tasks {
        for (path, epoch, g) in t.await.unwrap() {
            total += 1;
            match g.status {
                Some(StatusCode::OK) => {
                    let e = accepted.entry(path).or_default();
                    *e = (*e).max(epoch);
                }
                Some(StatusCode::CONFLICT) => {
                    assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
                }
                other => panic!("{other:?} {g:?}"),
            }
            given.push(g);
        }
    }
    assert_eq!(total, 1000);
    assert_epochs_rise(upstream, "/items/mix-");
    let store = open(socket).await.unwrap();
    for (path, max) in &accepted {
        assert_eq!(
            store.epoch(&format!("{BASE}{path}")).await.unwrap(),
            *max,
            "{path}"
        );
    }

    // Every receipt any client got is in the one log, which verifies, also by `audit
    // verify` while the sidecars run (the URL from store.url_env).
    let count = assert_log_holds(socket, &given).await;
    let config = std::fs::read_to_string(a.dir.path().join("palisade.toml"))
        .unwrap()
        .replace(
            &format!("url = \"{socket}\""),
            "url_env = \"TEST_PALISADE_STORE_URL\"",
        );
    let audit_config = a.dir.path().join("audit.toml");
    std::fs::write(&audit_config, config).unwrap();
    let v = audit_verify(&audit_config, socket);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["size"].as_u64().unwrap() >= count, "{v}");
    // One log for the three replicas, as each serves it, checked by an implementation that is
    // not ours with every receipt the clients got (each proven in its own checkpoint).
    let envelopes: Vec<Value> = given.iter().filter_map(|g| g.envelope.clone()).collect();
    for r in [&a, &b, &c] {
        let v = support::log_mirror::assert_log_verifies_independently(r.admin, &envelopes).await;
        assert!(v["size"].as_u64().unwrap() >= count, "{v}");
    }
}

/// An idempotency key is one key across the replicas.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_runs_once_across_replicas() {
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);

    // An idempotency key retried at another replica is replayed, not run; with another body
    // it is refused; the same key at two replicas at once runs once.
    let lease = lease_for(&agent, "/items/idem", 1, |_| {});
    let first = try_send(leased_put(
        &a.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":7}"#,
    ))
    .await
    .unwrap();
    assert_eq!(first.0, StatusCode::OK);
    let again = try_send(leased_put(
        &b.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":7}"#,
    ))
    .await
    .unwrap();
    assert_eq!(again.0, StatusCode::OK);
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!(
        again.1["agent-commit-receipt"],
        first.1["agent-commit-receipt"]
    );
    let other = try_send(leased_put(
        &c.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":8}"#,
    ))
    .await
    .unwrap();
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY);
    for round in 0..10 {
        let path = format!("/items/idem-{round}");
        let key = format!("k-race-{round}");
        let lease = lease_for(&agent, &path, 1, |_| {});
        let (x, y) = tokio::join!(
            try_send(leased_put(&a.url(""), &path, &lease, Some(&key), "{}")),
            try_send(leased_put(&c.url(""), &path, &lease, Some(&key), "{}")),
        );
        let (x, y) = (got(x), got(y));
        let codes = [x.code.as_deref(), y.code.as_deref()];
        assert!(
            x.status == Some(StatusCode::OK) || y.status == Some(StatusCode::OK),
            "{x:?} {y:?}"
        );
        assert!(
            codes
                .iter()
                .all(|c| c.is_none() || *c == Some("ERR_IDEMPOTENCY_IN_FLIGHT")),
            "{x:?} {y:?}"
        );
        let runs = upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count();
        assert_eq!(runs, 1, "round {round}: the key ran {runs} times");
    }
    // A key refused before forwarding stays usable, at any replica.
    let stale = lease_for(&agent, "/items/idem", 1, |_| {});
    let refused = try_send(leased_put(
        &a.url(""),
        "/items/idem",
        &stale,
        Some("k-2"),
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(refused.0, StatusCode::CONFLICT);
    let fresh = lease_for(&agent, "/items/idem", 2, |_| {});
    // The refused request released its reservation before it was answered.
    let status = try_send(leased_put(
        &b.url(""),
        "/items/idem",
        &fresh,
        Some("k-2"),
        "{}",
    ))
    .await
    .map(|a| a.0);
    assert_eq!(status, Some(StatusCode::OK));
}

/// A held write is released once, whichever replica approves it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_escrow_is_approved_once_across_replicas() {
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);

    // An escrow held on one replica is approved through another's admin API, once.
    let lease = lease_for(&agent, "/items/escrowed", 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
    });
    let held = try_send(leased_put(
        &a.url(""),
        "/items/escrowed",
        &lease,
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(
        held.0,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&held.2)
    );
    let id = serde_json::from_slice::<Value>(&held.2).unwrap()["escrow_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let escrowed = || {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == "/items/escrowed")
            .count()
    };
    assert_eq!(escrowed(), 0);
    let (status, doc) = admin_post(b.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(escrowed(), 1);
    let (status, _) = admin_post(c.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(escrowed(), 1, "approved twice");
    // No replica lists it as open any more.
    let (_, list) = admin_get(a.admin, "/admin/v1/escrow").await;
    assert_eq!(list, r#"{"escrows":[]}"#);
}

/// A lease is compensated once, whichever replica is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_is_compensated_once_across_replicas() {
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut given: Vec<Got> = Vec::new();

    // A write committed through one replica is compensated through another, once.
    let lease = lease_for(&agent, "/items/undo", 1, |_| {});
    let lease_id = serde_json::from_slice::<Value>(&URL_SAFE_NO_PAD.decode(&lease).unwrap())
        .unwrap()["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        try_send(leased_put(&a.url(""), "/items/undo", &lease, None, "{}"))
            .await
            .unwrap()
            .0,
        StatusCode::OK
    );
    let compensate = |p: &Palisade| {
        http::Request::post(p.url(&format!(
            "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
        )))
        .body(full(""))
        .unwrap()
    };
    let done = got(try_send(compensate(&c)).await);
    assert_eq!(done.status, Some(StatusCode::OK), "{done:?}");
    // The inverse is the write's own resource (SPEC §5.4), sent with its next epoch.
    let epochs: Vec<String> = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == "/items/undo")
        .map(|r| {
            r.headers
                .get("agent-fence-token")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        })
        .collect();
    assert_eq!(epochs, ["1", "2"], "the write, then its inverse once");
    let twice = got(try_send(compensate(&b)).await);
    assert_eq!(
        twice.code.as_deref(),
        Some("ERR_ALREADY_COMPENSATED"),
        "{twice:?}"
    );
    given.extend([done, twice]);
    assert_log_holds(socket, &given).await;
    drop((a, b));
}

/// The AIP-2.1 negotiation relay and RCNS records are shared through the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_and_rcns_records_are_one_across_replicas() {
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );

    // The AIP-2.1 negotiation relay is one relay across the replicas: a message posted on one
    // is delivered (verified by the agirails SDK) from another and is a duplicate at the
    // third, the per-transaction cap holds for posts racing on all three, and a poller paging
    // an inbox misses nothing while posts commit on other replicas.
    relay_replicas(&[&a, &b, &c]);
    relay_expiry(socket).await;
    rcns_shared(socket).await;
    let rcns = rcns_replicas(upstream, socket).await;
    drop(rcns);
}

/// A replica killed (SIGKILL) under load, holding locks: the others carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_under_load_stalls_no_other() {
    let _heavy = HEAVY.lock().await;
    let fleet = Fleet::start().await;
    let (upstream, socket) = (&fleet.upstream, fleet.socket.as_str());
    let (a, b, c) = (
        fleet.replica(socket),
        fleet.replica(socket),
        fleet.replica(&fleet.tls),
    );
    let mut given: Vec<Got> = Vec::new();

    let next = Arc::new(AtomicU64::new(1_000_000));
    let stop = Arc::new(AtomicBool::new(false));
    let loader = tokio::spawn(load(
        vec![a.url(""), b.url(""), c.url("")],
        12,
        next.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = next.load(Ordering::Relaxed);
    let mut c = c;
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let under_kill = loader.await.unwrap();
    let after = next.load(Ordering::Relaxed);
    assert!(
        after > killed_at + 50,
        "the others stalled after the kill: {killed_at} → {after}"
    );
    for g in &under_kill {
        match g.status {
            None | Some(StatusCode::OK) => {}
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            other => panic!("{other:?} {g:?}"),
        }
    }
    let ok_after: usize = under_kill
        .iter()
        .filter(|g| g.status == Some(StatusCode::OK))
        .count();
    assert!(ok_after > 0);
    given.extend(under_kill);
    assert_epochs_rise(upstream, "/items/load-");
    assert_log_holds(socket, &given).await;
}

/// The database stopped as by a crash under load, then back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_stopping_under_load_refuses_writes_and_recovers() {
    let _heavy = HEAVY.lock().await;
    let fleet = Fleet::start().await;
    let (upstream, socket, cluster) = (&fleet.upstream, fleet.socket.as_str(), &fleet.cluster);
    let (a, b) = (fleet.replica(socket), fleet.replica(socket));
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut given: Vec<Got> = Vec::new();
    let rcns = rcns_replicas(upstream, socket).await;
    let next = Arc::new(AtomicU64::new(1_000_000));

    // The database stopped as by a crash, under load, then back: writes get 503 and reach no
    // one while it is down, reads flow, /readyz follows within 5 s, no sidecar restarts.
    let stop = Arc::new(AtomicBool::new(false));
    let loader = tokio::spawn(load(
        vec![a.url(""), b.url("")],
        8,
        next.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.stop_immediate();
    let went = until_ready_is(&a, StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(5)).await;
    // Writes in flight when it went may have been forwarded; none after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let puts = || {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .count()
    };
    let puts_down = puts();
    let read = try_send(
        http::Request::get(a.url("/items/load-1"))
            .body(full(""))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(read.0, StatusCode::OK, "reads flow while the store is down");
    let down = got(try_send(leased_put(
        &b.url(""),
        "/items/down",
        &lease_for(&agent, "/items/down", 1, |_| {}),
        None,
        "{}",
    ))
    .await);
    assert_eq!(
        down.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{down:?}"
    );
    assert_eq!(down.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    assert!(
        down.receipt.is_none(),
        "a receipt with nowhere durable to keep it"
    );
    assert!(
        drift_events(&b)
            .iter()
            .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"),
        "no drift event for a write refused while the store was down"
    );
    rcns_store_down(&rcns, upstream).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        puts(),
        puts_down,
        "a write reached the upstream while the store was down"
    );
    cluster.pg_start();
    let came = until_ready_is(&a, StatusCode::OK, Duration::from_secs(5)).await;
    until_ready_is(&b, StatusCode::OK, Duration::from_secs(5)).await;
    let recovered_from = next.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let under_restart = loader.await.unwrap();
    eprintln!(
        "database down: /readyz 503 after {went:?}, 200 after {came:?} of its return; {} writes, {} × 503",
        under_restart.len(),
        under_restart.iter().filter(|g| g.status == Some(StatusCode::SERVICE_UNAVAILABLE)).count()
    );
    let mut unavailable = 0;
    for g in &under_restart {
        match g.status {
            Some(StatusCode::OK) => {}
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            Some(StatusCode::SERVICE_UNAVAILABLE) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
                unavailable += 1;
            }
            other => panic!("{other:?} {g:?}"),
        }
    }
    assert!(
        unavailable > 0,
        "no write was refused while the database was down"
    );
    let ok_since = try_send(leased_put(
        &a.url(""),
        "/items/after",
        &lease_for(&agent, "/items/after", 1, |_| {}),
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(
        ok_since.0,
        StatusCode::OK,
        "writes resume without a restart"
    );
    assert!(next.load(Ordering::Relaxed) > recovered_from);
    given.extend(under_restart);
    assert_epochs_rise(upstream, "/items/load-");
    assert_log_holds(socket, &given).await;
}

/// The connection cut after `COMMIT` went out: refused as uncertain, never run on a retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_never_run() {
    let fleet = Fleet::start().await;
    let (upstream, socket, cluster) = (&fleet.upstream, fleet.socket.as_str(), &fleet.cluster);
    let replica = |url: &str| fleet.replica(url);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let store = open(socket).await.unwrap();
    let mut given: Vec<Got> = Vec::new();

    // A commit whose answer was lost (the connection cut after COMMIT went out): the write is
    // refused as uncertain and reaches no one, its fence did advance, and a retry under the
    // same lease is refused as stale, never run.
    let cutter = CommitCutter::start(format!("127.0.0.1:{}", cluster.port).parse().unwrap()).await;
    let through_cutter = format!(
        "postgresql://{ROLE}:{PASSWORD}@{}/palisade?sslmode=disable",
        cutter.addr
    );
    let d = replica(&through_cutter);
    let writes_to = |path: &str| {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count()
    };
    // The cutter cuts the next COMMIT the replica sends; a background transaction of the
    // replica (its sweeper) may send one first, and then this write goes through: try again
    // with another resource until the cut meets the write's own COMMIT.
    let mut attempt = 0;
    let (path, lease, lost) = loop {
        attempt += 1;
        let path = format!("/items/uncertain-{attempt}");
        let lease = lease_for(&agent, &path, 3, |_| {});
        let cut_before = cutter.cut.load(Ordering::SeqCst);
        cutter.armed.store(true, Ordering::SeqCst);
        let lost = got(try_send(leased_put(&d.url(""), &path, &lease, None, "{}")).await);
        assert_eq!(
            cutter.cut.load(Ordering::SeqCst),
            cut_before + 1,
            "no commit was cut"
        );
        if lost.status == Some(StatusCode::OK) && attempt < 5 {
            given.push(lost);
            continue;
        }
        break (path, lease, lost);
    };
    assert_eq!(
        lost.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{lost:?}"
    );
    assert_eq!(lost.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    // The store answers again (a new connection), so this refusal has its receipt.
    assert!(lost.receipt.is_some(), "{lost:?}");
    assert!(drift_events(&d)
        .iter()
        .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"));
    assert_eq!(writes_to(&path), 0);
    assert_eq!(
        store.epoch(&format!("{BASE}{path}")).await.unwrap(),
        3,
        "the commit happened"
    );
    let retry = got(try_send(leased_put(&d.url(""), &path, &lease, None, "{}")).await);
    assert_eq!(
        retry.code.as_deref(),
        Some("ERR_STALE_FENCE_EPOCH"),
        "{retry:?}"
    );
    assert_eq!(
        writes_to(&path),
        0,
        "the uncertain write was run on a retry"
    );
    assert!(d.logs().contains("commit outcome unknown"), "{}", d.logs());
    given.push(retry);
    drop(d);
    assert_log_holds(socket, &given).await;
}

/// A write whose resource lock is lost while it is checked is refused, and nothing is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_lock_is_lost_sends_nothing() {
    let fleet = Fleet::start().await;
    let (upstream, socket, cluster) = (&fleet.upstream, fleet.socket.as_str(), &fleet.cluster);
    let replica_with = |url: &str, pre_image: &str| fleet.replica_with(url, pre_image);
    let agent = KeyPair::from_seed(AGENT_SEED);

    // A write whose resource lock is lost while it is checked (the lock's session ended, as
    // by a database restart): refused, nothing sent. The lock is taken before the pre-image
    // GET, which the upstream answers slowly here; the session is ended during that wait.
    let e = replica_with(socket, "fetch");
    let path = "/slow/1500";
    let pre = palisade_policy::digest::Sha256Digest::of(b"slow done").to_string();
    let lease = lease_for(&agent, path, 1, |f| {
        f.insert("pre_image_state_hash".into(), json!(pre));
    });
    let sending = tokio::spawn(try_send(leased_put(&e.url(""), path, &lease, None, "{}")));
    let mut ended = String::from("0");
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        ended = cluster.query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted",
        );
        if ended != "0" {
            break;
        }
    }
    assert_eq!(ended, "1", "the write never took its lock");
    let refused = got(sending.await.unwrap());
    assert_eq!(
        refused.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{refused:?}"
    );
    assert_eq!(refused.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    assert!(
        refused.receipt.is_some(),
        "the store still answers: the refusal has its receipt"
    );
    assert!(drift_events(&e)
        .iter()
        .any(|ev| ev["code"] == "ERR_STORE_UNAVAILABLE"));
    assert!(e.logs().contains("write lock was lost"), "{}", e.logs());
    let sent = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == path)
        .count();
    assert_eq!(sent, 0, "a write went out under a lost lock");
    drop(e);
}

/// Another replica waits for a held lock; a lock whose session ended is not confirmed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_lock_is_the_databases() {
    let fleet = Fleet::start().await;
    let (socket, cluster) = (fleet.socket.as_str(), &fleet.cluster);
    let store = open(socket).await.unwrap();

    // The write lock is the database's: another replica waits for it, gets it when the holder
    // lets go, or when the holder's session ends; a lock whose session ended (a database
    // restart, a cut connection) is not confirmed, so no write is sent under it.
    let other = open(socket).await.unwrap();
    let held = store.lock("r").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(300), other.lock("r")).await;
    assert!(waiting.is_err(), "two replicas held one resource's lock");
    assert!(store.confirm(&held).await.is_ok());
    // Only `held`'s session has the advisory lock granted (the other waits).
    let ended = cluster.query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted",
    );
    assert_eq!(ended, "1");
    let started = tokio::time::Instant::now();
    let got_it = tokio::time::timeout(Duration::from_secs(10), other.lock("r")).await;
    assert!(
        got_it.is_ok(),
        "a dead session's lock was not released within 10 s"
    );
    eprintln!(
        "lock of an ended session released after {:?}",
        started.elapsed()
    );
    let lost = store.confirm(&held).await;
    assert!(
        matches!(&lost, Err(e) if e.to_string().contains("write lock was lost")),
        "{lost:?}"
    );
    drop((held, got_it, other));
}

/// The password is nowhere a sidecar, its metrics or an operator command shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_is_never_shown() {
    let fleet = Fleet::start().await;
    let (socket, cluster, tls) = (fleet.socket.as_str(), &fleet.cluster, fleet.tls.as_str());
    let (a, c) = (fleet.replica(socket), fleet.replica(tls));
    let c_logs = c.logs();

    // The password is nowhere a sidecar, its metrics or an operator command shows.
    let (_, metrics) = admin_get(a.admin, "/metrics").await;
    for (what, text) in [
        ("c's logs", c_logs.as_str()),
        ("a's logs", &a.logs()),
        ("metrics", &metrics),
    ] {
        assert!(!text.contains(PASSWORD), "{what} show the password");
    }
    let wrong = "Wrong-pw-5d1f-not-shown";
    let dir = tempfile::tempdir().unwrap();
    let cfg = |name: &str, url: &str| fleet.config_file(dir.path(), name, url);
    let good = cfg("good", tls);
    let out = Command::new(bin())
        .args(["store", "check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let printed =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("schema version 8"), "{printed}");
    assert!(!printed.contains(PASSWORD));
    let bad = cfg(
        "bad",
        &cluster.tls_url("localhost", wrong, "verify-full", Some(&cluster.ca)),
    );
    for cmd in [
        vec!["store", "check"],
        vec!["audit", "verify"],
        vec!["store", "migrate"],
        vec!["run"],
    ] {
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(bin())
                .args(&cmd)
                .arg("--config")
                .arg(&bad)
                .output(),
        )
        .await
        .expect("refused promptly")
        .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}: {printed}");
        assert!(
            printed.contains("password authentication failed"),
            "{cmd:?}: {printed}"
        );
        assert!(
            !printed.contains(wrong),
            "{cmd:?} shows the password: {printed}"
        );
    }
}

/// verify-full checks the name, verify-ca only the chain; another CA is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_checked_as_libpq_does() {
    let fleet = Fleet::start().await;
    let cluster = &fleet.cluster;

    // TLS as libpq means it: verify-full checks the name, verify-ca only the chain, a chain
    // from another CA is refused, require encrypts without checking.
    let no_name = cluster.tls_url("127.0.0.2", PASSWORD, "verify-full", Some(&cluster.ca));
    let e = open(&no_name)
        .await
        .err()
        .expect("verify-full to a name the certificate lacks")
        .to_string();
    assert!(
        e.contains("certificate") || e.contains("NotValidForName"),
        "{e}"
    );
    assert!(!e.contains(PASSWORD));
    open(&cluster.tls_url("127.0.0.2", PASSWORD, "verify-ca", Some(&cluster.ca)))
        .await
        .unwrap();
    let e = open(&cluster.tls_url(
        "localhost",
        PASSWORD,
        "verify-full",
        Some(&cluster.other_ca),
    ))
    .await
    .err()
    .expect("a chain from another CA")
    .to_string();
    assert!(
        e.contains("certificate") || e.contains("UnknownIssuer"),
        "{e}"
    );
    open(&cluster.tls_url("127.0.0.2", PASSWORD, "require", None))
        .await
        .unwrap();
    let e = open(&cluster.tls_url("localhost", PASSWORD, "verify-full", None))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("need sslrootcert"), "{e}");
}

/// A store keeping nothing sweeps log entries (not their hashes) and expired leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_sweeps_in_rounds_and_audit_verify_starts_at_the_anchor() {
    let fleet = Fleet::start().await;
    let (socket, cluster) = (fleet.socket.as_str(), &fleet.cluster);
    let a = fleet.replica(socket);
    let agent = KeyPair::from_seed(AGENT_SEED);
    for n in 0..5 {
        let path = format!("/items/before-sweep-{n}");
        let lease = lease_for(&agent, &path, 1, |_| {});
        let answer = try_send(leased_put(&a.url(""), &path, &lease, None, "{}")).await;
        assert_eq!(answer.map(|a| a.0), Some(StatusCode::OK));
    }
    let config = std::fs::read_to_string(a.dir.path().join("palisade.toml"))
        .unwrap()
        .replace(
            &format!("url = \"{socket}\""),
            "url_env = \"TEST_PALISADE_STORE_URL\"",
        );
    let audit_config = a.dir.path().join("audit.toml");
    std::fs::write(&audit_config, config).unwrap();

    // Retention: a store that keeps nothing sweeps (in bounded rounds) every receipt and an
    // expired lease's data; the tree keeps their hashes, so `audit verify` still proves it.
    let before: u64 = cluster
        .query("SELECT count(*) FROM log_entries")
        .parse()
        .unwrap();
    let keeping_nothing = PostgresStore::open(
        Connect {
            retention: palisade::store::Retention {
                leases: Duration::ZERO,
                receipts: Some(Duration::ZERO),
            },
            ..connect(socket)
        },
        sidecar_log("palisade"),
    )
    .await
    .unwrap();
    keeping_nothing
        .advance(WriteIntent {
            resource: "swept".into(),
            epoch: 1,
            lease_id: "urn:uuid:expired-long-ago".into(),
            expires_at_ms: 1,
            lease_record: palisade::store::LeaseRecord::committed(
                "urn:uuid:expired-long-ago",
                "swept",
                1,
                1,
            ),
            inverse: Some(b"{}".to_vec()),
            snapshot: None,
        })
        .await
        .unwrap();
    // Escrows go with their lease's data, whatever their state.
    for (id, expires_at_ms) in [("escrow-swept", 1), ("escrow-kept", i64::MAX / 2)] {
        let held = palisade::store::EscrowUpdate {
            id: id.into(),
            expect: None,
            record: palisade::store::EscrowRecord::held(id, "l"),
            expires_at_ms: Some(expires_at_ms),
        };
        assert!(keeping_nothing.escrow_put(held).await.unwrap());
    }
    // A budget key and spend a day old (SPEC §14: no window reaches them), and a fresh spend.
    cluster.query(
        "INSERT INTO budget_keys (key, last_ms) VALUES ('\\x01', 1), ('\\x02', 9223372036854775000);
         INSERT INTO budget_spends (key, at_ms) VALUES ('\\x01', 1), ('\\x02', 9223372036854775000)",
    );
    let mut left = before;
    for _ in 0..100 {
        left = cluster
            .query("SELECT count(*) FROM log_entries")
            .parse()
            .unwrap();
        let budget_rows = cluster.query(
            "SELECT (SELECT count(*) FROM budget_keys) + (SELECT count(*) FROM budget_spends)",
        );
        let lease_rows = cluster
            .query("SELECT count(*) FROM lease_data WHERE lease_id = 'urn:uuid:expired-long-ago'");
        let escrow_rows = cluster.query("SELECT count(*) FROM escrows WHERE id = 'escrow-swept'");
        if left == 0 && lease_rows == "0" && escrow_rows == "0" && budget_rows == "2" {
            break;
        }
        // The sweeper's first round runs at once; the next one after its pause or a full round.
        let _ = keeping_nothing.ready().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "receipts were not swept ({before} before)");
    assert_eq!(
        cluster.query("SELECT encode(key, 'hex') FROM budget_spends"),
        "02",
        "the day-old budget spend was swept, the fresh one kept"
    );
    assert_eq!(keeping_nothing.escrow("escrow-swept").await.unwrap(), None);
    assert!(keeping_nothing
        .escrow("escrow-kept")
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        keeping_nothing
            .inverse("urn:uuid:expired-long-ago")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        keeping_nothing.epoch("swept").await.unwrap(),
        1,
        "a fence is never swept"
    );
    drop(keeping_nothing);
    let write = try_send(leased_put(
        &a.url(""),
        "/items/after-sweep",
        &lease_for(&agent, "/items/after-sweep", 1, |_| {}),
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(write.0, StatusCode::OK);
    let v = audit_verify(&audit_config, socket);
    // The swept entries' hashes stay: the tree of every receipt ever written verifies, with
    // the one written since retained.
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["size"].as_u64(),
            v["retained"].as_u64()
        ),
        (Some(true), Some(before + 1), Some(1)),
        "{v}"
    );
}

/// A database whose schema is newer than this build is refused; `migrate` makes a fresh one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_schema_is_refused_and_a_fresh_database_is_migrated() {
    let fleet = Fleet::start().await;
    let (socket, cluster) = (fleet.socket.as_str(), &fleet.cluster);
    // A database this build made (and migrated).
    drop(open(socket).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let cfg = |name: &str, url: &str| fleet.config_file(dir.path(), name, url);

    // A database whose schema is newer than this build is refused, not written to, by a
    // sidecar, `store check` and `store migrate`; a fresh database is migrated by `migrate`.
    run(cluster
        .psql("palisade")
        .args(["-c", "INSERT INTO palisade_schema VALUES (999)"]));
    let refused = open(socket).await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("newer than this build")),
        "{:?}",
        refused.err()
    );
    let newer = cfg("newer", socket);
    for cmd in [["store", "check"], ["store", "migrate"]] {
        let out = Command::new(bin())
            .args(cmd)
            .arg("--config")
            .arg(&newer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("newer than this build"),
            "{cmd:?}"
        );
    }
    run(cluster
        .psql("postgres")
        .args(["-c", &format!("CREATE DATABASE fresh OWNER {ROLE}")]));
    let fresh = cfg("fresh", &socket.replace("/palisade?", "/fresh?"));
    let out = Command::new(bin())
        .args(["store", "check", "--config"])
        .arg(&fresh)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("palisade store migrate"));
    let out = run(Command::new(bin())
        .args(["store", "migrate", "--config"])
        .arg(&fresh));
    assert_eq!(out.trim(), "ok: postgres schema version 8");
}

/// A freeze posted at one replica holds at the others within 1 s under load (SPEC §14).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_holds_at_every_replica_within_a_second() {
    let _heavy = HEAVY.lock().await;
    let fleet = Fleet::start().await;
    stop::a_freeze_holds_at_every_replica_within_a_second(&fleet).await;
}

/// A write budget is one count for the fleet: three replicas under a 3N-way race forward N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_is_one_count_for_the_fleet() {
    let _heavy = HEAVY.lock().await;
    let fleet = Fleet::start().await;
    stop::a_budget_is_one_count_for_the_fleet(&fleet).await;
    // The same fleet: two approvers at two replicas at once.
    approvals::two_approvers_at_two_replicas(&fleet).await;
}
