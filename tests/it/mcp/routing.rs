//! Fallback deployments, required keys, absent structured content, the inverse header.

use super::*;

/// SPEC §7 `qualified-fallback` on a read tool: a result that breaks the output contract is
/// replaced by the answer of the binding's fallback deployment (another SDK server, one that
/// meets the contract); with the fallback gone, the call is refused with a receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_tool_falls_back_to_its_qualified_deployment() {
    let server = McpServer::start().await;
    let mut backup = McpServer::start_with(&[("ADD_CAP", "100")]).await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = edit_lock(erp_tools(bundle_dir.path()), |lock| {
        lock["capabilities"]["add"]["runtime"] = json!({
            "onDrift": "qualified-fallback", "onError": "route-to-error", "timeout": "PT10S",
            "fallback": format!("http://127.0.0.1:{}", backup.port)});
    });
    let p = sidecar(&server, &b);
    let steps = json!([
        {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
        {"op": "call", "name": "add", "args": {"a": 900, "b": 5}},
    ]);
    let out = client(p.url("/mcp"), "2026-07-28", steps.clone()).await;
    assert_eq!(out[0]["result"]["result"], 5, "{out:?}");
    // 905 breaks `maximum: 100`; only the backup answers 100.
    assert_eq!(out[1]["result"]["result"], 100, "{out:?}");
    let events = drift_events(&p);
    assert!(
        events.iter().any(|e| e["code"] == "ERR_CONTRACT_OUTPUT"
            && e["actionTaken"] == "fallback"
            && e["observedIdentifier"] == "tools/call add"),
        "{events:?}"
    );
    // Without its fallback the breach is refused.
    let _ = backup.child.kill();
    let _ = backup.child.wait();
    let out = client(p.url("/mcp"), "2026-07-28", steps).await;
    assert_eq!(out[0]["result"]["result"], 5, "{out:?}");
    let e = &out[1]["error"]["data"];
    assert_eq!(e["code"], "ERR_CONTRACT_OUTPUT", "{out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
}

/// A tool whose contract says `idempotencyKey: required` is refused without a key (SPEC
/// §5.6), before anything moves, and runs with one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_that_requires_a_key_is_refused_without_one() {
    let server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let mut c = contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"]}),
        "write",
        "compensable",
        "required",
    );
    c["state"] = json!({"handle": "sku"});
    let b = write_mcp_bundle(
        bundle_dir.path(),
        "urn:palisade:test:mcp/3",
        &[("set_stock", "set_stock", c)],
    );
    let p = sidecar(&server, &b);
    let mut keyed = meta(tool_lease("set_stock", 1));
    keyed["idempotencyKey"] = json!("order-5");
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "set_stock", "args": {"sku": "K-5", "qty": 1},
             "meta": meta(tool_lease("set_stock", 1))},
            {"op": "call", "name": "set_stock", "args": {"sku": "K-5", "qty": 2}, "meta": keyed},
        ]),
    )
    .await;
    let e = &out[0]["error"]["data"];
    assert_eq!(e["code"], "ERR_IDEMPOTENCY_KEY_REQUIRED", "{out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert_receipt_verifies(&out[1]["meta"]["commitReceipt"], "commit");
    assert_eq!(server.executions(), vec!["set_stock K-5 2"]);
    assert!(drift_events(&p)
        .iter()
        .any(|e| e["code"] == "ERR_IDEMPOTENCY_KEY_REQUIRED"));
}

