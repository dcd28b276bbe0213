//! Idempotency keys (SPEC §5.6), HUMAN_ESCROW (SPEC §5.4), a failing store (SPEC §10), a
//! crash under load, and that no secret leaks into receipts, events, logs or metrics — all
//! through the real binary against a real upstream.
// Test helpers are outside the 6-parameter limit of clippy.toml (issue 55), which is the product's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_arguments)]

#[path = "it/support/mod.rs"]
mod support;

use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade::store::Fences;
use palisade::store::Leases;
use palisade::store::Receipts;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

/// A PUT of `body` to `path` with a lease, an inline inverse and optional extra headers.
fn keyed_put(
    p: &Palisade,
    path: &str,
    lease: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Request<BoxBody> {
    let mut b = Request::put(p.url(path))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(full(body.to_owned())).unwrap()
}

fn puts_to(u: &Upstream, path: &str) -> usize {
    u.requests()
        .iter()
        .filter(|s| s.method == "PUT" && s.path_and_query == path)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_replay_refuse_reuse_and_are_scoped_per_caller() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    let alice = [
        ("idempotency-key", "\"k-1\""),
        ("authorization", "Bearer alice"),
    ];

    let l1 = lease_for(&agent, "/items/1", 1, |_| {});
    let (first, first_body) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l1, r#"{"qty":1}"#, &alice),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK);
    assert!(!first.headers.contains_key("idempotent-replayed"));
    let receipt = receipt_of(&first.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");

    // The same request again: the stored response, not forwarded.
    let (again, again_body) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l1, r#"{"qty":1}"#, &alice),
    )
    .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again_body, first_body);
    assert_eq!(receipt_of(&again.headers), receipt, "the same receipt");
    assert_eq!(again.headers["agent-fence-token"], "1");
    assert_eq!(again.headers["content-type"], first.headers["content-type"]);
    assert_eq!(
        puts_to(&s.upstream, "/items/1"),
        1,
        "a replay is not forwarded"
    );

    // The same key with another body: 422, with receipt and drift event; nothing forwarded.
    let l2 = lease_for(&agent, "/items/1", 2, |_| {});
    let (reused, body) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l2, r#"{"qty":2}"#, &alice),
    )
    .await;
    assert_eq!(reused.status, StatusCode::UNPROCESSABLE_ENTITY);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_IDEMPOTENCY_KEY_REUSED");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(puts_to(&s.upstream, "/items/1"), 1);

    // Another caller's key of the same name is another key.
    let bob = [
        ("idempotency-key", "\"k-1\""),
        ("authorization", "Bearer bob"),
    ];
    let (other, _) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l2, r#"{"qty":2}"#, &bob),
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);
    assert!(!other.headers.contains_key("idempotent-replayed"));
    assert_eq!(puts_to(&s.upstream, "/items/1"), 2);

    // A refusal before forwarding stores nothing: the key stays usable.
    let k2 = [
        ("idempotency-key", "k-2"),
        ("authorization", "Bearer alice"),
    ];
    let stale = lease_for(&agent, "/items/1", 2, |_| {});
    let (refused, _) = send(
        &client,
        keyed_put(&s.p, "/items/1", &stale, r#"{"qty":3}"#, &k2),
    )
    .await;
    assert_eq!(refused.status, StatusCode::CONFLICT);
    let l3 = lease_for(&agent, "/items/1", 3, |_| {});
    let (ok, _) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l3, r#"{"qty":3}"#, &k2),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK);
    assert!(!ok.headers.contains_key("idempotent-replayed"));
    assert_eq!(puts_to(&s.upstream, "/items/1"), 3);

    // A malformed key is a plain 400.
    let long = "k".repeat(300);
    let (bad, _) = send(
        &client,
        keyed_put(&s.p, "/items/1", &l3, "{}", &[("idempotency-key", &long)]),
    )
    .await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);

    let events = drift_events(&s.p);
    assert!(events
        .iter()
        .any(|e| e["code"] == "ERR_IDEMPOTENCY_KEY_REUSED" && e["category"] == "idempotency"));
    // The default sink, stdout, gets the same events (written by its own task).
    eventually(
        || logged_drift_events(&s.p) == events,
        "the stdout sink has every event",
    )
    .await;
    assert!(!s.p.logs().contains("k-1"), "keys are not logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_flight_key_is_409_and_an_uncertain_outcome_is_replayed_not_retried() {
    // No pre-image fetch: the upstream's /slow and /hang answer GETs slowly or never.
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start_configured(
        upstream,
        dir,
        "timeout = \"1s\"\n",
        "[ptcl]\npre_image = \"off\"\n",
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let key = [("idempotency-key", "\"slow-1\"")];

    let l = lease_for(&agent, "/slow/700", 1, |_| {});
    let first = {
        let req = keyed_put(&s.p, "/slow/700", &l, "{}", &key);
        tokio::spawn(async move { send(&http1_client(), req).await })
    };
    // The first is in flight once the upstream has it (it answers 700 ms later).
    wait::until(
        "the first write reaches the upstream",
        Duration::from_secs(5),
        || puts_to(&s.upstream, "/slow/700") == 1,
    )
    .await;
    let (dup, body) = send(
        &http1_client(),
        keyed_put(&s.p, "/slow/700", &l, "{}", &key),
    )
    .await;
    assert_eq!(dup.status, StatusCode::CONFLICT);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_IDEMPOTENCY_IN_FLIGHT");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    let (first, _) = first.await.unwrap();
    assert_eq!(first.status, StatusCode::OK);
    let (replay, body) = send(
        &http1_client(),
        keyed_put(&s.p, "/slow/700", &l, "{}", &key),
    )
    .await;
    assert_eq!(replay.status, StatusCode::OK);
    assert_eq!(replay.headers["idempotent-replayed"], "true");
    assert_eq!(&body[..], b"slow done");
    assert_eq!(puts_to(&s.upstream, "/slow/700"), 1);

    // Sent, never answered: 504 "uncertain", stored as the key's outcome and replayed.
    let key = [("idempotency-key", "\"hang-1\"")];
    let l = lease_for(&agent, "/hang", 1, |_| {});
    let (timeout, body) = send(&http1_client(), keyed_put(&s.p, "/hang", &l, "{}", &key)).await;
    assert_eq!(timeout.status, StatusCode::GATEWAY_TIMEOUT);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_UPSTREAM_TIMEOUT");
    assert_eq!(doc["outcome"], "uncertain");
    let receipt = receipt_of(&timeout.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(receipt["outcome"], "uncertain");
    assert_eq!(receipt["upstream_status"], 504);
    let (again, again_body) = send(&http1_client(), keyed_put(&s.p, "/hang", &l, "{}", &key)).await;
    assert_eq!(again.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(again.headers["idempotent-replayed"], "true");
    assert_eq!(again_body, body);
    assert_eq!(puts_to(&s.upstream, "/hang"), 1, "never re-executed");
    assert!(drift_events(&s.p)
        .iter()
        .any(|e| e["code"] == "ERR_IDEMPOTENCY_IN_FLIGHT" && e["category"] == "idempotency"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_image_the_upstream_cannot_give_is_503_and_nothing_is_written() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let s = start_configured(upstream, dir, "timeout = \"500ms\"\n", "");
    let agent = KeyPair::from_seed(AGENT_SEED);
    // The upstream never answers GET /hang: the pre-image fetch times out.
    let l = lease_for(&agent, "/hang", 1, |_| {});
    let (parts, body) = send(&http1_client(), keyed_put(&s.p, "/hang", &l, "{}", &[])).await;
    assert_eq!(parts.status, StatusCode::SERVICE_UNAVAILABLE);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_PREIMAGE_UNAVAILABLE");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(doc["current_epoch"], 0, "the epoch did not move");
    assert_eq!(puts_to(&s.upstream, "/hang"), 0);
    assert!(drift_events(&s.p)
        .iter()
        .any(|e| e["code"] == "ERR_PREIMAGE_UNAVAILABLE" && e["category"] == "fence"));
}

fn escrow_lease(agent: &KeyPair, path: &str, epoch: u64, expires_in_ms: Option<i64>) -> String {
    lease_for(agent, path, epoch, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
        if let Some(ms) = expires_in_ms {
            let now = palisade::clock::WallClock::now_ms();
            f.insert(
                "issued_at".into(),
                json!(palisade_policy::lease::format_rfc3339_ms(now + ms - 60_000)),
            );
        }
    })
}

/// Holds a write: 202, Location, an escrow receipt; returns the escrow id.
async fn hold(s: &Setup, path: &str, lease: &str) -> String {
    let (parts, body) = send(
        &http1_client(),
        keyed_put(&s.p, path, lease, r#"{"qty":7}"#, &[]),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let receipt = receipt_of(&parts.headers);
    assert_eq!(receipt["kind"], "escrow", "verified by receipt_of");
    assert_eq!(receipt["outcome"], "held");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["state"], "held");
    let location = parts.headers["location"].to_str().unwrap().to_owned();
    assert_eq!(doc["location"], location);
    location.rsplit('/').next().unwrap().to_owned()
}

async fn escrow_status(p: &Palisade, id: &str, auth: Option<&str>) -> (StatusCode, Value) {
    let mut b = Request::get(p.url(&format!("/.well-known/ptcl/v1/escrow/{id}")));
    if let Some(a) = auth {
        b = b.header("authorization", a);
    }
    let (parts, body) = send(&http1_client(), b.body(full("")).unwrap()).await;
    (
        parts.status,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escrow_holds_until_an_operator_decides_and_rechecks_on_release() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let keep = dir.path().to_owned();
    let s = start_in(upstream, dir, "");
    let agent = KeyPair::from_seed(AGENT_SEED);

    // Held: nothing reaches the SoR and the epoch does not move.
    let approved = hold(&s, "/items/1", &escrow_lease(&agent, "/items/1", 1, None)).await;
    assert_eq!(puts_to(&s.upstream, "/items/1"), 0);
    let (status, doc) = escrow_status(&s.p, &approved, None).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "held");
    assert!(
        doc.get("request").is_none(),
        "the held request is not shown"
    );
    let (status, _) = escrow_status(&s.p, &approved, Some("Bearer someone-else")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "another caller's escrow");
    let (status, list) = admin_get(s.p.admin, "/admin/v1/escrow").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(&approved));

    // The hold survives a crash.
    let Setup { upstream, mut p } = s;
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    copy_state(&keep, dir2.path());
    drop(p);
    let s = start_in(upstream, dir2, "");

    // Approve: forwarded once, with the original body and the lease's epoch.
    let (status, doc) =
        admin_post(s.p.admin, &format!("/admin/v1/escrow/{approved}/approve")).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "released");
    assert_eq!(doc["upstream_status"], 200);
    assert_receipt_verifies(&doc["receipt"], "commit");
    let seen: Vec<Seen> = s
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["agent-fence-token"], "1");
    assert_eq!(seen[0].body_sha256, sha256_hex(br#"{"qty":7}"#));
    assert!(!seen[0].headers.contains_key("agent-compensation-lease"));
    let (status, doc) =
        admin_post(s.p.admin, &format!("/admin/v1/escrow/{approved}/approve")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(doc["code"], "ERR_ESCROW_NOT_HELD");
    assert_eq!(puts_to(&s.upstream, "/items/1"), 1, "released once");
    let (_, doc) = escrow_status(&s.p, &approved, None).await;
    assert_eq!(doc["state"], "released");
    assert_eq!(
        STANDARD.decode(doc["body_b64"].as_str().unwrap()).unwrap(),
        br#"{"ok":true}"#
    );

    // Reject: never forwarded, and cannot be approved afterwards.
    let rejected = hold(&s, "/items/2", &escrow_lease(&agent, "/items/2", 1, None)).await;
    let (status, doc) = admin_post(s.p.admin, &format!("/admin/v1/escrow/{rejected}/reject")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(doc["state"], "rejected");
    assert_receipt_verifies(&doc["receipt"], "approval");
    assert_eq!(doc["receipt"]["receipt"]["outcome"], "rejected");
    assert_eq!(doc["receipt"]["receipt"]["approver"], "admin-listener");
    let (status, _) = admin_post(s.p.admin, &format!("/admin/v1/escrow/{rejected}/approve")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(puts_to(&s.upstream, "/items/2"), 0);

    // A lease that expires while held is refused on release, with receipt and drift event.
    let expiring = hold(
        &s,
        "/items/3",
        &escrow_lease(&agent, "/items/3", 1, Some(1200)),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let (status, doc) =
        admin_post(s.p.admin, &format!("/admin/v1/escrow/{expiring}/approve")).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "nothing was released (issue 54)"
    );
    assert_eq!(doc["state"], "refused");
    assert_eq!(doc["code"], "ERR_LEASE_EXPIRED");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(puts_to(&s.upstream, "/items/3"), 0);
    let (status, doc) = admin_post(s.p.admin, "/admin/v1/escrow/nope/approve").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(doc["code"], "ERR_NOT_FOUND");
    assert!(drift_events(&s.p)
        .iter()
        .any(|e| e["code"] == "ERR_LEASE_EXPIRED"));
    // Only undecided escrows are listed.
    let (_, list) = admin_get(s.p.admin, "/admin/v1/escrow").await;
    let list: Value = serde_json::from_str(&list).unwrap();
    assert_eq!(list["escrows"], json!([]));
    // The epoch moved for the released write only.
    let (parts, _) = send(
        &http1_client(),
        Request::get(s.p.url("/items/1")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.headers["agent-fence-token"], "1");
    let (parts, _) = send(
        &http1_client(),
        Request::get(s.p.url("/items/2")).body(full("")).unwrap(),
    )
    .await;
    assert!(!parts.headers.contains_key("agent-fence-token"));
}

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
    tokio::time::sleep(Duration::from_millis(1500)).await;
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
}

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

    tokio::time::sleep(Duration::from_millis(300)).await;
    let metrics = admin_get(s.p.admin, "/metrics").await.1;
    assert!(metrics.contains("palisade_requests_total"));
    let mut p = s.p;
    p.sigterm();
    p.child.wait().unwrap();
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

/// Waits up to 20 s for `done` to hold.
async fn eventually(done: impl FnMut() -> bool, what: &str) {
    wait::until(what, Duration::from_secs(20), done).await;
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
    p.child.wait().unwrap();
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
