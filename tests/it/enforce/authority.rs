//! The lease authority: grants bound to their caller, inverses staged by PUT.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_authority_grants_leases_bound_to_their_caller() {
    let s = start("[ptcl]\nmax_grant = \"2m\"\n").await;
    let grant = |t_req: u64, target: &str| {
        json!({
            "sor_target_uri": target,
            "recovery_mode": "COMPENSATING_ACTION",
            "t_req_ms": t_req,
            "inverse_payload": serde_json::from_slice::<Value>(
                &inverse_for(target.strip_prefix(BASE).unwrap_or("/")),
            ).unwrap(),
        })
    };
    const LEASES: &str = "/.well-known/ptcl/v1/leases";
    let item = format!("{BASE}/items/4");

    // Refusals: each with its code and a receipt, none reaching the upstream.
    for (name, auth, body, status, code) in [
        (
            "anonymous",
            None,
            grant(1000, &item),
            401,
            "ERR_CALLER_UNIDENTIFIED",
        ),
        (
            "window beyond max_grant",
            Some("Bearer agent-a"),
            grant(180_000, &item),
            403,
            "ERR_RECOVERY_WINDOW",
        ),
        (
            "another origin",
            Some("Bearer agent-a"),
            grant(1000, "https://other.example.com/items/4"),
            403,
            "ERR_TARGET_MISMATCH",
        ),
        (
            "no inverse",
            Some("Bearer agent-a"),
            json!({"sor_target_uri": item, "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 1000}),
            400,
            "ERR_BAD_REQUEST",
        ),
    ] {
        let (parts, doc) = post_json(&s.p, LEASES, auth, &body).await;
        assert_eq!(parts.status.as_u16(), status, "{name}: {doc}");
        assert_eq!(doc["code"], code, "{name}");
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert!(
        s.upstream.requests().is_empty(),
        "refused grants fetch nothing"
    );

    let (parts, lease) =
        post_json(&s.p, LEASES, Some("Bearer agent-a"), &grant(60_000, &item)).await;
    assert_eq!(parts.status, StatusCode::CREATED, "{lease}");
    assert!(parts.headers["location"]
        .to_str()
        .unwrap()
        .starts_with(LEASES));
    assert_eq!(lease["cas_fence_epoch"], 1);
    assert_eq!(lease["t_granted_ms"], 60_000);
    assert_eq!(lease["pre_image_state_hash"], upstream_state().to_string());
    assert_eq!(
        lease["signature"]["kid"],
        KeyPair::from_seed(SIDECAR_SEED).kid()
    );
    assert!(lease["agent_id"]
        .as_str()
        .unwrap()
        .starts_with("authz:sha256:"));
    assert!(
        !lease.to_string().contains("agent-a"),
        "no credential inside the lease"
    );
    let raw = serde_json::to_string(&lease).unwrap();

    // Another caller cannot use it.
    let req = Request::put(s.p.url("/items/4"))
        .header("authorization", "Bearer agent-b")
        .header("agent-compensation-lease", &raw)
        .body(full("{}"))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_LEASE_NOT_YOURS");
    let b_caller = doc["receipt"]["receipt"]["caller"].as_str().unwrap();
    assert!(b_caller.starts_with("authz:sha256:") && Some(b_caller) != lease["agent_id"].as_str());
    assert_eq!(writes_seen(&s.upstream), 0);

    // Its caller can, with the inverse the grant staged (nothing inline).
    let req = Request::put(s.p.url("/items/4"))
        .header("authorization", "Bearer agent-a")
        .header("agent-compensation-lease", &raw)
        .body(full("{}"))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(parts.headers["agent-fence-token"], "1");
    assert_eq!(writes_seen(&s.upstream), 1);
    // The receipt names the caller the lease was granted to: one identity (issue 35).
    assert_eq!(receipt_of(&parts.headers)["caller"], lease["agent_id"]);

    // The next grant for the resource names the next epoch.
    let (_, next) = post_json(&s.p, LEASES, Some("Bearer agent-a"), &grant(1000, &item)).await;
    assert_eq!(next["cas_fence_epoch"], 2);

    // Lookup: state, epoch and receipts, for the lease's caller only.
    let lookup = |id: &str, auth: &str| {
        Request::get(s.p.url(&format!("{LEASES}/{id}")))
            .header("authorization", auth)
            .body(full(""))
            .unwrap()
    };
    let id = lease["lease_id"].as_str().unwrap();
    let (parts, body) = send(&http1_client(), lookup(id, "Bearer agent-a")).await;
    assert_eq!(parts.status, StatusCode::OK);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["state"], "committed");
    assert_eq!(doc["epoch"], 1);
    let kinds: Vec<&str> = doc["receipts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["receipt"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["rejection", "commit"],
        "the refused try by agent-b, then the commit"
    );
    // Each with its inclusion proof in the log's newest checkpoint: the caller verifies it.
    for r in doc["receipts"].as_array().unwrap() {
        assert_receipt_verifies(r, r["receipt"]["kind"].as_str().unwrap());
    }
    let (_, body) = send(
        &http1_client(),
        lookup(next["lease_id"].as_str().unwrap(), "Bearer agent-a"),
    )
    .await;
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["state"], "granted");
    assert_eq!(doc["receipts"], json!([]));
    let (parts, body) = send(&http1_client(), lookup(id, "Bearer agent-b")).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["code"],
        "ERR_LEASE_NOT_YOURS"
    );
    let (parts, _) = send(
        &http1_client(),
        lookup("urn:uuid:unknown", "Bearer agent-a"),
    )
    .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inverse_staged_by_put_satisfies_check_10() {
    let s = start("").await;
    let agent = KeyPair::from_seed(AGENT_SEED);
    let l = lease_for(&agent, "/items/5", 1, |f| {
        f.insert(
            "lease_id".into(),
            json!("urn:uuid:00000000-0000-4000-8000-000000000005"),
        );
    });
    let stage =
        Request::put(s.p.url(
            "/.well-known/ptcl/v1/leases/urn:uuid:00000000-0000-4000-8000-000000000005/inverse",
        ))
        .header("content-type", "application/json")
        .body(full(inverse_for("/items/5")))
        .unwrap();
    let (parts, body) = send(&http1_client(), stage).await;
    assert_eq!(
        parts.status,
        StatusCode::CREATED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    let jcs = palisade_policy::canon::canonicalize(&inverse_for("/items/5"), 8).unwrap();
    assert_eq!(
        doc["inverse_payload_jcs_hash"],
        Sha256Digest::of(&jcs).to_string()
    );

    let (parts, body) = send(&http1_client(), put(&s.p, "/items/5", Some(&l), None)).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );

    // A malformed inverse is refused and stages nothing.
    let bad = Request::put(s.p.url("/.well-known/ptcl/v1/leases/urn:uuid:x/inverse"))
        .body(full(r#"{"method":"GET","path":"/x"}"#))
        .unwrap();
    let (parts, body) = send(&http1_client(), bad).await;
    assert_eq!(parts.status.as_u16(), 428);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_INVERSE_NOT_STAGED");
}
