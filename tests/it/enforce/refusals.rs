//! A leased write forwarded once; every refusal with its code, receipt and drift event;
//! unbound writes under deny.

use super::*;

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
