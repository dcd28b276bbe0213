//! Answers that come late or never, compensation by an inverse tool call, held calls.

use super::*;

/// A stateless (2026-07-28) `slow_set_stock` call with a lease at epoch 1, asking for
/// progress, so the server answers with an SSE stream: a progress event, then after 1 s the
/// result.
fn slow_call(p: &Palisade, sku: &str) -> Request<BoxBody> {
    let mut m = meta(tool_lease("slow_set_stock", 1));
    m["progressToken"] = json!("p-1");
    let args = json!({"sku": sku, "qty": 5});
    stateless_call(p, 1, "slow_set_stock", args, m)
}

/// The JSON-RPC messages of an SSE body, in order.
fn sse_messages(body: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(body)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// A write tool's answer that never comes: past the binding's timeout, or cut off by the
/// server going away. Either way the write may have happened, so it is committed with
/// `outcome: "uncertain"` and the client gets a JSON-RPC error that says so, with that receipt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_answer_never_comes_is_committed_as_uncertain() {
    use http_body_util::BodyExt as _;
    // The binding allows 0.4 s; the tool takes 1 s.
    let server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = edit_lock(confirm_tools(bundle_dir.path()), |lock| {
        lock["capabilities"]["slow_set_stock"]["runtime"] = json!({
            "onDrift": "fail-closed", "onError": "route-to-error", "timeout": "PT0.4S"});
    });
    let p = sidecar(&server, &b);
    let (parts, body) = send(&http1_client(), slow_call(&p, "U-1")).await;
    assert_eq!(parts.status, StatusCode::OK);
    let msgs = sse_messages(&body);
    assert_eq!(msgs[0]["method"], "notifications/progress", "{msgs:?}");
    let e = &msgs.last().unwrap()["error"]["data"];
    assert_eq!(e["code"], "ERR_UPSTREAM_TIMEOUT", "{msgs:?}");
    assert_eq!(e["outcome"], "uncertain");
    assert_receipt_verifies(&e["receipt"], "commit");
    assert_eq!(e["receipt"]["receipt"]["outcome"], "uncertain");
    // The epoch stays spent: the call was sent, whatever became of it.
    assert_eq!(fence_of(&p, "mcp:tool/slow_set_stock/U-1").await, 1);

    // The server dies mid-call: the stream breaks before the answer.
    let mut server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let p = sidecar(&server, &confirm_tools(bundle_dir.path()));
    let resp = http1_client().request(slow_call(&p, "U-2")).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("notifications/progress"));
    let _ = server.child.kill();
    let _ = server.child.wait();
    let rest = body.collect().await.unwrap().to_bytes();
    let msgs = sse_messages(&rest);
    let e = &msgs.last().unwrap()["error"]["data"];
    assert_eq!(e["code"], "ERR_UPSTREAM_UNAVAILABLE", "{msgs:?}");
    assert_eq!(e["outcome"], "uncertain");
    assert_receipt_verifies(&e["receipt"], "commit");
    assert_eq!(e["receipt"]["receipt"]["outcome"], "uncertain");
    assert!(server.executions().is_empty());
    assert_eq!(fence_of(&p, "mcp:tool/slow_set_stock/U-2").await, 1);
}

