//! Tool calls through the write path: leases and fences over both transports, progress,
//! headers that disagree with the body, interim answers, idempotency keys and dry runs.

use super::*;

/// The acceptance scenario of issue 6 in one protocol generation.
async fn leases_and_fences_for_tool_calls(mode: &'static str) {
    let (server, _bundle, p) = setup(erp_tools).await;
    let steps = json!([
        {"op": "list"},
        {"op": "call", "name": "add", "args": {"a": 20, "b": 22}},
        {"op": "call", "name": "set_stock", "args": {"sku": "SKU-1", "qty": 5}},
        {"op": "call", "name": "set_stock", "args": {"sku": "SKU-1", "qty": 6},
         "meta": meta(tool_lease("set_stock", 1))},
        {"op": "call", "name": "set_stock", "args": {"sku": "SKU-1", "qty": 7},
         "meta": meta(tool_lease("set_stock", 1))},
        {"op": "call", "name": "set_stock", "args": {"sku": "SKU-2", "qty": 8},
         "meta": meta(tool_lease("set_stock", 1))},
        {"op": "call", "name": "set_stock", "args": {"sku": "SKU-1", "qty": -987654},
         "meta": meta(tool_lease("set_stock", 2))},
        {"op": "call", "name": "add", "args": {"a": 912345, "b": 7}},
    ]);
    let out = client(p.url("/mcp"), mode, steps).await;
    assert_eq!(out.len(), 8, "{out:?}");
    // The output contract on a complete result (JSON or SSE reply alike).
    let e = &out[7]["error"]["data"];
    assert_eq!(e["code"], "ERR_CONTRACT_OUTPUT", "{out:?}");
    assert_eq!(e["violationLocation"], "/structuredContent/result");
    assert!(!e.to_string().contains("912352"), "no value echoed: {e}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    assert_eq!(out[0]["tools"], json!(["add", "set_stock", "count_slowly"]));
    assert_eq!(out[1]["result"]["result"], 42, "a read tool needs no lease");

    // No lease: the SDK client surfaces the JSON-RPC error with the problem as data.
    let e = &out[2]["error"];
    assert_eq!(e["code"], -32001, "{out:?}");
    assert_eq!(e["data"]["code"], "ERR_LEASE_REQUIRED");
    assert_receipt_verifies(&e["data"]["receipt"], "rejection");

    // With a lease: executed once, and the answer is the server's, with its commit receipt.
    assert_eq!(out[3]["is_error"], false, "{out:?}");
    let r = &verified_receipt(&out[3]["meta"]["commitReceipt"]);
    assert_eq!(r["kind"], "commit", "verified above");
    assert_eq!(r["sor_target_uri"], format!("{BASE}/mcp/tools/set_stock"));
    assert_eq!(r["cas_fence_epoch"], 1);
    // The same epoch again on the same sku: stale, fenced per handle.
    assert_eq!(
        out[4]["error"]["data"]["code"], "ERR_STALE_FENCE_EPOCH",
        "{out:?}"
    );
    assert_eq!(out[4]["error"]["data"]["current_epoch"], 1);
    assert_receipt_verifies(&out[4]["error"]["data"]["receipt"], "rejection");
    // Another sku is another resource.
    assert_eq!(out[5]["is_error"], false, "{out:?}");
    // Check 9 on the arguments: 422-class refusal, no value echoed.
    let e = &out[6]["error"]["data"];
    assert_eq!(e["code"], "ERR_CONTRACT_INPUT", "{out:?}");
    assert_eq!(e["violationLocation"], "/qty");
    assert!(!e.to_string().contains("987654"), "no value echoed: {e}");

    // The server ran exactly the two permitted writes.
    assert_eq!(
        server.executions(),
        vec!["set_stock SKU-1 6", "set_stock SKU-2 8"]
    );

    let events = drift_events(&p);
    for code in [
        "ERR_LEASE_REQUIRED",
        "ERR_STALE_FENCE_EPOCH",
        "ERR_CONTRACT_INPUT",
    ] {
        assert!(
            events.iter().any(|e| e["code"] == code
                && e["observedIdentifier"] == "tools/call set_stock"
                && e["bindingId"] == "urn:palisade:test:mcp/1"),
            "{code}: {events:?}"
        );
    }
    assert!(
        events.iter().any(|e| e["code"] == "ERR_CONTRACT_OUTPUT"
            && e["observedIdentifier"] == "tools/call add"
            && e["violationLocation"] == "/structuredContent/result"
            && e["actionTaken"] == "blocked"),
        "{events:?}"
    );
    // The fence the lease names, per handle.
    let (_, f) = admin_get(p.admin, "/admin/v1/fences/mcp%3Atool%2Fset_stock%2FSKU-1").await;
    assert!(f.contains("\"epoch\":1"), "{f}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_leased_and_fenced_stateless_2026_07_28() {
    leases_and_fences_for_tool_calls("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_are_leased_and_fenced_with_sessions_and_sse() {
    leases_and_fences_for_tool_calls("legacy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_streams_through_before_the_tool_finishes() {
    let (_server, _bundle, p) = setup(erp_tools).await;
    let out = client(
        p.url("/mcp"),
        "legacy",
        json!([{"op": "call_progress", "name": "count_slowly", "args": {"n": 4}}]),
    )
    .await;
    let r = &out[0];
    assert_eq!(r["result"]["result"], 4, "{r}");
    let first = r["progress_at"][0].as_f64().unwrap();
    let done = r["done_at"].as_f64().unwrap();
    assert_eq!(r["progress_at"].as_array().unwrap().len(), 4, "{r}");
    // The tool takes 1.2 s; the first notification must not wait for the end.
    assert!(
        first + 0.6 < done,
        "progress arrived at {first}s, result at {done}s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_header_that_disagrees_with_the_body_is_refused() {
    let (server, _bundle, p) = setup(erp_tools).await;
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "set_stock", "arguments": {"sku": "X", "qty": 1},
                                 "_meta": meta(tool_lease("set_stock", 1))}});
    for (method, name) in [("tools/list", "set_stock"), ("tools/call", "add")] {
        let req = Request::post(p.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .header("mcp-name", name)
            .body(full(body.to_string()))
            .unwrap();
        let (parts, bytes) = send(&http1_client(), req).await;
        assert_eq!(parts.status, StatusCode::BAD_REQUEST);
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["id"], 7);
        assert_eq!(v["error"]["data"]["code"], "ERR_MCP_METHOD_MISMATCH", "{v}");
        assert_receipt_verifies(&v["error"]["data"]["receipt"], "rejection");
    }
    // A tool call hidden in a batch is refused too.
    let batch = json!([body]);
    let req = Request::post(p.url("/mcp"))
        .header("content-type", "application/json")
        .body(full(batch.to_string()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST);
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["error"]["data"]["code"], "ERR_BAD_REQUEST", "{v}");
    assert_receipt_verifies(&v["error"]["data"]["receipt"], "rejection");
    // A body the strict parser refuses (a duplicate member: the server could read the other
    // one) goes nowhere, nor does a tool call that names no tool.
    let dup = r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"add","name":"set_stock","arguments":{}}}"#;
    let nameless = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"arguments":{}}}"#;
    for (body, status, id) in [
        (dup, StatusCode::BAD_REQUEST, Value::Null),
        (nameless, StatusCode::OK, json!(9)),
    ] {
        let req = Request::post(p.url("/mcp"))
            .header("content-type", "application/json")
            .body(full(body))
            .unwrap();
        let (parts, bytes) = send(&http1_client(), req).await;
        assert_eq!(parts.status, status, "{body}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["id"], id, "{v}");
        assert_eq!(v["error"]["code"], -32001, "{v}");
        assert_eq!(v["error"]["data"]["code"], "ERR_BAD_REQUEST", "{v}");
        assert_receipt_verifies(&v["error"]["data"]["receipt"], "rejection");
    }
    assert!(server.executions().is_empty());
    let events = drift_events(&p);
    // A malformed request is not drift (ERR_BAD_REQUEST has no drift category): receipts only.
    assert!(
        !events.iter().any(|e| e["code"] == "ERR_BAD_REQUEST"),
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e["code"] == "ERR_MCP_METHOD_MISMATCH" && e["category"] == "representation")
            .count(),
        2,
        "{events:?}"
    );
}

