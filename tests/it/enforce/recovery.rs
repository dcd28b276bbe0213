//! Recovery: compensating actions, snapshot restores, the window, dry runs.

use super::*;

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
    let (p, sor, _sor_dir) = start_with_sor_in_process().await;
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
    p.advance(std::time::Duration::from_millis(1_800));
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
