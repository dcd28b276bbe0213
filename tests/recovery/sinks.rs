//! No secret in receipts, events, logs or metrics; drift sinks (file, webhook); the state
//! file's size over ten thousand writes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_body_or_header_secret_reaches_receipts_events_logs_or_metrics() {
    const MARKER: &str = "S3CR3T-MARKER-7f1d";
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start_configured(upstream, dir, "", "");
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    let echo_lease = |epoch: u64, mode: &str| {
        let mode = mode.to_owned();
        lease_for(&agent, "/echo/1", epoch, move |f| {
            // The upstream answers a GET of /echo/1 with no body: the digest of zero bytes.
            f.insert(
                "pre_image_state_hash".into(),
                json!(palisade_policy::digest::Sha256Digest::empty().to_string()),
            );
            f.insert("recovery_mode".into(), json!(mode));
        })
    };
    let secret_headers = [
        ("authorization", format!("Bearer {MARKER}-auth")),
        ("cookie", format!("sid={MARKER}-cookie")),
        ("x-api-key", format!("{MARKER}-key")),
    ];
    let body = json!({"note": MARKER, "qty": 3}).to_string();
    let write = |lease: Option<String>, extra: &[(&str, &str)]| {
        let mut b = Request::put(s.p.url("/echo/1"))
            .header("content-type", "application/json")
            .header(
                "agent-compensation-inverse",
                URL_SAFE_NO_PAD.encode(inverse_for("/echo/1")),
            );
        for (k, v) in &secret_headers {
            b = b.header(*k, v.as_str());
        }
        for (k, v) in extra {
            b = b.header(*k, *v);
        }
        if let Some(l) = lease {
            b = b.header("agent-compensation-lease", l);
        }
        b.body(full(body.clone())).unwrap()
    };

    // Accepted (the echo puts the marker in the response body too), replayed, refused in
    // several ways, dry-run, escrowed and released.
    let (ok, resp_body) = send(
        &client,
        write(
            Some(echo_lease(1, "COMPENSATING_ACTION")),
            &[("idempotency-key", "m-1")],
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert!(
        String::from_utf8_lossy(&resp_body).contains(MARKER),
        "the echo carries it"
    );
    let (replay, _) = send(
        &client,
        write(
            Some(echo_lease(1, "COMPENSATING_ACTION")),
            &[("idempotency-key", "m-1")],
        ),
    )
    .await;
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    for (lease, status) in [
        (None, 428),
        (Some("garbage".to_owned()), 400),
        (Some(echo_lease(1, "COMPENSATING_ACTION")), 409),
    ] {
        let (parts, _) = send(&client, write(lease, &[])).await;
        assert_eq!(parts.status.as_u16(), status);
    }
    let (dry, _) = send(&client, write(Some(echo_lease(2, "DRY_RUN_SHADOW")), &[])).await;
    assert_eq!(dry.status, StatusCode::OK);
    let (held, _) = send(&client, write(Some(echo_lease(2, "HUMAN_ESCROW")), &[])).await;
    assert_eq!(held.status, StatusCode::ACCEPTED);
    let id = held.headers["location"]
        .to_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    let (status, doc) = admin_post(s.p.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "released");
    let (granted, _) = post_json(
        &s.p,
        "/.well-known/ptcl/v1/leases",
        Some(&format!("Bearer {MARKER}-grant")),
        &json!({"sor_target_uri": format!("{BASE}/echo/2"), "recovery_mode": "COMPENSATING_ACTION",
                "t_req_ms": 1000, "inverse_payload": {"method": "DELETE", "path": "/echo/2"}}),
    )
    .await;
    assert_eq!(granted.status, StatusCode::CREATED);

    // The stdout sink writes behind its queue: its events and the access log are out first.
    wait::until(
        "the drift events and access log are written",
        Duration::from_secs(5),
        || {
            let logs = s.p.logs();
            logs.contains("\"eventId\"") && logs.contains("palisade::access")
        },
    )
    .await;
    let metrics = admin_get(s.p.admin, "/metrics").await.1;
    assert!(metrics.contains("palisade_requests_total"));
    let mut p = s.p;
    p.sigterm();
    p.child().wait().unwrap();
    let logs = p.logs();
    assert!(logs.contains("\"eventId\""), "drift events were written");
    assert!(
        logs.contains("palisade::access"),
        "access logs were written"
    );
    let key = sidecar_log("palisade");
    let store =
        palisade::store::embedded::EmbeddedStore::open(&p.dir.path().join("state.redb"), key)
            .unwrap();
    let receipts: Vec<String> = store
        .receipts()
        .await
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r).unwrap())
        .collect();
    // commit, 3 rejections, dry-run, escrow hold, the approval, the release's commit
    assert_eq!(receipts.len(), 8);
    for (what, text) in [
        ("logs and drift events", logs.as_str()),
        ("metrics", metrics.as_str()),
    ]
    .into_iter()
    .chain(receipts.iter().map(|r| ("a receipt", r.as_str())))
    {
        assert!(!text.contains(MARKER), "the marker reached {what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_events_go_to_a_file_sink_when_configured() {
    let files = tempfile::tempdir().unwrap();
    let path = files.path().join("drift.jsonl");
    let s = start(&format!(
        "[drift]\nsinks = [{{ file = \"{}\" }}]\n",
        path.display()
    ))
    .await;
    let (parts, _) = send(
        &http1_client(),
        put(&s.p, "/items/1", None, Some(&inverse_for("/items/1"))),
    )
    .await;
    assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
    wait::until("an event is in the file", Duration::from_secs(5), || {
        std::fs::read_to_string(&path).is_ok_and(|t| !t.is_empty())
    })
    .await;
    let text = std::fs::read_to_string(&path).unwrap();
    let event: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(event["code"], "ERR_LEASE_REQUIRED");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        logged_drift_events(&s.p).is_empty(),
        "stdout is not a sink here"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_sink_batches_and_retries_until_delivered() {
    // The receiver answers 503 twice, then accepts.
    let hook = Receiver::start(2, StatusCode::SERVICE_UNAVAILABLE).await;
    let s = start(&format!(
        "[drift]\nsinks = [{{ webhook = \"{}\" }}]\n",
        hook.url()
    ))
    .await;
    let client = http1_client();
    for i in 0..5 {
        let (parts, _) = send(
            &client,
            put(
                &s.p,
                &format!("/items/{i}"),
                None,
                Some(&inverse_for(&format!("/items/{i}"))),
            ),
        )
        .await;
        assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
    }
    eventually(|| hook.events().len() >= 5, "five events delivered").await;
    let events = hook.events();
    assert_eq!(events.len(), 5, "{events:?}");
    assert!(events.iter().all(|e| e["code"] == "ERR_LEASE_REQUIRED"));
    let ids: std::collections::HashSet<_> = events.iter().map(|e| e["eventId"].clone()).collect();
    assert_eq!(ids.len(), 5, "five distinct events");
    // Sent in fewer POSTs than events (batched), after the two refused tries.
    assert!(hook.attempts() >= 3, "{}", hook.attempts());
    assert!(
        hook.accepted.lock().unwrap().len() < 5,
        "events were batched"
    );
    // Events are in the order they happened (UUID v7 is time-ordered).
    let mut sorted = events.clone();
    sorted.sort_by_key(|e| e["eventId"].as_str().unwrap().to_owned());
    assert_eq!(sorted, events);
    let metrics = admin_get(s.p.admin, "/metrics").await.1;
    assert!(
        metrics.contains("palisade_drift_webhook_batches_total{result=\"retried\"} 2"),
        "{metrics}"
    );
    // Stdout is not a sink here: only the webhook was configured.
    assert!(!s.p.logs().contains("\"eventId\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_that_refuses_drops_the_batch_and_never_slows_requests() {
    // 400 is a permanent refusal: no retry, the batch's events are counted as dropped.
    let hook = Receiver::start(usize::MAX, StatusCode::BAD_REQUEST).await;
    let s = start(&format!(
        "[drift]\nsinks = [{{ webhook = \"{}\" }}]\n",
        hook.url()
    ))
    .await;
    let client = http1_client();
    let started = tokio::time::Instant::now();
    for i in 0..3 {
        let (parts, _) = send(
            &client,
            put(
                &s.p,
                &format!("/items/{i}"),
                None,
                Some(&inverse_for(&format!("/items/{i}"))),
            ),
        )
        .await;
        assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    eventually(|| hook.attempts() >= 1, "the webhook was tried").await;
    let admin = s.p.admin;
    wait::until_async(
        "three events are counted dropped",
        Duration::from_secs(20),
        || async {
            admin_get(admin, "/metrics")
                .await
                .1
                .contains("palisade_drift_events_dropped_total 3")
        },
    )
    .await;
    let metrics = admin_get(admin, "/metrics").await.1;
    assert!(metrics.contains("palisade_drift_webhook_batches_total{result=\"dropped\"}"));
    assert!(
        !metrics.contains("result=\"retried\""),
        "a 400 is not retried"
    );
    // The admin API still has them.
    let (_, page) = admin_get(admin, "/admin/v1/drift-events").await;
    assert_eq!(
        serde_json::from_str::<Value>(&page).unwrap()["events"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

/// Issue 15, bounded state: 10,000 enforced writes from 16 connections leave a state file
/// proportional to what must be kept (receipts, fences, live leases), expired leases' data
/// swept, and the chain whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_enforced_writes_keep_the_state_file_proportional() {
    const WRITERS: usize = 16;
    const WRITES: usize = 10_000;
    // Leases live 2 s and their data goes as soon as they expire, so most are swept while the
    // load runs. pre_image off: the size is the store's, not the pre-image fetch's.
    let s = start("lease_retention = \"0s\"\n[ptcl]\npre_image = \"off\"\n").await;
    let agent = std::sync::Arc::new(KeyPair::from_seed(AGENT_SEED));
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let started = tokio::time::Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let (next, agent, url) = (next.clone(), agent.clone(), s.p.url(""));
        tasks.push(tokio::spawn(async move {
            let client = http1_client();
            let mut ids = Vec::new();
            loop {
                let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if n >= WRITES {
                    return ids;
                }
                let path = format!("/items/load-{n}");
                let lease = lease_for(&agent, &path, 1, |f| {
                    f.insert("t_granted_ms".into(), json!(2000));
                });
                let id = serde_json::from_slice::<Value>(&URL_SAFE_NO_PAD.decode(&lease).unwrap())
                    .unwrap()["lease_id"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let req = Request::put(format!("{url}{path}"))
                    .header("content-type", "application/json")
                    .header("agent-compensation-lease", &lease)
                    .header(
                        "agent-compensation-inverse",
                        URL_SAFE_NO_PAD.encode(inverse_for(&path)),
                    )
                    .body(full(r#"{"qty":1150}"#))
                    .unwrap();
                let resp = client.request(req).await.unwrap();
                assert!(resp.status().is_success(), "write {n}: {}", resp.status());
                ids.push(id);
            }
        }));
    }
    let mut ids = Vec::new();
    for t in tasks {
        ids.extend(t.await.unwrap());
    }
    let elapsed = started.elapsed();
    assert_eq!(ids.len(), WRITES);
    assert_eq!(writes_seen(&s.upstream), WRITES);
    // Let the last leases expire, then a few more writes give the sweeps batches to run in.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    for n in 0..40 {
        let path = format!("/items/nudge-{n}");
        let lease = lease_for(&agent, &path, 1, |_| {});
        let (parts, _) = send(
            &http1_client(),
            keyed_put(&s.p, &path, &lease, r#"{"qty":1}"#, &[]),
        )
        .await;
        assert!(parts.status.is_success());
    }
    let state = s.p.dir.path().join("state.redb");
    let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut journal = state.clone().into_os_string();
    journal.push(".journal");
    let under_load = size(&state) + size(std::path::Path::new(&journal));
    let mut p = s.p;
    p.sigterm();
    p.child().wait().unwrap();
    let stopped = size(&state);
    eprintln!(
        "{WRITES} enforced writes in {:.1}s: state file {under_load} B while running \
         ({} B/write), {stopped} B after a clean stop ({} B/write)",
        elapsed.as_secs_f64(),
        under_load / WRITES as u64,
        stopped / WRITES as u64,
    );
    // What must be kept: 10,040 receipts (≈ 1 KB of JCS each) and fence entries; expired
    // leases' records and inverses are gone. Before the fix this was 28–150 KB per write.
    assert!(
        under_load < 8 * 1024 * WRITES as u64,
        "{under_load} B for {WRITES} writes: the state file grows faster than what it keeps"
    );
    let key = sidecar_log("palisade");
    let store = palisade::store::embedded::EmbeddedStore::open(&state, key).unwrap();
    let mut kept = 0;
    for id in &ids {
        if store.lease_record(id).await.unwrap().is_some()
            || store.inverse(id).await.unwrap().is_some()
        {
            kept += 1;
        }
    }
    assert_eq!(kept, 0, "{kept} expired leases' data not swept");
    assert_eq!(store.receipts().await.unwrap().len(), WRITES + 40);
    for n in [0, WRITES / 2, WRITES - 1] {
        assert_eq!(
            store
                .epoch(&format!("{BASE}/items/load-{n}"))
                .await
                .unwrap(),
            1,
            "fence of write {n}"
        );
    }
    drop(store);
    let out = std::process::Command::new(bin())
        .args(["audit", "verify", "--json", "--config"])
        .arg(p.dir.path().join("palisade.toml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(
        (v["size"].as_u64(), v["retained"].as_u64()),
        (Some(WRITES as u64 + 40), Some(WRITES as u64 + 40))
    );
}
