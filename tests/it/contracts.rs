//! RICH bindings on the write path (SPEC §5.2 checks 8–9, §5.6, §7) through the real binary and
//! a real upstream: each contract refusal with its code, signed receipt (carrying the lockfile
//! digest) and drift event, and that the upstream saw nothing; bundles that must not load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::writes::*;
use support::*;

fn write(
    p: &Palisade,
    method: &str,
    path: &str,
    lease: Option<&str>,
    body: &str,
    headers: &[(&str, &str)],
) -> Request<BoxBody> {
    let mut b = Request::builder()
        .method(method)
        .uri(p.url(path))
        .header("content-type", "application/json")
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    if let Some(l) = lease {
        b = b.header("agent-compensation-lease", l);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(full(body.to_owned())).unwrap()
}

fn writes_to(u: &Upstream, path: &str) -> usize {
    u.requests()
        .iter()
        .filter(|s| s.method != "GET" && s.path_and_query == path)
        .count()
}

/// The bundle of the contract tests: items (compensable, qty ≥ 0), an irreversible payment,
/// orders that need an idempotency key, a search that only reads.
fn test_bundle(dir: &std::path::Path) -> BundleFiles {
    write_bundle(
        dir,
        "urn:palisade:test:erp/1",
        &[
            (
                "items",
                "PUT /items/{id}",
                contract(qty_schema(), "write", "compensable", "optional"),
                None,
            ),
            (
                "pay",
                "POST /invoices/{id}/pay",
                contract(json!("unknown"), "write", "irreversible", "optional"),
                None,
            ),
            (
                "orders",
                "POST /orders",
                contract(json!("unknown"), "write", "compensable", "required"),
                None,
            ),
            (
                "search",
                "POST /search",
                contract(qty_schema(), "read", "reversible", "none"),
                None,
            ),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contract_refusals_carry_code_receipt_and_drift_event_and_reach_no_one() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = test_bundle(bundle_dir.path());
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &b.rich_toml(""),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    let lease = |path: &str, mode: &str| {
        let mode = mode.to_owned();
        lease_for(&agent, path, 1, move |f| {
            f.insert("recovery_mode".into(), json!(mode));
        })
    };

    // Check 9: the body breaks structural.input.
    let bad_body = r#"{"qty":-987654}"#;
    let (parts, body) = send(
        &client,
        write(
            &s.p,
            "PUT",
            "/items/1",
            Some(&lease("/items/1", "COMPENSATING_ACTION")),
            bad_body,
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT");
    assert_eq!(doc["violationLocation"], "/qty");
    assert!(
        !doc.to_string().contains("987654"),
        "no value echoed: {doc}"
    );
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(doc["receipt"]["receipt"]["lockfile_digest"], b.digest);
    // Not JSON at all.
    let (parts, body) = send(
        &client,
        write(
            &s.p,
            "PUT",
            "/items/1",
            Some(&lease("/items/1", "COMPENSATING_ACTION")),
            "qty=5",
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "ERR_CONTRACT_INPUT"
    );

    // Check 8: an irreversible operation takes only HUMAN_ESCROW or DRY_RUN_SHADOW.
    let (parts, body) = send(
        &client,
        write(
            &s.p,
            "POST",
            "/invoices/9/pay",
            Some(&lease("/invoices/9/pay", "COMPENSATING_ACTION")),
            "{}",
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_RECOVERY_MODE");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    let (parts, _) = send(
        &client,
        write(
            &s.p,
            "POST",
            "/invoices/9/pay",
            Some(&lease("/invoices/9/pay", "HUMAN_ESCROW")),
            "{}",
            &[],
        ),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::ACCEPTED,
        "held for an operator instead"
    );

    // SPEC §5.6: the contract requires an Idempotency-Key.
    let (parts, body) = send(
        &client,
        write(
            &s.p,
            "POST",
            "/orders",
            Some(&lease("/orders", "COMPENSATING_ACTION")),
            "{}",
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_IDEMPOTENCY_KEY_REQUIRED");
    assert_receipt_verifies(&doc["receipt"], "rejection");

    // SPEC §4: with a bundle, a write nothing binds is refused under the default "deny".
    let (parts, body) = send(
        &client,
        write(
            &s.p,
            "PUT",
            "/elsewhere/1",
            Some(&lease("/elsewhere/1", "COMPENSATING_ACTION")),
            "{}",
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "ERR_UNBOUND_OPERATION"
    );

    assert_eq!(
        writes_seen(&s.upstream),
        0,
        "no refused write reached the upstream"
    );

    // The conforming requests go through: a write with its lease, the keyed order, and a
    // search whose side effect is "read" needs no lease at all (its input still checked).
    let (parts, _) = send(
        &client,
        write(
            &s.p,
            "PUT",
            "/items/1",
            Some(&lease("/items/1", "COMPENSATING_ACTION")),
            r#"{"qty":5}"#,
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let receipt = receipt_of(&parts.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(receipt["lockfile_digest"], b.digest);
    let (parts, _) = send(
        &client,
        write(
            &s.p,
            "POST",
            "/orders",
            Some(&lease("/orders", "COMPENSATING_ACTION")),
            "{}",
            &[("idempotency-key", "o-1")],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let (parts, _) = send(
        &client,
        write(&s.p, "POST", "/search", None, r#"{"qty":1}"#, &[]),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    assert!(
        !parts.headers.contains_key("agent-commit-receipt"),
        "a read makes no receipt"
    );
    let (parts, body) = send(
        &client,
        write(&s.p, "POST", "/search", None, r#"{"qty":"x"}"#, &[]),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(writes_to(&s.upstream, "/items/1"), 1);
    assert_eq!(writes_to(&s.upstream, "/orders"), 1);
    assert_eq!(writes_to(&s.upstream, "/search"), 1);
    assert_eq!(writes_to(&s.upstream, "/invoices/9/pay"), 0);

    // Drift events name the binding, the contract and the location; never the value.
    let events = drift_events(&s.p);
    let input = events
        .iter()
        .find(|e| e["code"] == "ERR_CONTRACT_INPUT" && e["violationLocation"] == "/qty")
        .expect("a contract-input drift event");
    assert_eq!(input["category"], "structural");
    assert_eq!(input["bindingId"], b.binding_id);
    assert!(input["expectedDigest"]
        .as_str()
        .unwrap()
        .starts_with("sha-256:"));
    assert_eq!(
        input["evidenceDigest"],
        format!("sha-256:{}", Sha256Digest::of(bad_body.as_bytes()).to_hex())
    );
    for code in [
        "ERR_RECOVERY_MODE",
        "ERR_IDEMPOTENCY_KEY_REQUIRED",
        "ERR_UNBOUND_OPERATION",
    ] {
        assert!(
            events.iter().any(|e| e["code"] == code),
            "no drift event for {code}"
        );
    }
    assert!(!s.p.logs().contains("987654"), "a body reached the logs");

    // The admin API pages through the same events with a cursor.
    let (status, first) = admin_get(s.p.admin, "/admin/v1/drift-events?limit=2").await;
    assert_eq!(status, StatusCode::OK);
    let first: Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["events"].as_array().unwrap().len(), 2);
    let (_, rest) = admin_get(
        s.p.admin,
        &format!("/admin/v1/drift-events?after={}&limit=1000", first["next"]),
    )
    .await;
    let rest: Value = serde_json::from_str(&rest).unwrap();
    let all: Vec<&Value> = first["events"]
        .as_array()
        .unwrap()
        .iter()
        .chain(rest["events"].as_array().unwrap())
        .collect();
    assert_eq!(all.len(), events.len(), "every event, once");
    assert_eq!(all[0]["eventId"], events[0]["eventId"]);
    let (_, empty) = admin_get(
        s.p.admin,
        &format!("/admin/v1/drift-events?after={}", rest["next"]),
    )
    .await;
    assert_eq!(
        serde_json::from_str::<Value>(&empty).unwrap()["events"],
        json!([])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_that_does_not_compile_stops_the_start_and_names_every_problem() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let mut redos = qty_schema();
    redos["properties"]["sku"] = json!({"type": "string", "pattern": "^(a+)+$"});
    let b = write_bundle(
        bundle_dir.path(),
        "urn:palisade:test:bad/1",
        &[(
            "items",
            "PUT /items/{id}",
            contract(redos, "write", "compensable", "optional"),
            None,
        )],
    );
    // A second problem: a capability whose contract file is missing.
    let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    lock["capabilities"]["ghost"] = json!({"protocol": "http", "operation": "PUT /ghost",
        "contractDigest": format!("sha-256:{}", "ab".repeat(32))});
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let text = write_config(&upstream, dir.path(), "", &b.rich_toml(""));
    let cfg = dir.path().join("palisade.toml");
    std::fs::write(&cfg, format!("[admin]\naddr = \"127.0.0.1:0\"\n{text}")).unwrap();
    for args in [vec!["run", "--config"], vec!["config", "check", "--config"]] {
        let o = std::process::Command::new(bin())
            .args(&args)
            .arg(&cfg)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("/structural/input/properties/sku/pattern"),
            "{err}"
        );
        assert!(err.contains("nests unbounded"), "{err}");
        assert!(err.contains("/capabilities/ghost/contractDigest"), "{err}");
    }
    // `lock check` says the same, with exit 1 (the input was refused).
    let o = lock_check(&b.lockfile, &b.contracts);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("ghost"));
}

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
        tokio::time::sleep(Duration::from_millis(5)).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn output_contracts_under_each_drift_policy() {
    let fallback = Upstream::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    // The upstream answers `{"ok":true}`; these contracts want an `id` it never sends.
    let wants_id = json!({"$schema": DIALECT, "type": "object", "required": ["id"]});
    let wants_ok = json!({"$schema": DIALECT, "type": "object", "required": ["ok"],
                          "properties": {"ok": {"type": "boolean"}}});
    let read =
        |out: &Value| contract_with_output(json!("unknown"), out.clone(), "read", "reversible");
    let policy = |p: &str| Some(json!({"onDrift": p, "fallback": fallback.url()}));
    let b = write_bundle(
        bundle_dir.path(),
        "urn:palisade:test:output/1",
        &[
            ("ok", "GET /ok/{id}", read(&wants_ok), policy("fail-closed")),
            ("fc", "GET /fc/{id}", read(&wants_id), policy("fail-closed")),
            ("q", "GET /q/{id}", read(&wants_id), policy("quarantine")),
            ("n", "GET /n/{id}", read(&wants_id), policy("notify")),
            (
                "f",
                "GET /f/{id}",
                read(&wants_id),
                policy("qualified-fallback"),
            ),
            (
                "fw",
                "PUT /fw/{id}",
                contract_with_output(json!("unknown"), wants_id.clone(), "write", "compensable"),
                policy("qualified-fallback"),
            ),
        ],
    );
    let quarantine = bundle_dir.path().join("quarantine");
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &format!(
            "{}[drift]\nquarantine_dir = \"{}\"\n",
            b.rich_toml(""),
            quarantine.display()
        ),
    );
    let get = |path: &str| Request::get(s.p.url(path)).body(full("")).unwrap();
    let client = http1_client();
    let upstream_body = br#"{"ok":true}"#;

    let (parts, body) = send(&client, get("/ok/1")).await;
    assert_eq!(parts.status, StatusCode::OK, "a conforming answer passes");
    assert_eq!(&body[..], upstream_body);

    let (parts, body) = send(&client, get("/fc/1")).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_CONTRACT_OUTPUT");
    assert_eq!(doc["violationLocation"], "");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert!(
        !doc.to_string().contains("\"ok\":true"),
        "the body is not echoed"
    );

    let (parts, _) = send(&client, get("/q/1")).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let file = quarantine.join(Sha256Digest::of(upstream_body).to_hex());
    assert_eq!(
        std::fs::read(&file).unwrap(),
        upstream_body,
        "quarantined as received"
    );
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );

    let (parts, body) = send(&client, get("/n/1")).await;
    assert_eq!(parts.status, StatusCode::OK, "notify passes it on");
    assert_eq!(&body[..], upstream_body);

    let (parts, _) = send(&client, get("/f/1")).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(parts.headers["agent-fallback"], "1");
    assert_eq!(
        fallback
            .requests()
            .iter()
            .filter(|r| r.path_and_query == "/f/1")
            .count(),
        1,
        "the read went to the fallback deployment"
    );

    // A write is never sent twice: its bad answer is refused, not retried elsewhere.
    let agent = KeyPair::from_seed(AGENT_SEED);
    let (parts, _) = send(
        &client,
        write(
            &s.p,
            "PUT",
            "/fw/1",
            Some(&lease_for(&agent, "/fw/1", 1, |_| {})),
            "{}",
            &[],
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    assert_eq!(writes_to(&s.upstream, "/fw/1"), 1);
    assert!(
        fallback.requests().iter().all(|r| r.method == "GET"),
        "no write reached the fallback"
    );

    let events = drift_events(&s.p);
    let action_for = |op: &str| {
        events
            .iter()
            .find(|e| e["code"] == "ERR_CONTRACT_OUTPUT" && e["observedIdentifier"] == op)
            .map(|e| e["actionTaken"].as_str().unwrap().to_owned())
    };
    assert_eq!(action_for("GET /fc/1").as_deref(), Some("blocked"));
    assert_eq!(action_for("GET /q/1").as_deref(), Some("quarantined"));
    assert_eq!(action_for("GET /n/1").as_deref(), Some("notify"));
    assert_eq!(action_for("GET /f/1").as_deref(), Some("fallback"));
    assert_eq!(action_for("PUT /fw/1").as_deref(), Some("blocked"));
    assert!(action_for("GET /ok/1").is_none());
    let e = events
        .iter()
        .find(|e| e["observedIdentifier"] == "GET /q/1")
        .unwrap();
    assert_eq!(e["category"], "structural");
    assert_eq!(
        e["evidenceDigest"],
        format!("sha-256:{}", Sha256Digest::of(upstream_body).to_hex())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_too_large_to_check_is_refused_not_passed_unchecked() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let any_object = json!({"$schema": DIALECT, "type": "object"});
    let b = write_bundle(
        bundle_dir.path(),
        "urn:palisade:test:big/1",
        &[(
            "big",
            "GET /big/{n}",
            contract_with_output(json!("unknown"), any_object, "read", "reversible"),
            None,
        )],
    );
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &format!("[limits]\nmax_response = \"1KiB\"\n{}", b.rich_toml("")),
    );
    let (parts, body) = send(
        &http1_client(),
        Request::get(s.p.url("/big/4096")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_RESPONSE_TOO_LARGE");
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