/// Issue 15, interop: a tool whose output contract accepts anything passes a result without
/// `structuredContent` (a constraining one still refuses it), and a tool call's inverse may
/// travel in `Agent-Compensation-Inverse` beside `_meta` (SPEC §11) — staged, and used by
/// compensation — but not in both at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absent_structured_content_and_the_inverse_header_on_tool_calls() {
    let server = McpServer::start().await;
    let write = || {
        let mut c = contract(
            json!({"$schema": DIALECT, "type": "object"}),
            "write",
            "compensable",
            "optional",
        );
        c["state"] = json!({"handle": "sku"});
        c
    };
    // A note is undone by setting the stock back: its contract declares that inverse tool
    // (`operational.inverseTool`, SPEC §5.4), so one inverse serves both tools here.
    let mut accept_all = contract_with_output(
        json!("unknown"),
        json!({"$schema": DIALECT, "title": "anything"}),
        "write",
        "compensable",
    );
    accept_all["operational"]["inverseTool"] = json!("set_stock");
    let dir_a = tempfile::tempdir().unwrap();
    let a = write_mcp_bundle(
        dir_a.path(),
        "urn:palisade:test:mcp/15",
        &[
            ("set_stock", "set_stock", write()),
            ("log_note", "log_note", accept_all),
        ],
    );
    let p = sidecar_with(&server, &a, "[ptcl]\nauthority = true\n");
    let agent = KeyPair::from_seed(AGENT_SEED);
    let inverse = json!({"tool": "set_stock", "arguments": {"sku": "H-1", "qty": 0}});
    let digest =
        palisade_policy::digest::Sha256Digest::of(&palisade_policy::canon::to_vec(&inverse));
    let lease = |tool: &str| -> Value {
        let b64 = lease_for(&agent, &format!("/mcp/tools/{tool}"), 1, |f| {
            f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
        });
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap()
    };
    let stock_lease = lease("set_stock");
    let header = json!({
        "Agent-Compensation-Inverse": URL_SAFE_NO_PAD.encode(palisade_policy::canon::to_vec(&inverse)),
    });
    let out = client_with_headers(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "log_note", "args": {"text": "hi"},
             "meta": {"compensationLease": lease("log_note")}},
            {"op": "call", "name": "set_stock", "args": {"sku": "H-1", "qty": 3},
             "meta": {"compensationLease": stock_lease}},
            {"op": "call", "name": "set_stock", "args": {"sku": "H-2", "qty": 4},
             "meta": {"compensationLease": lease("set_stock"), "compensationInverse": inverse}},
        ]),
        header,
    )
    .await;
    // Text only, no structuredContent, under an accept-all output contract: a commit.
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(out[0]["result"], json!(["noted: hi"]), "{out:?}");
    assert_receipt_verifies(&out[0]["meta"]["commitReceipt"], "commit");
    // The inverse from the header was staged (check 10 passed against the lease's hash).
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert_receipt_verifies(&out[1]["meta"]["commitReceipt"], "commit");
    // Carried twice: refused, with a receipt, and never run.
    let e = &out[2]["error"]["data"];
    assert_eq!(e["code"], "ERR_BAD_REQUEST", "{out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    // ERR_BAD_REQUEST is a malformed request, not drift: no event (as for any 400 of ours).
    assert!(!drift_events(&p)
        .iter()
        .any(|ev| ev["code"] == "ERR_BAD_REQUEST"));
    // Compensation sends the inverse that came in the header.
    let id = stock_lease["lease_id"].as_str().unwrap();
    let (status, body, _) = compensate(&p, &json!({"lease_id": id}).to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        server.executions(),
        vec!["log_note hi", "set_stock H-1 3", "set_stock H-1 0"]
    );

    // A constraining output contract still refuses a result without structuredContent.
    let dir_b = tempfile::tempdir().unwrap();
    let b = write_mcp_bundle(
        dir_b.path(),
        "urn:palisade:test:mcp/15b",
        &[(
            "log_note",
            "log_note",
            contract_with_output(
                json!("unknown"),
                json!({"$schema": DIALECT, "type": "object"}),
                "read",
                "reversible",
            ),
        )],
    );
    let p = sidecar(&server, &b);
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([{"op": "call", "name": "log_note", "args": {"text": "again"}}]),
    )
    .await;
    let e = &out[0]["error"]["data"];
    assert_eq!(e["code"], "ERR_CONTRACT_OUTPUT", "{out:?}");
    assert_eq!(e["violationLocation"], "/structuredContent");
}