/// A write tool's answer streams over SSE; the client hangs up after the first progress
/// event. The call still runs to its end, and its commit receipt is stored when the answer
/// arrives, with nobody left to read it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_hangs_up_mid_stream_does_not_lose_the_receipt() {
    let (server, _bundle, p) = setup(confirm_tools).await;
    let req = slow_call(&p, "H-1");
    {
        use http_body_util::BodyExt as _;
        let c = http1_client();
        let resp = c.request(req).await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        assert_eq!(resp.headers()["agent-fence-token"], "1");
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert!(
            String::from_utf8_lossy(&first).contains("notifications/progress"),
            "{first:?}"
        );
        // Dropping the body and the client closes the connection before the answer.
    }
    wait::until("the call ran", Duration::from_secs(10), || {
        !server.executions().is_empty()
    })
    .await;
    assert_eq!(server.executions(), vec!["slow_set_stock H-1 5"]);
    assert_eq!(fence_of(&p, "mcp:tool/slow_set_stock/H-1").await, 1);
    // The relay stores the receipt once the answer is in, then stop and audit.
    wait::until_async(
        "the commit receipt is in the log",
        Duration::from_secs(10),
        || async {
            let (_, text) = admin_get(p.admin, "/admin/v1/log/checkpoint").await;
            text.lines().nth(1) == Some("1")
        },
    )
    .await;
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok && out.contains("receipt log of 1 entries"), "{out}{err}");
}