/// RICH §3.2 / SPEC §7: an `input_required` answer to a write tool is relayed, its receipt is
/// of kind `interim` (not a commit), and its epoch stays spent: the retry that completes the
/// call needs a newer lease, and only that retry is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interim_answer_to_a_write_is_not_a_commit() {
    let (server, _bundle, p) = setup(confirm_tools).await;
    let args = json!({"sku": "SKU-7", "qty": 70});
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call_raw", "name": "confirm_stock", "args": args,
             "meta": meta(tool_lease("confirm_stock", 1))},
            {"op": "call_raw", "name": "confirm_stock", "args": args,
             "meta": meta(tool_lease("confirm_stock", 1)), "request_state": "$last"},
            {"op": "call_raw", "name": "confirm_stock", "args": args,
             "meta": meta(tool_lease("confirm_stock", 2)), "request_state": "$last"},
        ]),
    )
    .await;
    let first = &out[0]["raw"];
    assert_eq!(first["resultType"], "input_required", "{out:?}");
    let r = &verified_receipt(&first["_meta"]["commitReceipt"]);
    assert_eq!(r["kind"], "interim", "verified above");
    assert_eq!(r["outcome"], "interim");
    assert_eq!(r["cas_fence_epoch"], 1);
    // The epoch the interim call spent is not given back.
    assert_eq!(
        out[1]["error"]["data"]["code"], "ERR_STALE_FENCE_EPOCH",
        "{out:?}"
    );
    let done = &out[2]["raw"];
    assert_eq!(done["resultType"], "complete", "{out:?}");
    assert_eq!(done["isError"], false);
    assert_receipt_verifies(&done["_meta"]["commitReceipt"], "commit");
    assert_eq!(server.executions(), vec!["confirm_stock SKU-7 70"]);
    assert_eq!(fence_of(&p, "mcp:tool/confirm_stock/SKU-7").await, 2);
    // The audit chain verifies with the interim receipt in it: interim, rejection, commit.
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok && out.contains("receipt log of 3 entries"), "{out}{err}");
}

