//! One epoch, one write; epochs and receipts across a restart.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_with_one_epoch_forward_exactly_one() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let req = put(
            &s.p,
            "/items/7",
            Some(&lease_for(&agent, "/items/7", 1, |_| {})),
            Some(&inverse_for("/items/7")),
        );
        let client = client.clone();
        tasks.push(tokio::spawn(
            async move { send(&client, req).await.0.status },
        ));
    }
    let mut ok = 0;
    let mut conflict = 0;
    for t in tasks {
        match t.await.unwrap() {
            StatusCode::OK => ok += 1,
            StatusCode::CONFLICT => conflict += 1,
            other => panic!("unexpected {other}"),
        }
    }
    assert_eq!((ok, conflict), (1, 63));
    assert_eq!(writes_seen(&s.upstream), 1);

    // A spread of epochs, sent concurrently: the upstream sees strictly increasing epochs.
    let mut tasks = Vec::new();
    for epoch in [5u64, 3, 9, 2, 8, 4, 12, 6, 10, 11] {
        let req = put(
            &s.p,
            "/items/8",
            Some(&lease_for(&agent, "/items/8", epoch, |_| {})),
            Some(&inverse_for("/items/8")),
        );
        let client = client.clone();
        tasks.push(tokio::spawn(
            async move { send(&client, req).await.0.status },
        ));
    }
    for t in tasks {
        let st = t.await.unwrap();
        assert!(st == StatusCode::OK || st == StatusCode::CONFLICT, "{st}");
    }
    let epochs: Vec<u64> = s
        .upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == "/items/8")
        .map(|r| {
            r.headers["agent-fence-token"]
                .to_str()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert!(!epochs.is_empty());
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs forwarded out of order: {epochs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_epochs_and_receipts_survive_a_restart() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().to_owned();
    let s = start_in(upstream, dir, "");
    let agent = KeyPair::from_seed(AGENT_SEED);
    let l = lease_for(&agent, "/items/3", 5, |_| {});
    let (parts, _) = send(
        &http1_client(),
        put(&s.p, "/items/3", Some(&l), Some(&inverse_for("/items/3"))),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    // Restart on the same store (copy the temp dir's files into a new dir for the new process).
    let Setup { upstream, mut p } = s;
    p.child().kill().unwrap(); // SIGKILL: no clean shutdown
    p.child().wait().unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    copy_state(&keep, dir2.path());
    drop(p);
    let s = start_in(upstream, dir2, "");
    for epoch in [5, 4] {
        let l = lease_for(&agent, "/items/3", epoch, |_| {});
        let (parts, body) = send(
            &http1_client(),
            put(&s.p, "/items/3", Some(&l), Some(&inverse_for("/items/3"))),
        )
        .await;
        assert_eq!(
            parts.status,
            StatusCode::CONFLICT,
            "epoch {epoch} after restart"
        );
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["current_epoch"], 5);
    }
    let l = lease_for(&agent, "/items/3", 6, |_| {});
    let (parts, _) = send(
        &http1_client(),
        put(&s.p, "/items/3", Some(&l), Some(&inverse_for("/items/3"))),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    // Stop it and audit the chain across both runs: 1 commit, 2 rejections, 1 commit.
    let mut p = s.p;
    let config = p.dir.path().join("palisade.toml");
    p.sigterm();
    p.child().wait().unwrap();
    let o = std::process::Command::new(support::bin())
        .args(["audit", "verify", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("receipt log of 4 entries"),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}
