//! Bundles swapped under load and by a Kubernetes-style symlink; held writes checked again
//! under the bundle in force.

use super::*;

/// Two versions of one bundle: A accepts any qty ≥ 0, B only qty ≤ 10. A write of qty 50 is
/// accepted under A and refused under B, so each response shows the version that decided it.
fn two_versions(dir: &std::path::Path) -> (Vec<u8>, Vec<u8>, String, String, BundleFiles) {
    let mut b_schema = qty_schema();
    b_schema["properties"]["qty"]["maximum"] = json!(10);
    let b = write_bundle(
        &dir.join("b"),
        "urn:palisade:test:swap/B",
        &[(
            "items",
            "PUT /items/{id}",
            contract(b_schema, "write", "compensable", "optional"),
            None,
        )],
    );
    let a = write_bundle(
        dir,
        "urn:palisade:test:swap/A",
        &[(
            "items",
            "PUT /items/{id}",
            contract(qty_schema(), "write", "compensable", "optional"),
            None,
        )],
    );
    // Both contracts side by side in A's directory: only the lockfile decides.
    for f in std::fs::read_dir(&b.contracts).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), a.contracts.join(f.file_name())).unwrap();
    }
    let lock_a = std::fs::read(&a.lockfile).unwrap();
    let lock_b = std::fs::read(&b.lockfile).unwrap();
    let (da, db) = (a.digest.clone(), b.digest.clone());
    (lock_a, lock_b, da, db, a)
}

/// A sidecar on `files` with the watcher off: the tests swap the lockfile and call reload.
async fn start_swappable(files: &BundleFiles) -> Setup {
    start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &files.rich_toml("watch = false\n"),
    )
}

