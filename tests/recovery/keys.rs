//! Idempotency keys: replays, reuse, scope, keys in flight, uncertain outcomes; a pre-image
//! the upstream cannot give.

use super::*;

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
