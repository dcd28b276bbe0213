//! Held writes: an operator decides, the release is checked again.

use super::*;

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
    p.child().kill().unwrap();
    p.child().wait().unwrap();
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
    // A release's refusal may be kept a moment after the approval is answered.
    wait::until(
        "the expired release's drift event is kept",
        Duration::from_secs(5),
        || {
            drift_events(&s.p)
                .iter()
                .any(|e| e["code"] == "ERR_LEASE_EXPIRED")
        },
    )
    .await;
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
