//! Once across replicas: an epoch, an idempotency key, an escrow approval, a compensation;
//! the relay's and RCNS's records.

use super::*;

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