/// SPEC §5.4 for tool calls: the inverse of a tool call given as a tool call,
/// `{"tool", "arguments"}`, is sent by `compensate` as a stateless tools/call. A failing
/// inverse says so; an interim answer leaves nothing to compensate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_compensated_by_its_inverse_tool_call() {
    let server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = confirm_tools(bundle_dir.path());
    let p = sidecar_with(&server, &b, "[ptcl]\nauthority = true\n");
    let agent = KeyPair::from_seed(AGENT_SEED);
    // A lease naming `inverse` (its JCS digest), with `inverse` carried in `_meta`.
    let leased = |tool: &str, epoch: u64, inverse: Value| {
        let digest =
            palisade_policy::digest::Sha256Digest::of(&palisade_policy::canon::to_vec(&inverse));
        let b64 = lease_for(&agent, &format!("/mcp/tools/{tool}"), epoch, |f| {
            f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
        });
        let lease: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap();
        (
            lease["lease_id"].as_str().unwrap().to_owned(),
            json!({"compensationLease": lease, "compensationInverse": inverse}),
        )
    };
    let (undo_ok, m1) = leased(
        "set_stock",
        1,
        json!({"tool": "set_stock", "arguments": {"sku": "C-1", "qty": 0}}),
    );
    // This inverse lacks an argument the tool requires: the server answers with an error.
    let (undo_bad, m2) = leased(
        "set_stock",
        1,
        json!({"tool": "set_stock", "arguments": {"sku": "C-2"}}),
    );
    let (interim, m3) = leased(
        "confirm_stock",
        1,
        json!({"tool": "confirm_stock", "arguments": {"sku": "C-3", "qty": 0}}),
    );
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "set_stock", "args": {"sku": "C-1", "qty": 5}, "meta": m1},
            {"op": "call", "name": "set_stock", "args": {"sku": "C-2", "qty": 6}, "meta": m2},
            {"op": "call_raw", "name": "confirm_stock", "args": {"sku": "C-3", "qty": 7},
             "meta": m3},
        ]),
    )
    .await;
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert_eq!(out[2]["raw"]["resultType"], "input_required", "{out:?}");
    let lease_json = |id: &str| json!({"lease_id": id}).to_string();

    let (status, body, _) = compensate(&p, &lease_json(&undo_ok)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_receipt_verifies(&body["receipt"], "compensation");
    assert_eq!(body["receipt"]["receipt"]["cas_fence_epoch"], 2);
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/C-1").await, 2);
    let (status, body, _) = compensate(&p, &lease_json(&undo_ok)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(body["code"], "ERR_ALREADY_COMPENSATED");

    let (status, body, _) = compensate(&p, &lease_json(&undo_bad)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body["receipt"]["receipt"]["outcome"], "failed", "{body}");

    let (status, body, _) = compensate(&p, &lease_json(&interim)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["code"], "ERR_BAD_REQUEST", "{body}");

    assert_eq!(
        server.executions(),
        vec!["set_stock C-1 5", "set_stock C-2 6", "set_stock C-1 0"]
    );
}

/// SPEC §5.4 HUMAN_ESCROW for tool calls: a held call is answered with a tool result that
/// says so (and its escrow receipt), runs nothing and moves no epoch; approved, it is judged
/// again, runs once and its answer is stored; rejected, it never runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_tool_call_runs_only_once_approved() {
    let (server, _bundle, p) = setup(confirm_tools).await;
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "set_stock", "args": {"sku": "E-1", "qty": 9},
             "meta": meta(tool_lease_mode("set_stock", 1, "HUMAN_ESCROW"))},
            {"op": "call", "name": "set_stock", "args": {"sku": "E-2", "qty": 4},
             "meta": meta(tool_lease_mode("set_stock", 1, "HUMAN_ESCROW"))},
        ]),
    )
    .await;
    let mut ids = Vec::new();
    for held in &out {
        assert_eq!(held["is_error"], false, "{out:?}");
        assert!(held["result"]
            .to_string()
            .contains("held for human approval"));
        let escrow = &held["meta"]["escrow"];
        assert_eq!(escrow["state"], "held", "{out:?}");
        let r = &verified_receipt(&held["meta"]["commitReceipt"]);
        assert_eq!(r["kind"], "escrow", "verified above");
        assert_eq!(r["outcome"], "held");
        ids.push(escrow["escrow_id"].as_str().unwrap().to_owned());
    }
    assert!(server.executions().is_empty());
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/E-1").await, 0);
    let (_, open) = admin_get(p.admin, "/admin/v1/escrow").await;
    assert_eq!(
        serde_json::from_str::<Value>(&open).unwrap()["escrows"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "{open}"
    );
    // The operator's view of a held call: the JSON-RPC body, read once, shown and checked
    // against the tool's input contract under the bundle in force.
    let (status, detail) = admin_get(p.admin, &format!("/admin/v1/escrow/{}", ids[1])).await;
    assert_eq!(status, StatusCode::OK, "{detail}");
    let detail: Value = serde_json::from_str(&detail).unwrap();
    assert_eq!(detail["request"]["protocol"], "mcp", "{detail}");
    let call = &detail["request"]["body"]["json"];
    assert_eq!(call["params"]["name"], "set_stock", "{detail}");
    assert_eq!(call["params"]["arguments"], json!({"sku": "E-2", "qty": 4}));
    assert_eq!(
        detail["input_check"],
        json!({"bound": true, "ok": true}),
        "{detail}"
    );

    let (status, doc) = admin_post(p.admin, &format!("/admin/v1/escrow/{}/approve", ids[0])).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "released", "{doc}");
    assert_eq!(doc["upstream_status"], 200, "{doc}");
    assert_receipt_verifies(&doc["receipt"], "commit");
    assert_eq!(server.executions(), vec!["set_stock E-1 9"]);
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/E-1").await, 1);
    // The server's answer is kept for the caller, at the Location the result named.
    let (status, body) = send(
        &http1_client(),
        Request::get(p.url(&format!("/.well-known/ptcl/v1/escrow/{}", ids[0])))
            .body(full(""))
            .unwrap(),
    )
    .await;
    assert_eq!(status.status, StatusCode::OK);
    let status_doc: Value = serde_json::from_slice(&body).unwrap();
    let answer: Value = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(status_doc["body_b64"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(answer["result"]["isError"], false, "{answer}");
    let text = answer["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("\"E-1\""), "{answer}");

    let (status, doc) = admin_post(p.admin, &format!("/admin/v1/escrow/{}/approve", ids[0])).await;
    assert_eq!(status, StatusCode::CONFLICT, "{doc}");
    assert_eq!(doc["code"], "ERR_ESCROW_NOT_HELD");
    let (status, doc) = admin_post(p.admin, &format!("/admin/v1/escrow/{}/reject", ids[1])).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "rejected");
    assert_eq!(server.executions(), vec!["set_stock E-1 9"]);
    assert_eq!(fence_of(&p, "mcp:tool/set_stock/E-2").await, 0);
}
