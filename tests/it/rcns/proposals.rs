//! PROPOSE in both forms, and every refusal with the seed's status and reason, a receipt
//! and a drift event.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_in_either_form_is_approved_and_listed_to_its_agent_only() {
    let r = Rcns::start("").await;
    let (parts, body) = r.propose("tok-a", reserve(false)).await;
    assert_eq!(parts.status.as_u16(), 263, "{body}");
    let id = body["synthesis_id"].as_str().unwrap().to_owned();
    assert_eq!(parts.headers["contract-synthesized"], id.as_str());
    let session = parts.headers["session-id"].to_str().unwrap().to_owned();
    assert_eq!(body["session"], session.as_str());
    assert_eq!(body["status"], 263);
    assert_eq!(
        (body["method"].as_str(), body["path"].as_str()),
        (Some("RESERVE"), Some("/stock-reservations"))
    );
    assert_eq!(
        body["recipe_lineage"],
        json!({"recipe_name": "reserve-stock", "recipe_version": "1"})
    );
    assert_eq!(body["negotiation_origin"], "propose");
    assert_eq!(body["originating_agent_id"], "agent-a");
    assert_eq!(body["persistent"], false);
    // The endpoint served is the recipe's, whatever schema the agent proposed.
    assert_eq!(
        body["endpoint"]["input_schema"]["required"],
        json!(["sku", "qty", "warehouse", "order"])
    );
    assert_eq!(
        body["contract_hash"].as_str().unwrap(),
        independent_hash(&body)
    );
    assert!(body["expires_at"].as_str().unwrap().ends_with('Z'));

    // The flat form, through the well-known path.
    let claim = FULL.join(" ");
    let flat = json!({"method": "PROPOSE", "parameters": {"name": "reserve", "method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve"}}});
    let (p2, b2) = r
        .call(
            "POST",
            "/.well-known/agtp/propose",
            Some("tok-a"),
            &[("allow-rcns", "?1"), ("authority-scope", &claim)],
            Some(&flat),
        )
        .await;
    assert_eq!(p2.status.as_u16(), 263, "{b2}");
    assert_ne!(b2["synthesis_id"], body["synthesis_id"]);
    let (p3, b3) = r.propose("tok-b", reserve(true)).await;
    assert_eq!(p3.status.as_u16(), 263, "{b3}");
    assert_eq!(b3["persistent"], true);
    assert!(p3.headers.get("session-id").is_none());

    // DISCOVER /contracts, as the method and as the well-known path: each agent its own.
    for (method, path) in [
        ("DISCOVER", "/contracts"),
        ("GET", "/.well-known/agtp/contracts"),
    ] {
        let (status, list) = r.get(method, path, "tok-a").await;
        assert_eq!(status, StatusCode::OK);
        let ids: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["synthesis_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 2, "{list}");
        assert!(ids.contains(&id.as_str()));
        for c in list.as_array().unwrap() {
            for m in [
                "synthesis_id",
                "method",
                "path",
                "originating_agent_id",
                "recipe_lineage",
                "contract_hash",
                "negotiation_origin",
                "issued_at",
                "expires_at",
            ] {
                assert!(c.get(m).is_some(), "{m} in {c}");
            }
            assert_eq!(c["contract_hash"].as_str().unwrap(), independent_hash(c));
        }
    }
    let (_, list_b) = r.get("DISCOVER", "/contracts", "tok-b").await;
    assert_eq!(list_b.as_array().unwrap().len(), 1);
    assert_eq!(list_b[0]["originating_agent_id"], "agent-b");
    // `inspect:all` sees every agent's; granted but not claimed, it sees only its own (none).
    let (_, all) = r.get("DISCOVER", "/contracts", "tok-ops").await;
    assert_eq!(all.as_array().unwrap().len(), 3);
    let (_, unclaimed) = r
        .call(
            "DISCOVER",
            "/contracts",
            Some("tok-ops"),
            &[("authority-scope", "rcns:negotiate")],
            None,
        )
        .await;
    assert_eq!(unclaimed, json!([]));

    // INSPECT target=contract: the owner and the operator; another agent is told whose it is not.
    let (s, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(view["contract_hash"], body["contract_hash"]);
    assert_eq!(view["recipe_lineage"]["recipe_version"], "1");
    let (s, _) = r
        .get(
            "GET",
            &format!("/.well-known/agtp/contracts/{id}"),
            "tok-ops",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, no) = r
        .get("INSPECT", &format!("/?target=contract&id={id}"), "tok-b")
        .await;
    assert_eq!(
        (s.as_u16(), no["reason"].as_str()),
        (464, Some("contract-not-yours")),
        "{no}"
    );
    let (s, _) = r.get("INSPECT", "/contracts/syn_nope", "tok-a").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (parts, _) = r.call("DISCOVER", "/contracts", None, &[], None).await;
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
    // The negotiation reached no one.
    assert!(r.s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_carries_the_seeds_status_and_reason_a_receipt_and_an_event() {
    let r = Rcns::start("").await;
    let good = reserve(false);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p["endpoint"]);
        p
    };
    // The gate, lock by lock.
    let body = json!({"method": "PROPOSE", "parameters": good});
    let claim = FULL.join(" ");
    let no_consent = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[("authority-scope", &claim)],
            Some(&body),
        )
        .await;
    let b = assert_refused(
        &r,
        no_consent,
        464,
        "ERR_RCNS_REFUSED",
        Some("rcns-disabled"),
    )
    .await;
    assert_eq!(b["lock"], 2);
    let headers = [("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    let stranger = r
        .call("PROPOSE", "/", Some("tok-unknown"), &headers, Some(&body))
        .await;
    assert_eq!(
        assert_refused(&r, stranger, 464, "ERR_RCNS_REFUSED", Some("rcns-disabled")).await["lock"],
        3
    );
    let mute = r.propose("tok-mute", good.clone()).await;
    assert_eq!(
        assert_refused(&r, mute, 464, "ERR_RCNS_REFUSED", Some("rcns-disabled")).await["lock"],
        3
    );
    // rcns:negotiate granted, not claimed.
    let unclaimed = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                ("authority-scope", "erp:stock:reserve"),
            ],
            Some(&body),
        )
        .await;
    assert_eq!(
        assert_refused(
            &r,
            unclaimed,
            464,
            "ERR_RCNS_REFUSED",
            Some("rcns-disabled")
        )
        .await["lock"],
        3
    );
    let low = r.propose("tok-low", good.clone()).await;
    assert_eq!(
        assert_refused(
            &r,
            low,
            464,
            "ERR_RCNS_REFUSED",
            Some("trust-tier-insufficient")
        )
        .await["lock"],
        4
    );

    // The evaluation, in the seed's order.
    let cases: Vec<(Value, u16, &str, Option<&str>)> = vec![
        (
            with(&|e| e["method"] = json!("reserve")),
            459,
            "ERR_RCNS_METHOD",
            None,
        ),
        (
            with(&|e| e["method"] = json!("BOOK")),
            459,
            "ERR_RCNS_METHOD",
            None,
        ),
        (
            with(&|e| e["path"] = json!("/stock/../reservations")),
            460,
            "ERR_RCNS_PATH",
            None,
        ),
        (
            with(&|e| e["path"] = json!("/stock-reservations?x=1")),
            460,
            "ERR_RCNS_PATH",
            None,
        ),
        (
            with(&|e| {
                e.as_object_mut().unwrap().remove("semantic");
            }),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("semantic-invalid"),
        ),
        (
            with(&|e| e["output_schema"] = json!({"type": "nonsense"})),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("schema-invalid"),
        ),
        (
            with(&|e| e["path"] = json!("/stock-transfers")),
            463,
            "ERR_RCNS_REJECTED",
            Some("composition-impossible"),
        ),
        (
            json!({"endpoint": good["endpoint"], "method": "RESERVE"}),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("proposal-malformed"),
        ),
    ];
    for (params, status, code, reason) in cases {
        let answer = r.propose("tok-a", params).await;
        let b = assert_refused(&r, answer, status, code, reason).await;
        let attempt = b["rcns_attempt_id"].as_str().unwrap();
        let (s, rec) = r
            .get("INSPECT", &format!("/rcns-attempts/{attempt}"), "tok-a")
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            (rec["status"].as_u64(), rec["code"].as_str()),
            (Some(u64::from(status)), Some(code))
        );
    }
    // Composition-impossible names the patterns that come close.
    let b = assert_refused(
        &r,
        r.propose("tok-a", with(&|e| e["path"] = json!("/x"))).await,
        463,
        "ERR_RCNS_REJECTED",
        Some("composition-impossible"),
    )
    .await;
    assert_eq!(b["similar"][0]["recipe_name"], "reserve-stock");

    // Authority through the composition (seed 000 §3.7, §6.1), before anything runs.
    let narrow = assert_refused(
        &r,
        r.propose("tok-narrow", good.clone()).await,
        455,
        "ERR_RCNS_SCOPE_EXCEEDED",
        Some("scope-exceeded"),
    )
    .await;
    assert_eq!(narrow["required_scopes"], json!(["erp:allocations:write"]));
    let steps = assert_refused(
        &r,
        r.propose("tok-steps", good.clone()).await,
        455,
        "ERR_RCNS_SCOPE_EXCEEDED",
        Some("scope-exceeded"),
    )
    .await;
    assert_eq!(steps["required_scopes"], json!(["erp:stock:reserve"]));
    let partial = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                (
                    "authority-scope",
                    "rcns:negotiate erp:stock:reserve erp:items:write",
                ),
            ],
            Some(&body),
        )
        .await;
    let b = assert_refused(
        &r,
        partial,
        262,
        "ERR_RCNS_SCOPE_REQUIRED",
        Some("scope-required"),
    )
    .await;
    assert_eq!(b["required_scopes"], json!(["erp:allocations:write"]));
    // A body over the PROPOSE limit (256 KiB) is refused unread (as agent b: agent a has
    // used up its PROPOSE rate in this test).
    let huge = json!({"method": "PROPOSE", "parameters": {"pad": "x".repeat(300 * 1024)}});
    let big = r
        .call("PROPOSE", "/", Some("tok-b"), &headers, Some(&huge))
        .await;
    assert_refused(&r, big, 413, "ERR_BODY_TOO_LARGE", None).await;
    // None of it made a contract.
    let (_, list) = r.get("DISCOVER", "/contracts", "tok-ops").await;
    assert_eq!(list, json!([]));
}

