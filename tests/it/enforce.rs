//! Write enforcement through the real binary against a real upstream (SPEC §5.2, §5.3, §5.5):
//! each refusal's status, code, signed rejection receipt and drift event, and that no write
//! reached the upstream; the fence invariant under concurrency; epochs across a restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use palisade_policy::lease;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_write_is_forwarded_once_with_receipt_and_fence_token() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let l = lease_for(&agent, "/items/1", 1, |_| {});
    let (parts, body) = send(
        &http1_client(),
        put(&s.p, "/items/1", Some(&l), Some(&inverse_for("/items/1"))),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(parts.headers["agent-fence-token"], "1");
    let envelope = envelope_of(&parts.headers);
    assert_receipt_verifies(&envelope, "commit");
    // The first entry of the log, proven in a tree of one.
    assert_eq!(
        (
            envelope["index"].as_u64(),
            envelope["inclusion"].as_array().map(Vec::len)
        ),
        (Some(0), Some(0))
    );
    let receipt = &envelope["receipt"];
    assert_eq!(receipt["receipt_version"], "2.0");
    assert_eq!(receipt["cas_fence_epoch"], 1);
    assert_eq!(receipt["upstream_status"], 200);
    assert_eq!(receipt["sor_target_uri"], format!("{BASE}/items/1"));
    assert_eq!(
        receipt["pre_image_state_hash"],
        upstream_state().to_string()
    );
    assert!(
        receipt.get("prev").is_none() && receipt.get("signature").is_none(),
        "the checkpoint is what is signed"
    );
    // The body's value in any JSON spelling (its digits alone may occur in a digest).
    let text = receipt.to_string();
    assert!(
        !text.contains(":1150") && !text.contains("\"1150\""),
        "no body in a receipt"
    );

    let seen = s.upstream.requests();
    assert_eq!(seen.len(), 2, "the pre-image GET, then the write");
    assert_eq!(seen[0].method, "GET");
    assert_eq!(seen[1].method, "PUT");
    assert_eq!(seen[1].headers["agent-fence-token"], "1");
    assert!(!seen[1].headers.contains_key("agent-compensation-lease"));
    assert!(!seen[1].headers.contains_key("agent-compensation-inverse"));

    // Reads of the fenced resource carry its epoch; reads of others do not.
    let (parts, _) = send(
        &http1_client(),
        Request::get(s.p.url("/items/1")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.headers["agent-fence-token"], "1");
    // Another spelling of the same resource (a query, an escaped unreserved character) names
    // the same key, whichever way the key is computed (issue 19 added a fast way for reads).
    for spelling in ["/items/1?view=full", "/items/%31", "/items//1"] {
        let (parts, _) = send(
            &http1_client(),
            Request::get(s.p.url(spelling)).body(full("")).unwrap(),
        )
        .await;
        assert_eq!(parts.headers["agent-fence-token"], "1", "{spelling}");
    }
    let (parts, _) = send(
        &http1_client(),
        Request::get(s.p.url("/items/2?x=1"))
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert!(!parts.headers.contains_key("agent-fence-token"));
    assert_eq!(admin_get(s.p.admin, "/readyz").await.0, StatusCode::OK);

    // The same lease again: its epoch is spent.
    let (parts, _) = send(
        &http1_client(),
        put(&s.p, "/items/1", Some(&l), Some(&inverse_for("/items/1"))),
    )
    .await;
    assert_eq!(parts.status, StatusCode::CONFLICT);
    assert_eq!(
        writes_seen(&s.upstream),
        1,
        "a lease's write is forwarded at most once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_code_receipt_and_drift_event_and_reaches_no_one() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let stranger = KeyPair::from_seed([99; 32]);
    let now = palisade::clock::WallClock::now_ms();
    let inv = inverse();
    let wrong_inv = br#"{"method":"DELETE","path":"/items/1"}"#.to_vec();
    // An inverse the lease names exactly, whose path has no canonical form: it could never
    // be sent, so it is refused before the write (issue 15), not found out at compensation.
    let uncanonical_inv = br#"{"method":"PUT","path":"/items/%2F1","body":{"qty":1}}"#.to_vec();
    let uncanonical_digest =
        Sha256Digest::of(&palisade_policy::canon::canonicalize(&uncanonical_inv, 8).unwrap());
    let mut tampered: Value = serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(lease_for(&agent, "/items/1", 1, |_| {}))
            .unwrap(),
    )
    .unwrap();
    tampered["cas_fence_epoch"] = json!(2);
    let tampered = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&tampered).unwrap());

    /// name, lease header, inline inverse, expected status, expected code
    type Row<'a> = (&'a str, Option<String>, Option<&'a [u8]>, u16, &'a str);
    let rows: Vec<Row<'_>> = vec![
        ("no lease", None, Some(&inv), 428, "ERR_LEASE_REQUIRED"),
        (
            "garbage",
            Some("!!not-a-lease".into()),
            Some(&inv),
            400,
            "ERR_LEASE_MALFORMED",
        ),
        (
            "stranger's key",
            Some(lease_for(&stranger, "/items/1", 1, |_| {})),
            Some(&inv),
            403,
            "ERR_LEASE_UNTRUSTED_KEY",
        ),
        (
            "tampered",
            Some(tampered),
            Some(&inv),
            403,
            "ERR_LEASE_SIGNATURE",
        ),
        (
            "window",
            Some(lease_for(&agent, "/items/1", 1, |f| {
                f.insert("t_req_ms".into(), json!(70000));
            })),
            Some(&inv),
            403,
            "ERR_RECOVERY_WINDOW",
        ),
        (
            "future",
            Some(lease_for(&agent, "/items/1", 1, |f| {
                f.insert(
                    "issued_at".into(),
                    json!(lease::format_rfc3339_ms(now + 3_600_000)),
                );
            })),
            Some(&inv),
            403,
            "ERR_CLOCK_SKEW",
        ),
        (
            "expired",
            Some(lease_for(&agent, "/items/1", 1, |f| {
                f.insert(
                    "issued_at".into(),
                    json!(lease::format_rfc3339_ms(now - 120_000)),
                );
            })),
            Some(&inv),
            403,
            "ERR_LEASE_EXPIRED",
        ),
        (
            "other target",
            Some(lease_for(&agent, "/items/2", 1, |_| {})),
            Some(&inv),
            403,
            "ERR_TARGET_MISMATCH",
        ),
        (
            "no inverse",
            Some(lease_for(&agent, "/items/1", 1, |_| {})),
            None,
            428,
            "ERR_INVERSE_NOT_STAGED",
        ),
        (
            "wrong inverse",
            Some(lease_for(&agent, "/items/1", 1, |_| {})),
            Some(&wrong_inv),
            403,
            "ERR_INVERSE_DIGEST",
        ),
        (
            "state changed",
            Some(lease_for(&agent, "/items/1", 1, |f| {
                f.insert(
                    "pre_image_state_hash".into(),
                    json!(Sha256Digest::empty().to_string()),
                );
            })),
            Some(&inv),
            409,
            "ERR_STALE_FENCE_EPOCH",
        ),
        (
            "inverse path without a canonical form",
            Some(lease_for(&agent, "/items/1", 1, |f| {
                f.insert(
                    "inverse_payload_jcs_hash".into(),
                    json!(uncanonical_digest.to_string()),
                );
            })),
            Some(&uncanonical_inv),
            428,
            "ERR_INVERSE_NOT_STAGED",
        ),
    ];
    let client = http1_client();
    for (name, l, inv, status, code) in &rows {
        let (parts, body) = send(&client, put(&s.p, "/items/1", l.as_deref(), *inv)).await;
        assert_eq!(
            parts.status.as_u16(),
            *status,
            "{name}: {}",
            String::from_utf8_lossy(&body)
        );
        assert_eq!(
            parts.headers["content-type"], "application/problem+json",
            "{name}"
        );
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["code"], *code, "{name}");
        assert_receipt_verifies(&doc["receipt"], "rejection");
        assert_eq!(doc["receipt"]["receipt"]["code"], *code, "{name}");
        let header: Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(parts.headers["agent-commit-receipt"].as_bytes())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            header, doc["receipt"],
            "{name}: header and body carry the same receipt"
        );
    }
    let pre_image_mismatch = send(
        &client,
        put(&s.p, "/items/1", rows[10].1.as_deref(), Some(&inv)),
    )
    .await;
    let doc: Value = serde_json::from_slice(&pre_image_mismatch.1).unwrap();
    assert_eq!(doc["reason"], "pre-image-mismatch");
    assert_eq!(doc["current_epoch"], 0);
    assert_eq!(pre_image_mismatch.0.headers["agent-fence-token"], "0");

    assert_eq!(
        writes_seen(&s.upstream),
        0,
        "no refused write reached the upstream"
    );
    // One drift event per refusal, each naming its code, none carrying the body.
    // Stdout is a sink behind a queue: its lines come a moment after the answers.
    let logged = |code: &str| logged_drift_events(&s.p).iter().any(|e| e["code"] == code);
    wait::until(
        "every refusal's drift event is on stdout",
        std::time::Duration::from_secs(5),
        || rows.iter().all(|row| logged(row.4)),
    )
    .await;
    let events = logged_drift_events(&s.p);
    for (name, _, _, _, code) in &rows {
        assert!(
            events.iter().any(|e| e["code"] == *code),
            "{name}: no drift event for {code}"
        );
    }
    assert!(events
        .iter()
        .all(|e| e["actionTaken"] == "blocked" && e["traceId"].as_str().unwrap().len() == 32));
    assert!(events.iter().any(|e| e["category"] == "fence"));
    // The body is `{"qty":1150}`: its value in any JSON spelling, not the bare digits, which a
    // random trace or event id holds now and then.
    let logs = s.p.logs();
    assert!(
        !logs.contains(":1150") && !logs.contains("\"1150\""),
        "a request body reached the logs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_writes_are_refused_before_any_lease_check_when_denied() {
    let s = start("[rich]\nunbound_writes = \"deny\"\n").await;
    let (parts, body) = send(&http1_client(), put(&s.p, "/items/1", None, None)).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_UNBOUND_OPERATION");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert!(s.upstream.requests().is_empty());
    // Reads still flow.
    let (parts, _) = send(
        &http1_client(),
        Request::get(s.p.url("/items/1")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
}

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
    p.child.kill().unwrap(); // SIGKILL: no clean shutdown
    p.child.wait().unwrap();
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
    p.child.wait().unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_authority_grants_leases_bound_to_their_caller() {
    let s = start("[ptcl]\nmax_grant = \"2m\"\n").await;
    let grant = |t_req: u64, target: &str| {
        json!({
            "sor_target_uri": target,
            "recovery_mode": "COMPENSATING_ACTION",
            "t_req_ms": t_req,
            "inverse_payload": serde_json::from_slice::<Value>(
                &inverse_for(target.strip_prefix(BASE).unwrap_or("/")),
            ).unwrap(),
        })
    };
    const LEASES: &str = "/.well-known/ptcl/v1/leases";
    let item = format!("{BASE}/items/4");

    // Refusals: each with its code and a receipt, none reaching the upstream.
    for (name, auth, body, status, code) in [
        (
            "anonymous",
            None,
            grant(1000, &item),
            401,
            "ERR_CALLER_UNIDENTIFIED",
        ),
        (
            "window beyond max_grant",
            Some("Bearer agent-a"),
            grant(180_000, &item),
            403,
            "ERR_RECOVERY_WINDOW",
        ),
        (
            "another origin",
            Some("Bearer agent-a"),
            grant(1000, "https://other.example.com/items/4"),
            403,
            "ERR_TARGET_MISMATCH",
        ),
        (
            "no inverse",
            Some("Bearer agent-a"),
            json!({"sor_target_uri": item, "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 1000}),
            400,
            "ERR_BAD_REQUEST",
        ),
    ] {
        let (parts, doc) = post_json(&s.p, LEASES, auth, &body).await;
        assert_eq!(parts.status.as_u16(), status, "{name}: {doc}");
        assert_eq!(doc["code"], code, "{name}");
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert!(
        s.upstream.requests().is_empty(),
        "refused grants fetch nothing"
    );

    let (parts, lease) =
        post_json(&s.p, LEASES, Some("Bearer agent-a"), &grant(60_000, &item)).await;
    assert_eq!(parts.status, StatusCode::CREATED, "{lease}");
    assert!(parts.headers["location"]
        .to_str()
        .unwrap()
        .starts_with(LEASES));
    assert_eq!(lease["cas_fence_epoch"], 1);
    assert_eq!(lease["t_granted_ms"], 60_000);
    assert_eq!(lease["pre_image_state_hash"], upstream_state().to_string());
    assert_eq!(
        lease["signature"]["kid"],
        KeyPair::from_seed(SIDECAR_SEED).kid()
    );
    assert!(lease["agent_id"]
        .as_str()
        .unwrap()
        .starts_with("authz:sha256:"));
    assert!(
        !lease.to_string().contains("agent-a"),
        "no credential inside the lease"
    );
    let raw = serde_json::to_string(&lease).unwrap();

    // Another caller cannot use it.
    let req = Request::put(s.p.url("/items/4"))
        .header("authorization", "Bearer agent-b")
        .header("agent-compensation-lease", &raw)
        .body(full("{}"))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_LEASE_NOT_YOURS");
    let b_caller = doc["receipt"]["receipt"]["caller"].as_str().unwrap();
    assert!(b_caller.starts_with("authz:sha256:") && Some(b_caller) != lease["agent_id"].as_str());
    assert_eq!(writes_seen(&s.upstream), 0);

    // Its caller can, with the inverse the grant staged (nothing inline).
    let req = Request::put(s.p.url("/items/4"))
        .header("authorization", "Bearer agent-a")
        .header("agent-compensation-lease", &raw)
        .body(full("{}"))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(parts.headers["agent-fence-token"], "1");
    assert_eq!(writes_seen(&s.upstream), 1);
    // The receipt names the caller the lease was granted to: one identity (issue 35).
    assert_eq!(receipt_of(&parts.headers)["caller"], lease["agent_id"]);

    // The next grant for the resource names the next epoch.
    let (_, next) = post_json(&s.p, LEASES, Some("Bearer agent-a"), &grant(1000, &item)).await;
    assert_eq!(next["cas_fence_epoch"], 2);

    // Lookup: state, epoch and receipts, for the lease's caller only.
    let lookup = |id: &str, auth: &str| {
        Request::get(s.p.url(&format!("{LEASES}/{id}")))
            .header("authorization", auth)
            .body(full(""))
            .unwrap()
    };
    let id = lease["lease_id"].as_str().unwrap();
    let (parts, body) = send(&http1_client(), lookup(id, "Bearer agent-a")).await;
    assert_eq!(parts.status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["state"], "committed");
    assert_eq!(doc["epoch"], 1);
    let kinds: Vec<&str> = doc["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["receipt"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["rejection", "commit"],
        "the refused try by agent-b, then the commit"
    );
    // Each with its inclusion proof in the log's newest checkpoint: the caller verifies it.
    for r in doc["receipts"].as_array().unwrap() {
        assert_receipt_verifies(r, r["receipt"]["kind"].as_str().unwrap());
    }
    let (_, body) = send(
        &http1_client(),
        lookup(next["lease_id"].as_str().unwrap(), "Bearer agent-a"),
    )
    .await;
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["state"], "granted");
    assert_eq!(doc["receipts"], json!([]));
    let (parts, body) = send(&http1_client(), lookup(id, "Bearer agent-b")).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "ERR_LEASE_NOT_YOURS"
    );
    let (parts, _) = send(
        &http1_client(),
        lookup("urn:uuid:unknown", "Bearer agent-a"),
    )
    .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inverse_staged_by_put_satisfies_check_10() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let l = lease_for(&agent, "/items/5", 1, |f| {
        f.insert(
            "lease_id".into(),
            json!("urn:uuid:00000000-0000-4000-8000-000000000005"),
        );
    });
    let stage =
        Request::put(s.p.url(
            "/.well-known/ptcl/v1/leases/urn:uuid:00000000-0000-4000-8000-000000000005/inverse",
        ))
        .header("content-type", "application/json")
        .body(full(inverse_for("/items/5")))
        .unwrap();
    let (parts, body) = send(&http1_client(), stage).await;
    assert_eq!(
        parts.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    let jcs = palisade_policy::canon::canonicalize(&inverse_for("/items/5"), 8).unwrap();
    assert_eq!(
        doc["inverse_payload_jcs_hash"],
        Sha256Digest::of(&jcs).to_string()
    );

    let (parts, body) = send(&http1_client(), put(&s.p, "/items/5", Some(&l), None)).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );

    // A malformed inverse is refused and stages nothing.
    let bad = Request::put(s.p.url("/.well-known/ptcl/v1/leases/urn:uuid:x/inverse"))
        .body(full(r#"{"method":"GET","path":"/x"}"#))
        .unwrap();
    let (parts, body) = send(&http1_client(), bad).await;
    assert_eq!(parts.status.as_u16(), 428);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_INVERSE_NOT_STAGED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensating_action_restores_the_record_once() {
    let (p, sor, _sor_dir) = start_with_sor().await;
    let (_, original) = sor_get(sor, "1").await;
    let inverse =
        serde_json::to_vec(&json!({"method": "PUT", "path": "/api/v2/items/1", "body": original}))
            .unwrap();
    let l = sor_lease(sor, "1", 1, "COMPENSATING_ACTION", &inverse, 0, 60_000).await;
    assert_eq!(
        sor_write(
            &p,
            "1",
            &l,
            &inverse,
            r#"{"sku":"BOLT-M8","qty":1150,"warehouse":"BER-1"}"#
        )
        .await,
        StatusCode::OK
    );
    assert_eq!(sor_get(sor, "1").await.1["qty"], 1150);

    let (status, doc, headers) = compensate(&p, &l).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["upstream_status"], 200);
    assert_receipt_verifies(&doc["receipt"], "compensation");
    assert_eq!(
        doc["receipt"]["receipt"]["cas_fence_epoch"], 2,
        "the inverse is fenced with the next epoch"
    );
    assert_eq!(headers["agent-fence-token"], "2");
    assert_eq!(
        sor_get(sor, "1").await.1,
        original,
        "the record is restored"
    );

    let (status, doc, _) = compensate(&p, &l).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(doc["code"], "ERR_ALREADY_COMPENSATED");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    // The write's own epoch is spent too: a lease at epoch 2 is now stale.
    let l2 = sor_lease(sor, "1", 2, "COMPENSATING_ACTION", &inverse, 0, 60_000).await;
    assert_eq!(
        sor_write(&p, "1", &l2, &inverse, "{}").await,
        StatusCode::CONFLICT
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_restore_puts_back_the_pre_image_or_deletes_what_was_absent() {
    let (p, sor, _sor_dir) = start_with_sor().await;
    let inverse = br#"{"method":"DELETE","path":"/api/v2/items/2"}"#.to_vec();

    // An existing record: the stored representation is PUT back.
    let (_, original) = sor_get(sor, "2").await;
    let l = sor_lease(sor, "2", 1, "SNAPSHOT_RESTORE", &inverse, 0, 60_000).await;
    assert_eq!(
        sor_write(&p, "2", &l, &inverse, r#"{"sku":"NUT-M8","qty":1}"#).await,
        StatusCode::OK
    );
    assert_eq!(sor_get(sor, "2").await.1["qty"], 1);
    let (status, doc, _) = compensate(&p, &l).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["receipt"]["receipt"]["method"], "PUT");
    assert_eq!(sor_get(sor, "2").await.1, original);

    // An absent record: compensation deletes what the write created.
    assert_eq!(sor_get(sor, "77").await.0, StatusCode::NOT_FOUND);
    // Its inverse names its own resource (SPEC §5.4); SNAPSHOT_RESTORE does not send it.
    let inverse = br#"{"method":"DELETE","path":"/api/v2/items/77"}"#.to_vec();
    let l = sor_lease(sor, "77", 1, "SNAPSHOT_RESTORE", &inverse, 0, 60_000).await;
    assert_eq!(
        sor_write(&p, "77", &l, &inverse, r#"{"sku":"NEW","qty":5}"#).await,
        StatusCode::CREATED
    );
    assert_eq!(sor_get(sor, "77").await.0, StatusCode::OK);
    let (status, doc, _) = compensate(&p, &l).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["receipt"]["receipt"]["method"], "DELETE");
    assert_eq!(sor_get(sor, "77").await.0, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensation_after_the_window_is_gone() {
    let (p, sor, _sor_dir) = start_with_sor().await;
    let (_, original) = sor_get(sor, "3").await;
    let inverse =
        serde_json::to_vec(&json!({"method": "PUT", "path": "/api/v2/items/3", "body": original}))
            .unwrap();
    // 1.5 s of the window left at the write.
    let l = sor_lease(sor, "3", 1, "COMPENSATING_ACTION", &inverse, 58_500, 60_000).await;
    assert_eq!(
        sor_write(&p, "3", &l, &inverse, r#"{"qty":0}"#).await,
        StatusCode::OK
    );
    tokio::time::sleep(std::time::Duration::from_millis(1_800)).await;
    let (status, doc, _) = compensate(&p, &l).await;
    assert_eq!(status, StatusCode::GONE, "{doc}");
    assert_eq!(doc["code"], "ERR_LEASE_EXPIRED");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(sor_get(sor, "3").await.1["qty"], 0, "nothing was undone");
    // An unknown lease has nothing to compensate.
    let (status, doc, _) = compensate(&p, r#"{"lease_id":"urn:uuid:nope"}"#).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{doc}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_runs_touch_neither_the_sor_nor_the_epoch() {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let dry = |epoch| {
        lease_for(&agent, "/items/1", epoch, |f| {
            f.insert("recovery_mode".into(), json!("DRY_RUN_SHADOW"));
        })
    };

    // Without a shadow deployment the sidecar answers.
    let s = start("").await;
    let (parts, body) = send(
        &http1_client(),
        put(
            &s.p,
            "/items/1",
            Some(&dry(1)),
            Some(&inverse_for("/items/1")),
        ),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(parts.headers["agent-dry-run"], "1");
    assert!(!parts.headers.contains_key("agent-fence-token"));
    let envelope = envelope_of(&parts.headers);
    assert_receipt_verifies(&envelope, "dry-run");
    assert_eq!(envelope["receipt"]["outcome"], "dry-run");
    assert_eq!(writes_seen(&s.upstream), 0, "nothing was sent to the SoR");
    // The epoch did not move: a real write at epoch 1 still passes.
    let real = lease_for(&agent, "/items/1", 1, |_| {});
    let (parts, _) = send(
        &http1_client(),
        put(
            &s.p,
            "/items/1",
            Some(&real),
            Some(&inverse_for("/items/1")),
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    // A dry run is checked like the real write: now its epoch is stale.
    let (parts, _) = send(
        &http1_client(),
        put(
            &s.p,
            "/items/1",
            Some(&dry(1)),
            Some(&inverse_for("/items/1")),
        ),
    )
    .await;
    assert_eq!(parts.status, StatusCode::CONFLICT);

    // With `upstream.shadow_url` the write goes to the shadow, not the SoR.
    let shadow = Upstream::start().await;
    let sor = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start_in_with(sor, dir, &format!("shadow_url = \"{}\"\n", shadow.url()));
    let (parts, body) = send(
        &http1_client(),
        put(
            &s.p,
            "/items/1",
            Some(&dry(1)),
            Some(&inverse_for("/items/1")),
        ),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(parts.headers["agent-dry-run"], "1");
    assert_eq!(&body[..], br#"{"ok":true}"#, "the shadow's answer");
    assert_eq!(writes_seen(&s.upstream), 0, "the SoR saw no write");
    assert_eq!(writes_seen(&shadow), 1, "the shadow got the write");
}
