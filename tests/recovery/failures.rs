//! A failed store, and a SIGKILL under load: no epoch, receipt or inverse lost.

use super::*;

/// How to give the sidecar a mount namespace of its own (`unshare`) and enter it later
/// (`nsenter`, after `-t PID`): as root directly, else through a user namespace.
fn mount_namespace_tools() -> Option<(Vec<&'static str>, Vec<&'static str>)> {
    let works = |args: &[&str]| {
        std::process::Command::new(args[0])
            .args(&args[1..])
            .args(["sh", "-c", "mount -t tmpfs tmpfs /mnt"])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if works(&["unshare", "-m"]) {
        return Some((vec!["unshare", "-m"], vec!["nsenter", "-m"]));
    }
    if works(&["unshare", "-rm"]) {
        return Some((
            vec!["unshare", "-rm"],
            vec!["nsenter", "-U", "-m", "--preserve-credentials"],
        ));
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_store_refuses_writes_with_503_while_reads_flow() {
    // A real I/O failure: the store lives on a small tmpfs mounted in the sidecar's own mount
    // namespace; filling that filesystem makes the store's next growth fail with ENOSPC.
    let Some((unshare, nsenter)) = mount_namespace_tools() else {
        panic!("this test needs mount namespaces (root, or unprivileged user namespaces)");
    };
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    std::fs::create_dir(&store_dir).unwrap();
    let text = write_config(&upstream, dir.path(), "", "").replace(
        &format!("{}/state.redb", dir.path().display()),
        &format!("{}/state.redb", store_dir.display()),
    );
    let script = format!(
        "mount -t tmpfs -o size=3m tmpfs '{}' && exec \"$0\" \"$@\"",
        store_dir.display()
    );
    let mut wrapper = unshare.clone();
    wrapper.extend(["sh", "-c", &script]);
    let p = Palisade::start_wrapped(dir, &text, &wrapper);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();

    let (ok, _) = send(
        &client,
        put(
            &p,
            "/items/1",
            Some(&lease_for(&agent, "/items/1", 1, |_| {})),
            Some(&inverse()),
        ),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "a healthy store first");

    let fill = format!("cat /dev/zero > '{}/filler'", store_dir.display());
    let pid = p.pid().to_string();
    let mut cmd = std::process::Command::new(nsenter[0]);
    cmd.args(&nsenter[1..])
        .args(["-t", &pid, "--", "sh", "-c", &fill]);
    let _ = cmd.stderr(std::process::Stdio::null()).status().unwrap(); // ends with ENOSPC

    // Large inverses. The journal is written in place in zero-filled space it allocated
    // earlier (issue 36), so one may still be durable there (201). The next needs the journal
    // to grow, or redb's commit of what came before needs new pages: that fails, and from
    // then on the store refuses (503, and it stays so).
    let stage = |id: String| {
        let big = json!({"method": "PUT", "path": "/items/1", "body": "x".repeat(700 * 1024)});
        Request::put(p.url(&format!("/.well-known/ptcl/v1/leases/{id}/inverse")))
            .header("content-type", "application/json")
            .body(full(serde_json::to_vec(&big).unwrap()))
            .unwrap()
    };
    let mut statuses = Vec::new();
    let mut refusal = None;
    for i in 0..3 {
        let (parts, body) = send(&client, stage(format!("urn:uuid:big-{i}"))).await;
        statuses.push(parts.status.as_u16());
        if parts.status == StatusCode::SERVICE_UNAVAILABLE && refusal.is_none() {
            refusal = Some(body);
        }
    }
    assert!(
        matches!(statuses[..], [503, 503, 503] | [201, 503, 503]),
        "at most one fits in the journal's room, then refusals: {statuses:?}"
    );
    let doc: Value = serde_json::from_slice(&refusal.unwrap()).unwrap();
    assert_eq!(doc["code"], "ERR_STORE_UNAVAILABLE");

    // Writes are refused with 503 and reach no one.
    let (parts, body) = send(
        &client,
        put(
            &p,
            "/items/2",
            Some(&lease_for(&agent, "/items/2", 1, |_| {})),
            Some(&inverse_for("/items/2")),
        ),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_STORE_UNAVAILABLE");
    assert_eq!(
        writes_seen(&upstream),
        1,
        "only the healthy write reached the upstream"
    );

    // Reads keep flowing.
    let (parts, body) = send(
        &client,
        Request::get(p.url("/items/1")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(&body[..], br#"{"ok":true}"#);
    // Not ready: the store cannot take writes (it stays so until a restart reopens it).
    wait::until_async("readiness turns false", Duration::from_secs(5), || async {
        admin_get(p.admin, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    let (status, body) = admin_get(p.admin, "/readyz").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(body, "store unavailable\n");
    assert_eq!(admin_get(p.admin, "/healthz").await.0, StatusCode::OK);
    assert!(drift_events(&p)
        .iter()
        .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"));
}

/// One accepted write of the crash test: what the client was told.
#[derive(Clone)]
struct Accepted {
    item: String,
    epoch: u64,
    lease: String,
    inverse_qty: u64,
    receipt: Value,
    /// The receipt as the client got it, with its proof and checkpoint.
    envelope: Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_under_load_loses_no_epoch_receipt_or_inverse() {
    let (p, sor, _sor_dir) = start_with_sor().await;
    let accepted: std::sync::Arc<std::sync::Mutex<Vec<Accepted>>> = Default::default();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let url = p.url("");
    let mut writers = Vec::new();
    for w in 0..4 {
        let (accepted, stop, url) = (accepted.clone(), stop.clone(), url.clone());
        writers.push(tokio::spawn(async move {
            let client = http1_client();
            let item = format!("crash-{w}");
            for epoch in 1u64.. {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                let inverse_qty = epoch * 10 + w;
                let inverse = serde_json::to_vec(&json!({
                    "method": "PUT", "path": format!("/api/v2/items/{item}"),
                    "body": {"sku": item, "qty": inverse_qty},
                }))
                .unwrap();
                let lease = sor_lease(
                    sor,
                    &item,
                    epoch,
                    "COMPENSATING_ACTION",
                    &inverse,
                    0,
                    60_000,
                )
                .await;
                let req = Request::put(format!("{url}/api/v2/items/{item}"))
                    .header("content-type", "application/json")
                    .header("agent-compensation-lease", &lease)
                    .header(
                        "agent-compensation-inverse",
                        URL_SAFE_NO_PAD.encode(&inverse),
                    )
                    .body(full(json!({"sku": item, "qty": epoch}).to_string()))
                    .unwrap();
                // After the kill, requests fail: that ends this writer.
                let Ok(resp) = client.request(req).await else {
                    break;
                };
                if resp.status() != StatusCode::OK && resp.status() != StatusCode::CREATED {
                    break;
                }
                let envelope = envelope_of(resp.headers());
                let receipt = verified_receipt(&envelope);
                accepted.lock().unwrap().push(Accepted {
                    item: item.clone(),
                    epoch,
                    lease,
                    inverse_qty,
                    receipt,
                    envelope,
                });
            }
        }));
    }
    // Mid-stream: writes keep arriving while 16 have been accepted.
    let mid = "16 writes accepted before the kill";
    wait::until(mid, Duration::from_secs(30), || {
        accepted.lock().unwrap().len() >= 16
    })
    .await;
    let dir = kill_and_keep_state(p); // SIGKILL mid-stream
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    assert!(
        accepted.len() >= 8,
        "only {} writes before the kill",
        accepted.len()
    );
    eprintln!("{} writes accepted before the kill", accepted.len());

    // The store file as the crash left it: every receipt a client got is in the chain, every
    // committed epoch is there, every staged inverse is there.
    {
        let key = sidecar_log("palisade");
        let store =
            palisade::store::embedded::EmbeddedStore::open(&dir.path().join("state.redb"), key)
                .unwrap();
        let chain: Vec<Value> = store
            .receipts()
            .await
            .unwrap()
            .iter()
            .map(|b| serde_json::from_slice(b).unwrap())
            .collect();
        for a in &accepted {
            assert!(
                chain.contains(&a.receipt),
                "receipt of {} epoch {} lost",
                a.item,
                a.epoch
            );
            let lease: Value = serde_json::from_str(&a.lease).unwrap();
            let id = lease["lease_id"].as_str().unwrap();
            assert!(
                store.inverse(id).await.unwrap().is_some(),
                "inverse of {id} lost"
            );
            let target =
                palisade_policy::target::request_target(BASE, &format!("/api/v2/items/{}", a.item))
                    .unwrap();
            let epoch = store
                .epoch(palisade_policy::target::resource_key(&target))
                .await
                .unwrap();
            assert!(
                epoch >= a.epoch,
                "{}: epoch {epoch} < committed {}",
                a.item,
                a.epoch
            );
        }
    }

    // Restarted on the same store: a lease at any committed epoch is refused, and the last
    // committed write of each item can still be compensated.
    let p = sidecar_for_sor(sor, dir);
    for w in 0..4u64 {
        let item = format!("crash-{w}");
        let Some(last) = accepted
            .iter()
            .filter(|a| a.item == item)
            .max_by_key(|a| a.epoch)
        else {
            continue;
        };
        // The inverse undoes the write to this item (SPEC §5.4), so the fence decides.
        let inverse = format!(r#"{{"method":"DELETE","path":"/api/v2/items/{item}"}}"#);
        let inverse = inverse.as_bytes();
        for epoch in [last.epoch, 1] {
            let l = sor_lease(sor, &item, epoch, "COMPENSATING_ACTION", inverse, 0, 60_000).await;
            let status = sor_write(&p, &item, &l, inverse, "{}").await;
            assert_eq!(
                status,
                StatusCode::CONFLICT,
                "{item}: epoch {epoch} accepted after the crash"
            );
        }
        let (status, doc, _) = compensate(&p, &last.lease).await;
        assert_eq!(status, StatusCode::OK, "{item}: {doc}");
        assert_receipt_verifies(&doc["receipt"], "compensation");
        assert_eq!(
            sor_get(sor, &item).await.1["qty"],
            last.inverse_qty,
            "{item} restored"
        );
    }

    // The log across the crash, checked by an implementation that is not ours: every receipt
    // a client got before the kill is in it, proven in the checkpoint it came with, and the
    // newest checkpoint a client held before the kill is consistent with today's tree.
    let mirror = tempfile::tempdir().unwrap();
    let envelopes: Vec<Value> = accepted.iter().map(|a| a.envelope.clone()).collect();
    let size = support::log_mirror::mirror(p.admin, mirror.path(), &envelopes).await;
    let held = envelopes
        .iter()
        .map(|e| e["checkpoint"].as_str().unwrap())
        .max_by_key(|n| n.lines().nth(1).unwrap().parse::<u64>().unwrap())
        .unwrap();
    let held_size: u64 = held.lines().nth(1).unwrap().parse().unwrap();
    std::fs::write(mirror.path().join("old-checkpoint"), held).unwrap();
    let (status, proof) = support::log_mirror::admin_bytes(
        p.admin,
        &format!("/admin/v1/log/consistency?old={held_size}&new={size}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    std::fs::write(mirror.path().join("consistency.json"), proof).unwrap();
    let v = support::log_mirror::python_verdict(mirror.path());
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["envelopes"].as_u64(), Some(envelopes.len() as u64), "{v}");

    // And the whole log, across the crash, verifies.
    let config = p.dir.path().join("palisade.toml");
    p.sigterm();
    let mut p = p;
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
}
