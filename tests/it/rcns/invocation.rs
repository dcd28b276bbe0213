//! Synthesized endpoints run their steps as enforced writes; a failed composition leaves the
//! SoR as it was.

use super::*;

/// Jobs the store has committed (`palisade_store_batch_jobs_sum`).
fn store_jobs(metrics: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with("palisade_store_batch_jobs_sum"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthesized_endpoint_runs_its_steps_as_enforced_writes() {
    let r = WithSor::start("").await;
    let (id, session, approved) = r.contract().await;
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let (_, metrics_before) = admin_get(r.p.admin, "/metrics").await;
    let sor_before = r.sor_app.requests();
    let (parts, out) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(parts.headers["contract-synthesized"], id.as_str());
    // Issue 35: a step is one plain enforced write. Its lease is granted in process, so the
    // SoR sees one pre-image GET and one write per step, and the store commits what a plain
    // write commits (the epoch advance, the receipt), plus what the invocation itself keeps.
    let sor_after = r.sor_app.requests();
    assert_eq!(
        (sor_after.0 - sor_before.0, sor_after.1 - sor_before.1),
        (2, 2),
        "(GETs, writes) the SoR answered for a two-step composition"
    );
    let (_, metrics_after) = admin_get(r.p.admin, "/metrics").await;
    // Two steps of two jobs each (the advance, the receipt) and the invocation's own two; a
    // grant adds none. (With the grant a lease-authority call of its own, it was 8, and the
    // SoR answered 4 GETs: docs/performance.md.)
    let jobs = store_jobs(&metrics_after) - store_jobs(&metrics_before);
    assert!(jobs <= 6.0, "store jobs for a two-step composition: {jobs}");
    // The answer is the recipe's output mapping over both steps' answers.
    assert_eq!(
        out["item"],
        json!({"id": "BOLT-9", "sku": "BOLT-9", "qty": 40, "warehouse": "BER-1"})
    );
    assert_eq!(out["allocation"]["AllocationID"], "SO-1234");
    assert_eq!(out["allocation"]["Quantity"], 40);
    // The SoR has both records, written by the two bound operations.
    let (s, item) = r.sor_get("/api/v2/items/BOLT-9").await;
    assert_eq!((s, item["qty"].as_u64()), (StatusCode::OK, Some(40)));
    let (s, alloc) = r.sor_get("/legacy/v1/allocations/SO-1234").await;
    assert_eq!(
        (s, alloc["ItemCode"].as_str()),
        (StatusCode::OK, Some("BOLT-9"))
    );
    // Each step left a signed commit receipt of its own lease, attributed to the contract.
    let receipts = step_receipts(&parts);
    assert_eq!(receipts.len(), 2);
    for (i, envelope) in receipts.iter().enumerate() {
        assert_receipt_verifies(envelope, "commit");
        let rec = &envelope["receipt"];
        assert_eq!(rec["synthesis_id"], id.as_str());
        assert_eq!(rec["contract_hash"], approved["contract_hash"]);
        assert_eq!(rec["negotiation_origin"], "propose");
        assert_eq!(rec["rcns_step"], i);
        assert_eq!(rec["method"], "PUT");
    }
    assert!(receipts[0]["receipt"]["sor_target_uri"]
        .as_str()
        .unwrap()
        .ends_with("/api/v2/items/BOLT-9"));
    assert!(receipts[1]["receipt"]["sor_target_uri"]
        .as_str()
        .unwrap()
        .ends_with("/legacy/v1/allocations/SO-1234"));
    // Both leases are the sidecar's, SNAPSHOT_RESTORE, for this caller.
    let events = drift_events(&r.p);
    let invoked: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_invoked")
        .collect();
    assert_eq!(
        (invoked.len(), invoked[0]["outcome"].as_str()),
        (1, Some("committed"))
    );
    let (_, metrics) = admin_get(r.p.admin, "/metrics").await;
    for line in [
        "palisade_rcns_contracts_synthesized_total{origin=\"propose\"} 1",
        "palisade_rcns_invocations_total{outcome=\"committed\"} 1",
        "palisade_rcns_events_total{event=\"rcns_contract_invoked\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    // Under the contract: the input schema, the session, the agent, the method and path.
    let bad = json!({"sku": "BOLT-9", "qty": -1, "warehouse": "BER-1", "order": "SO-1234"});
    let (parts, b) = r.invoke(&id, &session, &claim, &bad).await;
    assert_eq!(
        (parts.status.as_u16(), b["code"].as_str()),
        (422, Some("ERR_CONTRACT_INPUT")),
        "{b}"
    );
    assert_eq!(b["violationLocation"], "/qty");
    let (parts, b) = r.invoke(&id, "ses-other", &claim, &input).await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (464, Some("contract-not-yours")),
        "{b}"
    );
    let (parts, b) = r
        .send(
            "RESERVE",
            "/stock-reservations",
            &[
                ("contract-synthesized", "syn_unknown"),
                ("authority-scope", &claim),
            ],
            &input,
        )
        .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND, "{b}");
    // A scope dropped from the claim is refused before any step runs.
    let (parts, b) = r
        .invoke(
            &id,
            &session,
            "rcns:negotiate erp:stock:reserve erp:items:write",
            &input,
        )
        .await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (262, Some("scope-required")),
        "{b}"
    );
    // A revoked contract runs no more.
    let (status, _) = admin_post(r.p.admin, &format!("/admin/v1/rcns/contracts/{id}/revoke")).await;
    assert_eq!(status, StatusCode::OK);
    let (parts, b) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (464, Some("contract-revoked")),
        "{b}"
    );
    assert_receipt_verifies(&b["receipt"], "rejection");
    assert_eq!(b["receipt"]["receipt"]["synthesis_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composition_whose_second_step_fails_leaves_the_sor_as_it_was() {
    let r = WithSor::start("").await;
    let (id, session, _) = r.contract().await;
    let claim = FULL.join(" ");
    // BOLT-9 exists from an earlier reservation.
    let first = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    assert_eq!(
        r.invoke(&id, &session, &claim, &first).await.0.status,
        StatusCode::OK
    );
    let (_, before) = r.sor_get("/api/v2/items/BOLT-9").await;
    // Step 1 overwrites BOLT-9; step 2 is refused by the SoR (a closed order).
    let closed = json!({"sku": "BOLT-9", "qty": 7, "warehouse": "HAM-2", "order": "SO-0000"});
    let (parts, b) = r.invoke(&id, &session, &claim, &closed).await;
    assert_eq!(parts.status, StatusCode::CONFLICT, "{b}");
    assert_eq!(
        (b["code"].as_str(), b["reason"].as_str()),
        (Some("ERR_RCNS_STEP_FAILED"), Some("step-failed"))
    );
    assert_eq!(
        (b["step"].as_u64(), b["step_status"].as_u64()),
        (Some(1), Some(409))
    );
    assert_eq!(b["all_or_nothing"], true);
    // The first step's write and its compensation, both receipted; the SoR as it was.
    assert_eq!(b["receipts"].as_array().unwrap().len(), 1);
    assert_receipt_verifies(&b["receipts"][0], "commit");
    let comp = &b["compensated"][0];
    assert_eq!(comp["lease_id"], b["receipts"][0]["receipt"]["lease_id"]);
    assert_receipt_verifies(&comp["receipt"], "compensation");
    assert_eq!(
        comp["receipt"]["receipt"]["lease_id"],
        b["receipts"][0]["receipt"]["lease_id"]
    );
    let (_, after) = r.sor_get("/api/v2/items/BOLT-9").await;
    assert_eq!(after, before);
    let (s, _) = r.sor_get("/legacy/v1/allocations/SO-0000").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_receipt_verifies(&b["receipt"], "rejection");
    assert_eq!(b["receipt"]["receipt"]["synthesis_id"], id.as_str());

    // A new item (absent before): compensation removes it again.
    let fresh = json!({"sku": "NUT-3", "qty": 5, "warehouse": "BER-1", "order": "SO-0000"});
    let (parts, b) = r.invoke(&id, &session, &claim, &fresh).await;
    assert_eq!(parts.status, StatusCode::CONFLICT, "{b}");
    let (s, _) = r.sor_get("/api/v2/items/NUT-3").await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "the first step's record was removed"
    );
    let events = drift_events(&r.p);
    let outcomes: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_invoked")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["committed", "compensated", "compensated"]);
}

