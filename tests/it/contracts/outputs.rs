//! Output contracts under each drift policy, and answers too large to check.

use super::*;

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
