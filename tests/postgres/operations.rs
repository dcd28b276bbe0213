//! What operators see: passwords never shown, TLS as libpq checks it, retention sweeps and
//! the audit anchor, schema versions, freezes and budgets for the fleet.

use super::*;

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
    let left = std::cell::Cell::new(before);
    let swept = || async {
        left.set(
            cluster
                .query("SELECT count(*) FROM log_entries")
                .parse()
                .unwrap(),
        );
        let budget_rows = cluster.query(
            "SELECT (SELECT count(*) FROM budget_keys) + (SELECT count(*) FROM budget_spends)",
        );
        let lease_rows = cluster
            .query("SELECT count(*) FROM lease_data WHERE lease_id = 'urn:uuid:expired-long-ago'");
        let escrow_rows = cluster.query("SELECT count(*) FROM escrows WHERE id = 'escrow-swept'");
        if left.get() == 0 && lease_rows == "0" && escrow_rows == "0" && budget_rows == "2" {
            return true;
        }
        // The sweeper's first round runs at once; the next one after its pause or a full round.
        let _ = keeping_nothing.ready().await;
        false
    };
    let what = "the sweeper removes the old receipts, lease data, escrow and budget spend";
    support::wait::until_async(what, Duration::from_secs(20), swept).await;
    let left = left.get();
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