/// The example recipe, edited: version 2 sets the item only.
fn edit_recipe(b: &BundleFiles) {
    let mut lock = b.lock();
    let mut set = palisade::cli::sample_bundle::recipes();
    set["recipes"][0]["version"] = json!("2");
    set["recipes"][0]["description"] = json!("Sets an item's stock only.");
    set["recipes"][0]["steps"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    set["recipes"][0]["output"] = json!("{item: steps[0], allocation: `null`}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&b.lockfile, lock.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_runs_the_recipe_it_was_made_with_after_a_hot_swap() {
    let r = WithSor::start("").await;
    let (v1, _, _) = r.contract_with(true).await;
    edit_recipe(&r.b);
    let (status, doc) = admin_post(r.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    let (v2, _, b2) = r.contract_with(true).await;
    assert_eq!(b2["recipe_lineage"]["recipe_version"], "2");
    let claim = FULL.join(" ");
    let input =
        |order: &str| json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": order});
    // v1, made before the swap, still allocates; v2 sets the item only.
    let (parts, out) = r.invoke(&v1, "", &claim, &input("SO-1111")).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(step_receipts(&parts).len(), 2);
    assert_eq!(
        r.sor_get("/legacy/v1/allocations/SO-1111").await.0,
        StatusCode::OK
    );
    let (parts, out) = r.invoke(&v2, "", &claim, &input("SO-2222")).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(out["allocation"], Value::Null);
    assert_eq!(step_receipts(&parts).len(), 1);
    assert_eq!(
        r.sor_get("/legacy/v1/allocations/SO-2222").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_answer_is_refused_after_the_write_is_compensated_too() {
    // The recording upstream answers `{"ok":true}` to everything: the legacy operation's
    // output contract refuses that answer after the write was sent, so both steps are undone.
    let r = Rcns::start("").await;
    let (_, c) = r.propose("tok-a", reserve(true)).await;
    let id = c["synthesis_id"].as_str().unwrap();
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = [
        ("contract-synthesized", id),
        ("authority-scope", claim.as_str()),
    ];
    let (parts, b) = r
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &headers,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{b}");
    assert_eq!(
        (b["step"].as_u64(), b["step_code"].as_str()),
        (Some(1), Some("ERR_CONTRACT_OUTPUT"))
    );
    let compensated: Vec<&str> = b["compensated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["receipt"]["receipt"]["sor_target_uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        compensated,
        [
            "https://erp.example.com/legacy/v1/allocations/SO-1234",
            "https://erp.example.com/api/v2/items/BOLT-9"
        ],
        "last first"
    );
    // What the upstream saw: the two writes, then the two snapshots put back, last first,
    // each fenced with a newer epoch than the write it undoes.
    let puts: Vec<(String, String)> =
        r.s.upstream
            .requests()
            .into_iter()
            .filter(|s| s.method == "PUT")
            .map(|s| {
                let fence = s.headers["agent-fence-token"].to_str().unwrap().to_owned();
                (s.path_and_query, fence)
            })
            .collect();
    assert_eq!(
        puts,
        [
            ("/api/v2/items/BOLT-9".into(), "1".into()),
            ("/legacy/v1/allocations/SO-1234".into(), "1".into()),
            ("/legacy/v1/allocations/SO-1234".into(), "2".into()),
            ("/api/v2/items/BOLT-9".into(), "2".into()),
        ]
    );
}

/// An operator's rule that would hold a composed step (SPEC §15; the recipe's second step is
/// the legacy operation itself): a composition cannot wait for people half-way, so the step is
/// refused (`ERR_POLICY_DENIED`, the rule named, a `policy` drift event), the step before it
/// is compensated, and the SoR is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_an_operator_rule_would_hold_is_refused_and_the_composition_undone() {
    let rules_dir = tempfile::tempdir().unwrap();
    let rules = rules_dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"allocations-wait\"\non = [\"PUT /legacy/v1/allocations/{id}\"]\naction = \"hold\"\n",
    )
    .unwrap();
    let more = format!("[rules]\nfile = \"{}\"\n", rules.display());
    let r = WithSor::start_with("", &more, None).await;
    let (id, session, _) = r.contract().await;
    let claim = FULL.join(" ");
    let (_, before) = r.sor_get("/api/v2/items/BOLT-9").await;
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let (parts, b) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN, "{b}");
    assert_eq!(b["code"], "ERR_RCNS_STEP_FAILED", "{b}");
    assert_eq!(b["step_code"], "ERR_POLICY_DENIED", "{b}");
    assert_eq!(b["step"], 1, "{b}");
    // The first step went and was undone; the second never reached the SoR.
    assert_receipt_verifies(&b["compensated"][0]["receipt"], "compensation");
    let (_, after) = r.sor_get("/api/v2/items/BOLT-9").await;
    assert_eq!(after, before);
    let (s, _) = r.sor_get("/legacy/v1/allocations/SO-1234").await;
    assert_eq!(s, StatusCode::NOT_FOUND, "the held step reached the SoR");
    let events = drift_events(&r.p);
    let e = events
        .iter()
        .find(|e| e["code"] == "ERR_POLICY_DENIED")
        .expect("a policy event for the refused step");
    assert_eq!(e["category"], "policy");
    assert_eq!(e["diagnostics"]["rule"], "allocations-wait");
}
