//! Inverses bound to the write they undo; compensation stopped by a freeze and fenced forward.

use super::*;

/// Defect 2 (high), HTTP: the authority signed a lease for `/items/mine` whose inverse is
/// `PUT /items/victim`, and `compensate` sent it, moving victim's epoch backwards. Now the
/// grant, the inverse endpoint and an inline inverse are each refused 422
/// `ERR_INVERSE_TARGET`, with a receipt and a drift event, and victim is never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inverse_is_bound_to_the_write_it_undoes() {
    let s = start("").await;
    let auth = Some("Bearer agent-7");
    let victim = json!({"method": "PUT", "path": "/items/victim", "body": {"qty": 0}});
    // The grant.
    let (parts, doc) = post_json(
        &s.p,
        "/.well-known/ptcl/v1/leases",
        auth,
        &json!({"sor_target_uri": format!("{BASE}/items/mine"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": victim}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    assert_eq!(receipt_of(&parts, &doc)["code"], "ERR_INVERSE_TARGET");
    // A grant with its own inverse, then the inverse endpoint asked to swap in victim's.
    let own = json!({"method": "PUT", "path": "/items/mine", "body": {"qty": 5}});
    let (parts, lease) = post_json(
        &s.p,
        "/.well-known/ptcl/v1/leases",
        auth,
        &json!({"sor_target_uri": format!("{BASE}/items/mine"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": own}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::CREATED, "{lease}");
    let lease_id = lease["lease_id"].as_str().unwrap();
    let req = Request::put(s.p.url(&format!("/.well-known/ptcl/v1/leases/{lease_id}/inverse")))
        .header("content-type", "application/json")
        .header("authorization", "Bearer agent-7")
        .body(full(victim.to_string()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    // An agent-signed lease with the victim's inverse inline.
    let victim_bytes = serde_json::to_vec(&victim).unwrap();
    let (parts, doc) = leased_put(&s, "/items/mine", 1, &victim_bytes, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    assert_eq!(receipt_of(&parts, &doc)["kind"], "rejection");
    // A member of the written resource is another resource unless the write is a POST.
    let member = br#"{"method":"DELETE","path":"/items/mine/child"}"#;
    let (parts, doc) = leased_put(&s, "/items/mine", 1, member, "Bearer agent-7").await;
    assert_eq!(
        (parts.status, doc["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("ERR_INVERSE_TARGET"))
    );
    assert_eq!(puts_to(&s, "/items/"), 0, "the upstream saw no write");
    assert!(
        drift_codes(&s.p)
            .await
            .iter()
            .filter(|c| *c == "ERR_INVERSE_TARGET")
            .count()
            >= 3,
        "each refusal left a drift event"
    );
    // The write's own inverse goes through, and compensation fences the same resource.
    let own_bytes = serde_json::to_vec(&own).unwrap();
    let (parts, doc) = leased_put(&s, "/items/mine", 1, &own_bytes, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
}

/// Defect 2, the upgrade path: a lease committed before the binding rule, whose staged inverse
/// names another resource (as an old sidecar kept it in its store), is refused at
/// `compensate` with the code staging would get now: 422 `ERR_INVERSE_TARGET`, a rejection
/// receipt, a drift event; the SoR receives nothing and the other resource's fence stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_from_before_the_rule_with_an_inverse_elsewhere_is_refused_at_compensate() {
    use palisade::store::embedded::EmbeddedStore;
    use palisade::store::{Fences as _, LeaseRecord, WriteIntent};
    let dir = tempfile::tempdir().unwrap();
    let lease_id = "urn:uuid:00000000-0000-4000-8000-0000000000aa";
    {
        // The store as the previous version left it: the write committed at epoch 1, its
        // record without the write's method, its inverse a PUT of another item.
        let store = EmbeddedStore::open(
            &dir.path().join("state.redb"),
            sidecar_log("erp.example.com/palisade"),
        )
        .unwrap();
        let mine = format!("{BASE}/items/mine");
        let expires = palisade::clock::WallClock::now_ms() + 3_600_000;
        let record = LeaseRecord {
            path: Some("/items/mine".into()),
            ..LeaseRecord::committed(lease_id, &mine, 1, expires)
        };
        let inverse = br#"{"body":{"qty":0},"method":"PUT","path":"/items/victim"}"#.to_vec();
        store
            .advance(WriteIntent {
                resource: mine,
                epoch: 1,
                lease_id: lease_id.to_owned(),
                expires_at_ms: expires,
                lease_record: record,
                inverse: Some(inverse),
                snapshot: None,
            })
            .await
            .unwrap();
    }
    let s = start_in(Upstream::start().await, dir, "");
    let req = Request::post(s.p.url(&format!(
        "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
    )))
    .header("authorization", "Bearer agent-7")
    .body(full(""))
    .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    let receipt = receipt_of(&parts, &doc);
    assert_eq!(
        (receipt["kind"].as_str(), receipt["code"].as_str()),
        (Some("rejection"), Some("ERR_INVERSE_TARGET"))
    );
    assert!(
        drift_codes(&s.p)
            .await
            .contains(&"ERR_INVERSE_TARGET".to_owned()),
        "a drift event"
    );
    assert!(s.upstream.requests().is_empty(), "the SoR received nothing");
    let victim = format!("/admin/v1/fences/{}", "%2Fitems%2Fvictim");
    let (status, text) = admin_get(s.p.admin, &victim).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["epoch"], 0);
}

/// Defect 6, and the compensate half of defect 2: `compensate` is a write like any other. A
/// freeze of the resource stops it (423, a receipt, the SoR receives nothing), and once lifted
/// the inverse is fenced with the resource's next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensate_is_stopped_by_a_freeze_and_fenced_forward() {
    let s = start("").await;
    let inverse = br#"{"method":"DELETE","path":"/items/undo"}"#;
    let (parts, doc) = leased_put(&s, "/items/undo", 7, inverse, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    let lease_id = receipt_of(&parts, &doc)["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, made) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON],
        r#"{"scope":"resource","value":"/items/undo","reason":"incident 54"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let compensate = |auth: &'static str| {
        let url = s.p.url(&format!(
            "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
        ));
        async move {
            let req = Request::post(url)
                .header("authorization", auth)
                .body(full(""))
                .unwrap();
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::LOCKED, "{doc}");
    assert_eq!(doc["code"], "ERR_FROZEN");
    assert_eq!(doc["freeze_id"], made["id"]);
    assert_eq!(receipt_of(&parts, &doc)["code"], "ERR_FROZEN");
    let deletes = || {
        s.upstream
            .requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count()
    };
    assert_eq!(deletes(), 0, "the SoR received no inverse");
    // A freeze of the lease holder stops it too.
    let id = made["id"].as_str().unwrap();
    admin_call(
        &s.p,
        "DELETE",
        &format!("/admin/v1/freeze/{id}"),
        &[JSON],
        "",
    )
    .await;
    let caller = palisade_policy::caller::authorization_caller(b"Bearer agent-7");
    let (status, _) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON],
        &json!({"scope": "caller", "value": caller, "reason": "holder"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(
        (parts.status, doc["code"].as_str()),
        (StatusCode::LOCKED, Some("ERR_FROZEN"))
    );
    assert_eq!(deletes(), 0);
    for f in freezes(&s.p, &[]).await {
        let id = f["id"].as_str().unwrap();
        admin_call(
            &s.p,
            "DELETE",
            &format!("/admin/v1/freeze/{id}"),
            &[JSON],
            "",
        )
        .await;
    }
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    assert_eq!(deletes(), 1);
    let sent = s
        .upstream
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .unwrap();
    assert_eq!(sent.path_and_query, "/items/undo");
    assert_eq!(
        sent.headers["agent-fence-token"], "8",
        "the next epoch, never an older one"
    );
}