/// A `Session-Id` that is no session token (or two of them) is refused, not replaced by a
/// new session the agent did not ask for (issue 44, docs/decisions.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_session_id_is_refused_not_replaced() {
    let r = Rcns::start("").await;
    let claim = scopes_of("tok-a").join(" ");
    let body = json!({"method": "PROPOSE", "task_id": "task-1", "parameters": reserve(false)});
    let long = "s".repeat(129);
    for sessions in [
        &["bad id!"][..],
        &["a/b"],
        &["ses-1", "ses-2"],
        &[long.as_str()],
    ] {
        let mut headers = vec![("allow-rcns", "true"), ("authority-scope", claim.as_str())];
        headers.extend(sessions.iter().map(|s| ("session-id", *s)));
        let answer = r
            .call("PROPOSE", "/", Some("tok-a"), &headers, Some(&body))
            .await;
        let b = assert_refused(
            &r,
            answer,
            400,
            "ERR_RCNS_PROPOSAL",
            Some("proposal-malformed"),
        )
        .await;
        assert!(
            b["detail"].as_str().unwrap().contains("Session-Id"),
            "{sessions:?}: {b}"
        );
    }
    // A well-formed one names the session the contract belongs to.
    let mut headers = vec![("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    headers.push(("session-id", "ses-mine"));
    let (parts, b) = r
        .call("PROPOSE", "/", Some("tok-a"), &headers, Some(&body))
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{b}");
    assert_eq!(parts.headers["session-id"], "ses-mine");
}