/// SPEC §5.6 and §5.4 on tool calls: a key (here in `_meta.idempotencyKey`) replays the
/// stored answer to a retry with another JSON-RPC id, refuses reuse with other arguments, and
/// a DRY_RUN_SHADOW call is answered without reaching the server or moving its fence.
async fn keys_and_dry_runs_on_tool_calls(mode: &'static str) {
    let (server, _bundle, p) = setup(confirm_tools).await;
    let keyed = |lease: Value| {
        let mut m = meta(lease);
        m["idempotencyKey"] = json!("order-77");
        m
    };
    let out = client(
        p.url("/mcp"),
        mode,
        json!([
            {"op": "call", "name": "set_stock", "args": {"sku": "K-1", "qty": 3},
             "meta": keyed(tool_lease("set_stock", 1))},
            {"op": "call", "name": "set_stock", "args": {"sku": "K-1", "qty": 3},
             "meta": keyed(tool_lease("set_stock", 1))},
            {"op": "call", "name": "set_stock", "args": {"sku": "K-1", "qty": 4},
             "meta": keyed(tool_lease("set_stock", 2))},
            {"op": "call", "name": "set_stock", "args": {"sku": "K-9", "qty": 1},
             "meta": meta(tool_lease_mode("set_stock", 5, "DRY_RUN_SHADOW"))},
        ]),
    )
    .await;
    let first = &out[0];
    assert_eq!(first["is_error"], false, "{mode}: {out:?}");
    let receipt = &verified_receipt(&first["meta"]["commitReceipt"]);
    assert_eq!(receipt["kind"], "commit", "verified above");
    assert_eq!(receipt["cas_fence_epoch"], 1);
    // The retry gets the stored answer and the same receipt; the server ran it once.
    assert_eq!(out[1]["result"], first["result"], "{mode}: {out:?}");
    assert_eq!(
        out[1]["meta"]["commitReceipt"]["receipt"]["receipt_id"], receipt["receipt_id"],
        "{mode}: {out:?}"
    );
    let e = &out[2]["error"]["data"];
    assert_eq!(e["code"], "ERR_IDEMPOTENCY_KEY_REUSED", "{mode}: {out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    // The dry run: answered by the sidecar, a dry-run receipt, nothing executed.
    let dry = &out[3];
    assert_eq!(dry["is_error"], false, "{mode}: {out:?}");
    assert!(
        dry["result"].to_string().contains("dry run"),
        "{mode}: {out:?}"
    );
    assert_receipt_verifies(&dry["meta"]["commitReceipt"], "dry-run");
    assert_eq!(server.executions(), vec!["set_stock K-1 3"], "{mode}");
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/K-1").await, 1);
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/K-9").await, 0);
    let events = drift_events(&p);
    assert!(
        events
            .iter()
            .any(|e| e["code"] == "ERR_IDEMPOTENCY_KEY_REUSED" && e["category"] == "idempotency"),
        "{mode}: {events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_dry_runs_on_tool_calls_stateless() {
    keys_and_dry_runs_on_tool_calls("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_dry_runs_on_tool_calls_with_sessions_and_sse() {
    keys_and_dry_runs_on_tool_calls("legacy").await;
}
