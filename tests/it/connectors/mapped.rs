//! Writes mapped to the legacy operation and back; refusals, unmappable answers, bundles that
//! do not load.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_write_reaches_the_legacy_operation_mapped_and_its_answer_comes_back_mapped() {
    let c = Connected::start("unbound_writes = \"deny\"\n").await;
    let conn = &c.lock["connections"][0];
    // The lease names the request the SoR receives (docs/decisions.md).
    let lease = c.lease("/legacy/items/1/allocate?trace=1", 1);
    let (parts, doc) = c
        .post("/v2/items/1/allocations?trace=1", &lease, V2_BODY)
        .await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    // The answer, mapped back: {"ok":true} from the SoR is {"allocated":true} for the agent.
    assert_eq!(doc, json!({"allocated": true}));
    assert_eq!(
        parts.headers.get("content-length").unwrap(),
        &serde_json::to_vec(&doc).unwrap().len().to_string()
    );
    // What the upstream received: one POST, at the legacy path with the query kept, with the
    // mapped body exactly and a length that is the mapped body's.
    let seen = c.writes();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].method, "POST");
    assert_eq!(seen[0].path_and_query, "/legacy/items/1/allocate?trace=1");
    let mapped = br#"{"ItemCode":"B","Location":"BER-1","Quantity":5}"#;
    assert_eq!(seen[0].body_sha256, sha256_hex(mapped));
    assert_eq!(
        seen[0].headers.get("content-length").unwrap(),
        &mapped.len().to_string()
    );
    // The commit receipt is for the legacy target and names both contracts and the connector.
    let receipt = receipt_of(&parts);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(
        receipt["sor_target_uri"],
        format!("{BASE}/legacy/items/1/allocate?trace=1")
    );
    let caps = &c.lock["capabilities"];
    assert_eq!(
        receipt["connector"],
        json!({"source_contract_digest": caps["alloc.v2"]["contractDigest"],
               "target_contract_digest": caps["alloc.v1"]["contractDigest"],
               "connector_digest": conn["connectorDigest"],
               "response_connector_digest": conn["response"]["connectorDigest"]})
    );
    assert_eq!(receipt["lockfile_digest"], c.b.digest);

    // The fence is the legacy resource's: the same epoch again is stale.
    let lease = c.lease("/legacy/items/1/allocate", 1);
    let (parts, _) = c.post("/v2/items/1/allocations", &lease, V2_BODY).await;
    assert_eq!(parts.status, StatusCode::CONFLICT);
    assert_eq!(c.writes().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_refusals_have_their_codes_receipts_and_events_and_reach_no_one() {
    let c = Connected::start("").await;
    let legacy = c.lease("/legacy/items/2/allocate", 1);
    let conn = &c.lock["connections"][0];

    // (body, code, status, location): the source contract, the connector's precondition
    // (capital SKUs), the target contract after mapping (`Location` pattern).
    let cases = [
        (
            r#"{"sku":"B","qty":"5","warehouse":"BER-1"}"#,
            "ERR_CONTRACT_INPUT",
            422,
            "/qty",
        ),
        (
            r#"{"sku":"bolt m8","qty":5,"warehouse":"BER-1"}"#,
            "ERR_CONNECTOR_FAILED",
            422,
            "/sku",
        ),
        (
            r#"{"sku":"B","qty":5,"warehouse":"berlin-7777"}"#,
            "ERR_CONNECTOR_POSTCONDITION",
            422,
            "/Location",
        ),
    ];
    for (body, code, status, location) in cases {
        let (parts, doc) = c.post("/v2/items/2/allocations", &legacy, body).await;
        assert_eq!(parts.status.as_u16(), status, "{code}: {doc}");
        assert_eq!(doc["code"], code, "{doc}");
        assert_eq!(doc["violationLocation"], location, "{doc}");
        for value in ["bolt m8", "berlin-7777"] {
            assert!(!doc.to_string().contains(value), "no value echoed: {doc}");
        }
        assert_receipt_verifies(&doc["receipt"], "rejection");
        assert_eq!(
            doc["receipt"]["receipt"]["connector"]["connector_digest"],
            conn["connectorDigest"]
        );
    }
    // The lease must name the legacy target: one for the v2 path is refused.
    let v2_lease = c.lease("/v2/items/2/allocations", 1);
    let (parts, doc) = c.post("/v2/items/2/allocations", &v2_lease, V2_BODY).await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
    assert_eq!(doc["code"], "ERR_TARGET_MISMATCH");
    // A dry run is mapped and checked, never sent; its answer is the sidecar's, not mapped.
    let dry = lease_for(&c.agent, "/legacy/items/2/allocate", 1, |f| {
        f.insert("recovery_mode".into(), json!("DRY_RUN_SHADOW"));
    });
    let (parts, doc) = c.post("/v2/items/2/allocations", &dry, V2_BODY).await;
    assert!(parts.status.is_success(), "{doc}");
    let receipt = receipt_of(&parts);
    assert_eq!(receipt["kind"], "dry-run", "{receipt}");
    assert_eq!(
        receipt["connector"]["connector_digest"],
        conn["connectorDigest"]
    );
    assert!(c.writes().is_empty(), "{:?}", c.writes());

    // A response the connector maps into something the v2 contract refuses: the write has
    // happened, so the 502 carries its commit receipt beside the rejection.
    let (parts, doc) = c.post("/v2/strict/2/allocations", &legacy, V2_BODY).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONNECTOR_POSTCONDITION");
    assert_eq!(doc["violationLocation"], "/allocated");
    assert_eq!(doc["upstream_status"], 200);
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_receipt_verifies(&doc["commit_receipt"], "commit");
    assert_eq!(c.writes().len(), 1);

    // Drift events: the connector's digest is what was expected; the evidence is the payload's
    // digest, never the payload.
    let events = drift_events(&c.s.p);
    let failed = events
        .iter()
        .find(|e| e["code"] == "ERR_CONNECTOR_FAILED")
        .expect("a connector-failed drift event");
    assert_eq!(failed["expectedDigest"], conn["connectorDigest"]);
    assert_eq!(failed["bindingId"], c.b.binding_id);
    assert_eq!(
        failed["evidenceDigest"],
        format!(
            "sha-256:{}",
            sha256_hex(br#"{"sku":"bolt m8","qty":5,"warehouse":"BER-1"}"#)
        )
    );
    let post = events
        .iter()
        .filter(|e| e["code"] == "ERR_CONNECTOR_POSTCONDITION")
        .count();
    assert_eq!(post, 2, "request and response postconditions: {events:?}");
    assert!(!serde_json::to_string(&events)
        .unwrap()
        .contains("berlin-7777"));
}

/// The answer side under each policy: `notify` passes an answer the connector cannot map as
/// it came, with a drift event; an answer that breaks the legacy output contract is 502
/// `ERR_CONTRACT_OUTPUT` from the write path, its event naming the legacy contract.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmappable_answers_under_notify_and_fail_closed() {
    let c = Connected::start("").await;
    let lease = c.lease("/legacy/items/3/allocate", 1);
    let (parts, doc) = c.post("/v2/notify/3/allocations", &lease, V2_BODY).await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    assert_eq!(doc, json!({"ok": true}), "passed unmapped");
    assert_receipt_verifies(&envelope(&parts), "commit");

    // The legacy output contract is the write path's to apply, before any mapping.
    let lease = c.lease("/legacy/badout/3/allocate", 1);
    let (parts, doc) = c.post("/v2/badout/3/allocations", &lease, V2_BODY).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_OUTPUT");
    assert_eq!(doc["violationLocation"], "");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(c.writes().len(), 2, "each write reached the upstream once");

    let events = drift_events(&c.s.p);
    let notified = events
        .iter()
        .find(|e| e["code"] == "ERR_CONNECTOR_POSTCONDITION")
        .expect("the notify policy's drift event");
    assert_eq!(notified["actionTaken"], "notify");
    let output = events
        .iter()
        .find(|e| e["code"] == "ERR_CONTRACT_OUTPUT")
        .expect("the output contract's drift event");
    assert_eq!(
        output["expectedDigest"],
        c.lock["capabilities"]["badout.v1"]["contractDigest"]
    );
    assert_eq!(output["actionTaken"], "blocked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_with_an_unqualified_or_t3_connector_does_not_load() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (b, mut lock) = bundle(bundle_dir.path());
    // An expired qualification and a T3 connector, each named by the loader.
    let v2 = b.contract("alloc.v2");
    let v1 = b.contract("alloc.v1");
    let t3 = json!({"id": "urn:test:c/t3", "class": "T3", "purpose": "structural-adaptation",
        "sourceDigest": digest(&v2), "targetDigest": digest(&v1),
        "transform": {"lang": "python", "code": "print(1)"}, "qualification": "urn:test:q"});
    lock["connections"][0]["connectorDigest"] = json!(put_file(&b.contracts, &t3));
    let expired = json!({"subjectUri": "urn:test:c/strict", "subjectDigest": lock["connections"][1]["connectorDigest"],
        "decision": "qualified", "expiry": "2020-01-01T00:00:00Z"});
    lock["connections"][1]["connectorQualificationDigest"] =
        json!(put_file(&b.contracts, &expired));
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let out = lock_check(&b.lockfile, &b.contracts);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("T3 connectors cannot be enforced"), "{text}");
    assert!(text.contains("the qualification has expired"), "{text}");
}
