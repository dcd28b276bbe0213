//! Tokens admit the operations they name by contract digest, and nothing else.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_admit_named_operations_and_everything_else_is_refused() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (b, put, get) = bundle(bundle_dir.path(), None);
    let keys_dir = tempfile::tempdir().unwrap();
    let digests = json!({PUT_OP: digest_of(&put), GET_OP: digest_of(&get)});
    let refs = |bound: Value| {
        json!([{"type": "rich_binding", "bindingId": b.binding_id, "operations": [
            {"operation": REFS_OP, "contractDigest": digest_of(&refs_contract()), "bound": bound}]}])
    };
    let custom = json!({
        "refs_bounded": refs(json!({"type": "object", "properties": {"qty": {"maximum": 10}}})),
        "refs_outside": refs(json!({"type": "object", "properties": {"qty": {"multipleOf": 2}}})),
    });
    let tokens = mint_with(keys_dir.path(), &b.binding_id, &digests, &custom);
    let t = |name: &str| bearer(&tokens[name]);
    let jwks = keys_dir.path().join("jwks.json");
    let admission = admission_toml("required", keys_dir.path());
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &format!("{}{admission}", b.rich_toml("")),
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut epoch = 0;
    let mut lease = || {
        epoch += 1;
        lease_for(&agent, "/items/1", epoch, |_| {})
    };
    let body = r#"{"qty":1150}"#;

    // Tokens that admit the write: each algorithm, an aud list, a grant without bindingId.
    for name in ["eddsa", "es256", "rs256", "aud_list", "no_binding_id"] {
        let before = writes_to(&s.upstream, "/items/1");
        let a = call(&s.p, "PUT", "/items/1", &[&t(name)], Some(&lease()), body).await;
        assert_eq!(a.status, StatusCode::OK, "{name}: {}", a.doc);
        assert_eq!(writes_to(&s.upstream, "/items/1"), before + 1, "{name}");
    }
    // Receipts name who acted: a digest of the token's issuer and subject, never the token.
    let caller = format!(
        "sub:{}",
        Sha256Digest::of(format!("{ISSUER}\0agent-7").as_bytes())
    );
    let a = call(
        &s.p,
        "PUT",
        "/items/1",
        &[&t("eddsa")],
        Some(&lease()),
        body,
    )
    .await;
    let receipt = receipt_of(&a.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(receipt["caller"], caller);
    // The token stays with the sidecar.
    assert!(s
        .upstream
        .requests()
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));
    // A read of a bound operation needs its grant too.
    let a = call(&s.p, "GET", "/items/1", &[&t("read_only")], None, "").await;
    assert_eq!(a.status, StatusCode::OK);
    let a = call(&s.p, "GET", "/items/1", &[], None, "").await;
    assert_refused(
        &a,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "a read without a token",
    );

    // 401: no usable token. The lease each carries is not spent: it passes afterwards.
    let kept = lease();
    let missing = call(&s.p, "PUT", "/items/1", &[], Some(&kept), body).await;
    assert_refused(
        &missing,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "no token",
    );
    assert!(
        !missing.challenge.as_deref().unwrap().contains("error="),
        "no error code without a token (RFC 6750 §3.1)"
    );
    let before = writes_to(&s.upstream, "/items/1");
    for name in [
        "expired",
        "not_yet",
        "future_iat",
        "no_exp",
        "wrong_iss",
        "wrong_aud",
        "unknown_kid",
        "id_token_typ",
        "kid_alg_mismatch",
        "alg_none",
        "hs256_public_key",
        "tampered",
    ] {
        let a = call(&s.p, "PUT", "/items/1", &[&t(name)], Some(&kept), body).await;
        assert_refused(&a, StatusCode::UNAUTHORIZED, "ERR_TOKEN_INVALID", name);
        assert!(
            a.challenge.unwrap().contains("error=\"invalid_token\""),
            "{name}"
        );
    }
    let two = call(
        &s.p,
        "PUT",
        "/items/1",
        &[&t("eddsa"), &t("es256")],
        Some(&kept),
        body,
    )
    .await;
    assert_refused(
        &two,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "two Authorization headers",
    );
    let basic = call(
        &s.p,
        "PUT",
        "/items/1",
        &["Basic YWdlbnQ6cHc="],
        Some(&kept),
        body,
    )
    .await;
    assert_refused(
        &basic,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "Basic credentials",
    );

    // 403: a valid token that does not admit this call, with what to ask for.
    for (name, input) in [
        ("read_only", body),
        ("stale_digest", body),
        ("other_binding", body),
        ("no_details", body),
        ("outside_fragment", r#"{"qty":5}"#),
        ("bounded", body),
    ] {
        let a = call(&s.p, "PUT", "/items/1", &[&t(name)], Some(&kept), input).await;
        assert_refused(&a, StatusCode::FORBIDDEN, "ERR_NOT_ADMITTED", name);
        assert!(
            a.challenge
                .unwrap()
                .contains("error=\"insufficient_authorization_details\""),
            "{name}"
        );
        let needed = &a.doc["authorization_details"][0];
        assert_eq!(needed["type"], "rich_binding", "{name}");
        assert_eq!(needed["bindingId"], b.binding_id, "{name}");
        assert_eq!(
            needed["operations"][0],
            json!({"operation": PUT_OP, "contractDigest": digest_of(&put)}),
            "{name}"
        );
        // The members that carry random or hashed text (the request id, the trace id, the
        // signed receipt) can hold "1150" by chance; the rest must not name the input value.
        let mut said = a.doc.clone();
        for random in ["instance", "trace_id", "receipt"] {
            said.as_object_mut().unwrap().remove(random);
        }
        assert!(
            !said.to_string().contains("1150"),
            "{name}: no input value echoed: {said}"
        );
    }
    let bounded = call(&s.p, "PUT", "/items/1", &[&t("bounded")], Some(&kept), body).await;
    assert_eq!(bounded.doc["violationLocation"], "/qty");
    // A 403 knows who was refused; a 401 does not.
    assert_eq!(bounded.doc["receipt"]["receipt"]["caller"], caller);
    assert!(missing.doc["receipt"].get("caller").is_none());
    assert_eq!(
        writes_to(&s.upstream, "/items/1"),
        before,
        "refusals reached the upstream"
    );
    // Inside the granted bound, the same lease goes through: nothing above spent it.
    let a = call(
        &s.p,
        "PUT",
        "/items/1",
        &[&t("bounded")],
        Some(&kept),
        r#"{"qty":5}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    assert_eq!(writes_to(&s.upstream, "/items/1"), before + 1);

    // Every refusal left a drift event naming its code, with no token in it.
    let events = drift_events(&s.p);
    for code in ["ERR_TOKEN_INVALID", "ERR_NOT_ADMITTED"] {
        assert!(events.iter().any(|e| e["code"] == code), "{code}");
    }
    assert!(events
        .iter()
        .any(|e| e["code"] == "ERR_NOT_ADMITTED" && e["caller"] == caller));
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains(&tokens["eddsa"][..40]),
        "no token in drift events"
    );
    assert!(
        !s.p.logs().contains(&tokens["eddsa"][..40]),
        "no token in logs"
    );

    // The lease authority binds a lease to the token's subject, not to one token: another
    // token of the same subject may use it, another subject's may not.
    let granted = |auth: String| {
        let p = &s.p;
        async move {
            let grant = json!({"sor_target_uri": format!("{BASE}/items/1"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 1000,
                "inverse_payload": serde_json::from_slice::<Value>(&inverse()).unwrap()});
            let req = Request::post(p.url("/.well-known/ptcl/v1/leases"))
                .header("authorization", auth)
                .header("content-type", "application/json")
                .body(full(grant.to_string()))
                .unwrap();
            let (parts, body) = send(&http1_client(), req).await;
            assert_eq!(parts.status, StatusCode::CREATED);
            let lease: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(lease["agent_id"], caller);
            serde_json::to_string(&lease).unwrap()
        }
    };
    let use_lease = |auth: String, lease: String| {
        let p = &s.p;
        async move {
            let req = Request::put(p.url("/items/1"))
                .header("authorization", auth)
                .header("content-type", "application/json")
                .header("agent-compensation-lease", lease)
                .body(full(r#"{"qty":3}"#))
                .unwrap();
            let (parts, body) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };
    let lease_a = granted(t("eddsa")).await;
    let (status, doc) = use_lease(t("other_subject"), lease_a.clone()).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{doc}");
    assert_eq!(doc["code"], "ERR_LEASE_NOT_YOURS");
    let (status, doc) = use_lease(t("es256"), lease_a).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "the same subject, another token: {doc}"
    );

    // A binding whose own worst-case bound cannot be computed ($ref) is admitted narrowed to
    // a bounded grant: the grant bounds every call, whatever the contract.
    let refs_lease = |epoch| lease_for(&agent, "/refs/1", epoch, |_| {});
    let a = call(
        &s.p,
        "PUT",
        "/refs/1",
        &[&t("refs_bounded")],
        Some(&refs_lease(1)),
        r#"{"qty":5}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    let a = call(
        &s.p,
        "PUT",
        "/refs/1",
        &[&t("refs_bounded")],
        Some(&refs_lease(2)),
        r#"{"qty":50}"#,
    )
    .await;
    assert_refused(
        &a,
        StatusCode::FORBIDDEN,
        "ERR_NOT_ADMITTED",
        "outside the grant on a $ref contract",
    );
    // A grant whose bound is outside the fragment cannot be shown to bound it: nothing.
    let a = call(
        &s.p,
        "PUT",
        "/refs/1",
        &[&t("refs_outside")],
        Some(&refs_lease(2)),
        r#"{"qty":4}"#,
    )
    .await;
    assert_refused(
        &a,
        StatusCode::FORBIDDEN,
        "ERR_NOT_ADMITTED",
        "a bound outside the fragment",
    );

    // A binding whose runtime turns admission off needs no token (its lease still holds).
    let open_lease = lease_for(&agent, "/open/1", 1, |_| {});
    let a = call(
        &s.p,
        "PUT",
        "/open/1",
        &[],
        Some(&open_lease),
        r#"{"qty":1}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);

    // The protected-resource metadata (RFC 9728) names what to ask for.
    let (parts, bytes) = send(
        &http1_client(),
        Request::get(s.p.url("/.well-known/oauth-protected-resource"))
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    let meta: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(meta["resource"], BASE);
    assert_eq!(meta["authorization_servers"], json!([ISSUER]));
    assert_eq!(
        meta["authorization_details_types_supported"],
        json!(["rich_binding"])
    );
    let ops = meta["rich_binding"]["operations"].as_array().unwrap();
    let put_meta = ops.iter().find(|o| o["operation"] == PUT_OP).unwrap();
    assert_eq!(put_meta["contractDigest"], digest_of(&put));
    // Its worst-case bound: the contract's input in the decidable fragment.
    assert_eq!(
        put_meta["worstCaseBound"],
        json!({"type": "object", "required": ["qty"],
               "properties": {"qty": {"type": "integer", "minimum": 0}}})
    );
    assert!(put_meta["worstCaseBoundDigest"]
        .as_str()
        .unwrap()
        .starts_with("sha-256:"));

    // A hot swap changes the PUT contract: tokens granted for the old digest no longer admit
    // it (the read's contract did not change).
    let (_, new_put, _) = bundle(bundle_dir.path(), Some(5000));
    let reload = admin_post(&s.p, "/admin/v1/reload");
    assert!(reload.contains("200"), "{reload}");
    let a = call(
        &s.p,
        "PUT",
        "/items/1",
        &[&t("eddsa")],
        Some(&lease()),
        body,
    )
    .await;
    assert_refused(
        &a,
        StatusCode::FORBIDDEN,
        "ERR_NOT_ADMITTED",
        "a digest made stale by a hot swap",
    );
    assert_eq!(
        a.doc["authorization_details"][0]["operations"][0]["contractDigest"],
        digest_of(&new_put)
    );
    let a = call(&s.p, "GET", "/items/1", &[&t("eddsa")], None, "").await;
    assert_eq!(a.status, StatusCode::OK);

    // JWKS rotation, live: a key that was unknown is picked up when the file changes.
    let a = call(&s.p, "GET", "/items/1", &[&t("unknown_kid")], None, "").await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    let staged = keys_dir.path().join("jwks.json.new");
    std::fs::copy(keys_dir.path().join("jwks-rotated.json"), &staged).unwrap();
    std::fs::rename(&staged, &jwks).unwrap();
    wait::until_async(
        "the rotated JWKS is picked up",
        Duration::from_secs(10),
        || async {
            let a = call(&s.p, "GET", "/items/1", &[&t("unknown_kid")], None, "").await;
            a.status == StatusCode::OK
        },
    )
    .await;
    // A broken JWKS leaves the keys in force: once it has been read and refused, the
    // rotated key still admits.
    std::fs::write(&jwks, b"{not json").unwrap();
    wait::until(
        "the broken JWKS is read and refused",
        Duration::from_secs(10),
        || s.p.logs().contains("admission.jwks refused"),
    )
    .await;
    let a = call(&s.p, "GET", "/items/1", &[&t("unknown_kid")], None, "").await;
    assert_eq!(a.status, StatusCode::OK, "a broken JWKS replaced the keys");
    assert!(s.p.logs().contains("admission.jwks refused"));
}
