//! Who invokes: mTLS callers by SPIFFE id, admission over every step, session contracts'
//! idle timeout, read steps.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mtls_caller_is_known_by_its_spiffe_id() {
    const SPIFFE: &str = "spiffe://erp.example/ns/agents/sa/reserver";
    let upstream = Upstream::start().await;
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = BundleFiles::in_dir(bundle.path());
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    pki.write_server("palisade");
    let callers = dir.path().join("spiffe-callers.json");
    let doc = json!({"callers": [{"identity": SPIFFE, "agent_id": "agent-spiffe",
                                  "scopes": FULL, "trust_tier": 1}]});
    std::fs::write(&callers, doc.to_string()).unwrap();
    let extra = format!(
        "{}[rcns]\ncallers = \"{}\"\n",
        b.rich_toml(""),
        callers.display()
    );
    let text = write_config(&upstream, dir.path(), "", &extra).replacen(
        "[listen]\naddr = \"127.0.0.1:0\"\n",
        &format!(
            "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
            pki.path("server.crt").display(),
            pki.path("server.key").display(),
            pki.path("ca.pem").display()
        ),
        1,
    );
    let p = Palisade::start_in(dir, &text);
    let propose = || {
        Request::builder()
            .method(Method::from_bytes(b"PROPOSE").unwrap())
            .uri("/")
            .header("allow-rcns", "true")
            .header("authority-scope", FULL.join(" "))
            .header("content-type", "application/json")
            .body(full(
                json!({"method": "PROPOSE", "parameters": reserve(false)}).to_string(),
            ))
            .unwrap()
    };
    let agent = pki.issue_client_spiffe(SPIFFE);
    let mut c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&agent)))
        .await
        .unwrap();
    let (parts, body) = c.send(propose()).await.unwrap();
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(parts.status.as_u16(), 263, "{doc}");
    assert_eq!(doc["originating_agent_id"], "agent-spiffe");
    // A certificate from the same CA without that SPIFFE ID is another caller, unknown here.
    let other = pki.issue_client_spiffe("spiffe://erp.example/ns/agents/sa/other");
    let mut c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&other)))
        .await
        .unwrap();
    let (parts, body) = c.send(propose()).await.unwrap();
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (parts.status.as_u16(), doc["lock"].as_u64()),
        (464, Some(3)),
        "{doc}"
    );
    assert!(upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_required_admission_the_token_must_admit_every_step() {
    use support::tokens::{admission_toml, mint, ISSUER};
    let keys = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = BundleFiles::in_dir(bundle.path());
    let lock = b.lock();
    let op = |name: &str, bound: Option<Value>| {
        let c = &lock["capabilities"][name];
        let mut o = json!({"operation": c["operation"], "contractDigest": c["contractDigest"]});
        if let Some(bound) = bound {
            o["bound"] = bound;
        }
        o
    };
    let grant = |ops: Vec<Value>| json!([{"type": "rich_binding", "bindingId": b.binding_id, "operations": ops}]);
    let small =
        json!({"type": "object", "properties": {"qty": {"type": "integer", "maximum": 10}}});
    let custom = json!({
        "both": grant(vec![op("items.put", None), op("legacy.allocations.put", None)]),
        "first_only": grant(vec![op("items.put", None)]),
        "small": grant(vec![op("items.put", Some(small)), op("legacy.allocations.put", None)]),
    });
    let spec = json!({"resource": BASE, "issuer": ISSUER, "bindingId": b.binding_id,
                      "digests": {}, "custom": custom});
    let tokens = mint(keys.path(), &spec);
    // The token's subject is the caller (`sub:sha256:` of issuer and subject).
    let sub = Sha256Digest::of(format!("{ISSUER}\0agent-7").as_bytes()).to_hex();
    let doc = json!({"callers": [{"identity": format!("sub:sha256:{sub}"), "agent_id": "agent-7",
                                  "scopes": FULL, "trust_tier": 1}]});
    let token = |name: &str| format!("Bearer {}", tokens[name].as_str().unwrap());
    let r = WithSor::start_with(
        "",
        &admission_toml("required", keys.path()),
        Some((&doc, &token("both"))),
    )
    .await;
    let (id, session, _) = r.contract().await;
    let claim = FULL.join(" ");
    let input =
        |qty: u64| json!({"sku": "BOLT-9", "qty": qty, "warehouse": "BER-1", "order": "SO-1234"});
    let invoke_as = |name: &str, qty: u64| {
        let auth = token(name);
        let (id, session, claim) = (id.clone(), session.clone(), claim.clone());
        let (url, input) = (r.p.url("/stock-reservations"), input(qty));
        async move {
            let req = Request::builder()
                .method(Method::from_bytes(b"RESERVE").unwrap())
                .uri(url)
                .header("authorization", auth)
                .header("contract-synthesized", id)
                .header("session-id", session)
                .header("authority-scope", claim)
                .header("content-type", "application/json")
                .body(full(input.to_string()))
                .unwrap();
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    // A token naming only the first step's operation: refused before anything runs.
    let (status, b1) = invoke_as("first_only", 5).await;
    assert_eq!(
        (status, b1["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("ERR_NOT_ADMITTED")),
        "{b1}"
    );
    assert_eq!(
        r.sor_get("/api/v2/items/BOLT-9").await.0,
        StatusCode::NOT_FOUND
    );
    // A bound the first step's input exceeds: that step is refused, nothing was written.
    let (status, b2) = invoke_as("small", 50).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{b2}");
    assert_eq!(
        (b2["step"].as_u64(), b2["step_code"].as_str()),
        (Some(0), Some("ERR_NOT_ADMITTED"))
    );
    assert_eq!(
        r.sor_get("/api/v2/items/BOLT-9").await.0,
        StatusCode::NOT_FOUND
    );
    // Within the bound, and a token admitting both: the composition runs.
    let (status, b3) = invoke_as("small", 5).await;
    assert_eq!(status, StatusCode::OK, "{b3}");
    let (status, b4) = invoke_as("both", 50).await;
    assert_eq!(status, StatusCode::OK, "{b4}");
    assert_eq!(r.sor_get("/api/v2/items/BOLT-9").await.1["qty"], 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_session_contract_expires_after_its_idle_timeout() {
    let r = WithSor::start_in_process("session_idle = \"1s\"\nsession_ttl = \"1h\"\n").await;
    let (id, session, approved) = r.contract().await;
    assert_eq!(approved["idle_timeout_s"], 1);
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    // Used within the idle timeout, it lives on: each use moves the timeout.
    for _ in 0..3 {
        r.p.advance(Duration::from_millis(600));
        let (parts, out) = r.invoke(&id, &session, &claim, &input).await;
        assert_eq!(parts.status, StatusCode::OK, "{out}");
    }
    let (_, view) = r
        .send("INSPECT", &format!("/contracts/{id}"), &[], &json!(null))
        .await;
    assert!(view["idle_expires_at"].as_str().unwrap() < view["expires_at"].as_str().unwrap());
    assert_eq!(
        view["contract_hash"], approved["contract_hash"],
        "use is state, not contract"
    );
    // Unused for longer, it is gone.
    r.p.advance(Duration::from_millis(1300));
    let (parts, b) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_step_feeds_the_next_one_and_needs_no_lease() {
    let r = Rcns::start("").await;
    // A recipe whose first step is a bound read (`allocations.search`, sideEffect read).
    let mut set = palisade::cli::sample_bundle::recipes();
    set["capabilityScopes"]["allocations.search"] = json!(["erp:allocations:read"]);
    set["recipes"][0]["steps"] = json!([
        {"capability": "allocations.search", "body": "{sku: input.sku, warehouse: input.warehouse}"},
        {"capability": "items.put", "path": {"id": "input.sku"},
         "body": "{sku: input.sku, qty: input.qty, warehouse: input.warehouse}"}
    ]);
    set["recipes"][0]["output"] = json!("{item: steps[1], allocation: steps[0]}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(r.b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    let mut lock = r.b.lock();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&r.b.lockfile, lock.to_string()).unwrap();
    let (status, doc) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    // Agent a lacks the read step's scope: refused before anything runs.
    let (parts, b) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(parts.status.as_u16(), 455, "{b}");
    assert_eq!(b["required_scopes"], json!(["erp:allocations:read"]));
    // With it granted and claimed (the operator's file), the contract runs.
    let mut callers = callers();
    callers["callers"][0]["scopes"]
        .as_array_mut()
        .unwrap()
        .push(json!("erp:allocations:read"));
    std::fs::write(r.s.p.dir.path().join("callers.json"), callers.to_string()).unwrap();
    let (status, _) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK);
    let claim = format!("{} erp:allocations:read", FULL.join(" "));
    let body = json!({"method": "PROPOSE", "parameters": reserve(true)});
    let (parts, c) = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[("allow-rcns", "true"), ("authority-scope", &claim)],
            Some(&body),
        )
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{c}");
    let id = c["synthesis_id"].as_str().unwrap();
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = [
        ("contract-synthesized", id),
        ("authority-scope", claim.as_str()),
    ];
    let (parts, out) = r
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &headers,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(
        out["allocation"],
        json!({"ok": true}),
        "the read's answer, as the upstream gave it"
    );
    // The read went without a lease or a fence; the write with both; one receipt, the write's.
    let seen: Vec<(String, String, bool)> =
        r.s.upstream
            .requests()
            .into_iter()
            .filter(|s| s.method != "GET")
            .map(|s| {
                (
                    s.method,
                    s.path_and_query,
                    s.headers.contains_key("agent-fence-token"),
                )
            })
            .collect();
    assert_eq!(
        seen,
        [
            ("POST".into(), "/api/v2/allocations/search".into(), false),
            ("PUT".into(), "/api/v2/items/BOLT-9".into(), true),
        ]
    );
    let receipts = step_receipts(&parts);
    assert_eq!(receipts.len(), 1);
    assert_eq!(verified_receipt(&receipts[0])["rcns_step"], 1);
}
