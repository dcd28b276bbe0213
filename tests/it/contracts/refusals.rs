//! Contract refusals with code, receipt and drift event; bundles that do not compile.

use super::*;

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