/// Replaces a file the way careful writers do: a temp file renamed over it.
fn replace(path: &std::path::Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_swaps_under_load_lose_nothing_and_mix_no_versions() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (lock_a, lock_b, digest_a, digest_b, files) = two_versions(bundle_dir.path());
    let s = start_swappable(&files).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let results: std::sync::Arc<std::sync::Mutex<Vec<(u16, String)>>> = Default::default();
    let mut clients = Vec::new();
    for c in 0..3 {
        let (stop, results, url) = (stop.clone(), results.clone(), s.p.url(""));
        clients.push(tokio::spawn(async move {
            let agent = KeyPair::from_seed(AGENT_SEED);
            let client = http1_client();
            let mut n = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let path = format!("/items/{c}-{n}");
                let req = Request::put(format!("{url}{path}"))
                    .header("content-type", "application/json")
                    .header(
                        "agent-compensation-lease",
                        lease_for(&agent, &path, 1, |_| {}),
                    )
                    .header(
                        "agent-compensation-inverse",
                        URL_SAFE_NO_PAD.encode(inverse_for(&path)),
                    )
                    .body(full(r#"{"qty":50}"#))
                    .unwrap();
                let (parts, _) = send(&client, req).await;
                let digest = parts
                    .headers
                    .get("agent-commit-receipt")
                    .map(|_| {
                        receipt_of(&parts.headers)["lockfile_digest"]
                            .as_str()
                            .unwrap_or("")
                            .to_owned()
                    })
                    .unwrap_or_default();
                results
                    .lock()
                    .unwrap()
                    .push((parts.status.as_u16(), digest));
            }
        }));
    }
    for i in 0..200 {
        let (lock, digest) = if i % 2 == 0 {
            (&lock_b, &digest_b)
        } else {
            (&lock_a, &digest_a)
        };
        replace(&files.lockfile, lock);
        let (status, doc) = admin_post(s.p.admin, "/admin/v1/reload").await;
        assert_eq!(status, StatusCode::OK, "{doc}");
        assert_eq!(doc["result"], "applied");
        assert_eq!(doc["digest"], *digest);
        // Each version answers a write before the next swap: the swaps race real traffic.
        let answered = results.lock().unwrap().len();
        wait::until(
            "a write answered after the swap",
            Duration::from_secs(10),
            || results.lock().unwrap().len() > answered,
        )
        .await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let results = results.lock().unwrap().clone();
    let (mut under_a, mut under_b) = (0, 0);
    for (status, digest) in &results {
        match status {
            200 => {
                assert_eq!(*digest, digest_a, "accepted, so decided by A");
                under_a += 1;
            }
            422 => {
                assert_eq!(*digest, digest_b, "refused, so decided by B");
                under_b += 1;
            }
            other => panic!("request failed with {other} during the swaps"),
        }
    }
    assert!(
        under_a > 0 && under_b > 0,
        "A {under_a}, B {under_b} of {}",
        results.len()
    );

    // A bundle that does not compile is refused; the one in force keeps serving.
    replace(&files.lockfile, b"{\"bindingId\": ");
    let (status, doc) = admin_post(s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(doc["result"], "rejected");
    assert!(
        doc["problems"][0].as_str().unwrap().contains("not I-JSON"),
        "{doc}"
    );
    let (_, summary) = admin_get(s.p.admin, "/admin/v1/lockfile").await;
    let summary: Value = serde_json::from_str(&summary).unwrap();
    assert_eq!(summary["digest"], digest_a, "the last good bundle stays");
    let agent = KeyPair::from_seed(AGENT_SEED);
    let (parts, _) = send(
        &http1_client(),
        write(
            &s.p,
            "PUT",
            "/items/after",
            Some(&lease_for(&agent, "/items/after", 1, |_| {})),
            r#"{"qty":50}"#,
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let metrics = admin_get(s.p.admin, "/metrics").await.1;
    assert!(
        metrics.contains(r#"palisade_lockfile_reloads_total{result="rejected"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(&format!(
        r#"palisade_lockfile_info{{digest="{digest_a}"}} 1"#
    )));
    assert!(drift_events(&s.p)
        .iter()
        .any(|e| e["code"] == "ERR_BUNDLE_REJECTED" && e["category"] == "lockfile"));

    // SIGHUP reloads too.
    replace(&files.lockfile, &lock_b);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &s.p.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    wait::until_async("SIGHUP reloads", Duration::from_secs(5), || async {
        let (_, body) = admin_get(s.p.admin, "/admin/v1/lockfile").await;
        serde_json::from_str::<Value>(&body).unwrap()["digest"] == digest_b
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_follows_a_kubernetes_style_symlink_swap() {
    use std::os::unix::fs::symlink;
    let root = tempfile::tempdir().unwrap();
    let versions = tempfile::tempdir().unwrap();
    let (lock_a, lock_b, digest_a, digest_b, files) = two_versions(versions.path());
    // ConfigMap layout: ..<version>/ holds the files, ..data links to it, and each visible
    // name links through ..data.
    for (name, lock) in [("..v1", &lock_a), ("..v2", &lock_b)] {
        let d = root.path().join(name);
        std::fs::create_dir_all(d.join("contracts")).unwrap();
        std::fs::write(d.join("lock.json"), lock).unwrap();
        for f in std::fs::read_dir(&files.contracts).unwrap() {
            let f = f.unwrap();
            std::fs::copy(f.path(), d.join("contracts").join(f.file_name())).unwrap();
        }
    }
    symlink("..v1", root.path().join("..data")).unwrap();
    symlink("..data/lock.json", root.path().join("lock.json")).unwrap();
    symlink("..data/contracts", root.path().join("contracts")).unwrap();
    let rich = format!(
        "[rich]\nlockfile = \"{0}/lock.json\"\ncontracts = \"{0}/contracts\"\n",
        root.path().display()
    );
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &rich,
    );
    let digest_now = |admin| async move {
        let (_, body) = admin_get(admin, "/admin/v1/lockfile").await;
        serde_json::from_str::<Value>(&body).unwrap()["digest"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(digest_now(s.p.admin).await, digest_a);
    // The atomic swap Kubernetes does: a new link renamed over ..data.
    symlink("..v2", root.path().join("..data_tmp")).unwrap();
    std::fs::rename(root.path().join("..data_tmp"), root.path().join("..data")).unwrap();
    wait::until_async("the swap is picked up", Duration::from_secs(10), || async {
        digest_now(s.p.admin).await == digest_b
    })
    .await;
}

/// A held write is shown to its operator with its contract check run again under the bundle in
/// force now, and released only if it still passes: held under A (qty 50 accepted), then B
/// (qty ≤ 10) is loaded; the view says the check fails, with its code and where, and an
/// approval refuses it by that check. The upstream never sees the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_is_checked_again_under_the_bundle_in_force() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (_, lock_b, _, digest_b, files) = two_versions(bundle_dir.path());
    let s = start_swappable(&files).await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, "/items/held", 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
    });
    let inverse = URL_SAFE_NO_PAD.encode(inverse_for("/items/held"));
    let req = write(
        &s.p,
        "PUT",
        "/items/held",
        Some(&lease),
        r#"{"qty":50}"#,
        &[("agent-compensation-inverse", inverse.as_str())],
    );
    let (parts, body) = send(&http1_client(), req).await;
    let held: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(parts.status, StatusCode::ACCEPTED, "{held}");
    let id = held["escrow_id"].as_str().unwrap().to_owned();
    let detail = format!("/admin/v1/escrow/{id}");
    let view = || async {
        let (status, doc) = admin_get(s.p.admin, &detail).await;
        assert_eq!(status, StatusCode::OK, "{doc}");
        serde_json::from_str::<Value>(&doc).unwrap()
    };
    assert_eq!(
        view().await["input_check"],
        json!({"bound": true, "ok": true})
    );

    replace(&files.lockfile, &lock_b);
    let (status, doc) = admin_post(s.p.admin, "/admin/v1/reload").await;
    assert_eq!((status, &doc["digest"]), (StatusCode::OK, &json!(digest_b)));
    let check = view().await["input_check"].clone();
    assert_eq!(check["bound"], true, "{check}");
    assert_eq!(check["ok"], false, "{check}");
    assert_eq!(check["code"], "ERR_CONTRACT_INPUT", "{check}");
    assert_eq!(check["location"], "/qty", "{check}");

    // Approved, it is judged again and refused by the same check, under B, with a receipt
    // and a drift event; the approval answers 409, as nothing was released (issue 54).
    let (status, doc) = admin_post(s.p.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{doc}");
    assert_eq!(doc["state"], "refused", "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{doc}");
    let receipt = &doc["receipt"]["receipt"];
    assert_eq!(receipt["kind"], "rejection", "{doc}");
    assert_eq!(receipt["code"], "ERR_CONTRACT_INPUT", "{doc}");
    assert_eq!(receipt["lockfile_digest"], json!(digest_b), "{doc}");
    // Drift events are written after the answer: wait for it, up to a bound.
    let found = |e: &Value| {
        e["code"] == "ERR_CONTRACT_INPUT"
            && e["bindingId"] == "urn:palisade:test:swap/B"
            && e["violationLocation"] == "/qty"
    };
    wait::until(
        "the refusal's drift event is kept",
        Duration::from_secs(5),
        || drift_events(&s.p).iter().any(found),
    )
    .await;
    assert_eq!(
        writes_to(&s.upstream, "/items/held"),
        0,
        "the held write never reached the upstream"
    );
}
