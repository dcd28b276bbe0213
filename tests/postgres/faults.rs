//! Faults under load: a replica killed, the database stopped, a commit's answer lost, a write
//! lock lost; the lock is the database's.

use super::*;

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
        next.clone(),
        unavailable(12),
        stop.clone(),
    ));
    // Under load (60 writes begun), then c is killed holding locks.
    let counter: &AtomicU64 = &next;
    let begun = |n: u64| move || counter.load(Ordering::Relaxed) >= 1_000_000 + n;
    wait::until(
        "60 writes begun under load",
        Duration::from_secs(30),
        begun(60),
    )
    .await;
    let killed_at = next.load(Ordering::Relaxed) - 1_000_000;
    let mut c = c;
    c.child().kill().unwrap();
    c.child().wait().unwrap();
    // The others carry on: 50 more writes within 3 s of the kill (they stalled, otherwise).
    let carry_on = "the others carry on: 50 writes within 3 s of the kill";
    wait::until(carry_on, Duration::from_secs(3), begun(killed_at + 50)).await;
    stop.store(true, Ordering::Relaxed);
    let under_kill = loader.await.unwrap();
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
    let refused = unavailable(8);
    let loader = tokio::spawn(load(
        vec![a.url(""), b.url("")],
        next.clone(),
        refused.clone(),
        stop.clone(),
    ));
    let counter: &AtomicU64 = &next;
    let begun = |n: u64| move || counter.load(Ordering::Relaxed) >= 1_000_000 + n;
    wait::until(
        "40 writes begun under load",
        Duration::from_secs(30),
        begun(40),
    )
    .await;
    cluster.stop_immediate();
    let went = until_ready_is(&a, StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(5)).await;
    // Writes in flight when it went may have been forwarded; none after. Once every load task
    // has been refused, none has a write of before in flight.
    wait::until(
        "every load task refused while the store is down",
        Duration::from_secs(10),
        || refused.iter().all(|n| n.load(Ordering::Relaxed) > 0),
    )
    .await;
    let refusals = || {
        refused
            .iter()
            .map(|n| n.load(Ordering::Relaxed))
            .sum::<u64>()
    };
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
    // The load goes on against the stopped store: 40 more refusals, and none of it went out.
    let so_far = refusals();
    wait::until(
        "40 more writes refused while the store is down",
        Duration::from_secs(10),
        || refusals() >= so_far + 40,
    )
    .await;
    assert_eq!(
        puts(),
        puts_down,
        "a write reached the upstream while the store was down"
    );
    cluster.pg_start();
    let came = until_ready_is(&a, StatusCode::OK, Duration::from_secs(5)).await;
    until_ready_is(&b, StatusCode::OK, Duration::from_secs(5)).await;
    // Load goes on after the return: 50 more writes.
    let recovered_from = next.load(Ordering::Relaxed) - 1_000_000;
    let more = "50 writes begun after the database's return";
    wait::until(more, Duration::from_secs(30), begun(recovered_from + 50)).await;
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
    assert!(next.load(Ordering::Relaxed) - 1_000_000 > recovered_from);
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

/// Ends the sessions holding a write lock; how many. Not the sweeper's transaction lock
/// (key 0x0073_7765_6570_6572: classid 0x0073_7765, objid 0x6570_6572), which a round may
/// hold at the same moment and which made the count 2 in a CI run.
const END_WRITE_LOCKS: &str = "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
     WHERE locktype = 'advisory' AND granted AND NOT (classid = 7567205 AND objid = 1701864818)";

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
    let ended = std::cell::RefCell::new(String::from("0"));
    let terminated = || {
        *ended.borrow_mut() = cluster.query(END_WRITE_LOCKS);
        *ended.borrow() != "0"
    };
    support::wait::until(
        "the write's lock is taken (and ended)",
        Duration::from_secs(3),
        terminated,
    )
    .await;
    let ended = ended.into_inner();
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
    let ended = cluster.query(END_WRITE_LOCKS);
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
