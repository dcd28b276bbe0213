//! An operator's rule on MCP tool calls (SPEC §15, issue 56): the official SDK's server pinned
//! by `palisade lock pin-mcp` (which records each tool's annotations), a rule that holds every
//! tool its definition calls destructive, the official SDK's client calling it.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_holds_every_tool_its_pinned_definition_calls_destructive() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let run = super::pinning::pin_mcp(&server, dir.path(), &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // The server annotates set_stock destructive and add read-only; the pins keep both.
    let lock: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("lock.json")).unwrap()).unwrap();
    let caps = &lock["capabilities"];
    assert_eq!(
        caps["set_stock"]["toolAnnotations"]["destructiveHint"], true,
        "{lock}"
    );
    assert_eq!(
        caps["add"]["toolAnnotations"]["readOnlyHint"], true,
        "{lock}"
    );

    let rules = dir.path().join("rules.toml");
    std::fs::write(
        &rules,
        "[[rule]]\nname = \"destructive-tools\"\n\
         when = 'tool != null && has(tool.annotations.destructiveHint) && tool.annotations.destructiveHint'\n\
         action = \"hold\"\n\
         [[rule]]\nname = \"no-log-notes\"\non = [\"mcp:tool/log_note\"]\naction = \"deny\"\n",
    )
    .unwrap();
    let b = BundleFiles::in_dir(dir.path());
    let extra = format!("[rules]\nfile = \"{}\"\n", rules.display());
    let p = sidecar_with(&server, &b, &extra);
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "set_stock", "args": {"sku": "SKU-R", "qty": 4},
             "meta": meta(tool_lease_mode("set_stock", 1, "HUMAN_ESCROW"))},
            {"op": "call", "name": "log_note", "args": {"text": "hi"},
             "meta": meta(tool_lease_mode("log_note", 1, "HUMAN_ESCROW"))},
            {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
        ]),
    )
    .await;
    // A tool pinned from its listing has unknown reversibility, so its leases hold it anyway
    // (check 8); the hold names the rule that would have held it whatever the lease asked
    // (tests/it/rules.rs shows that on HTTP).
    let held = &out[0]["meta"]["escrow"];
    assert_eq!(held["state"], "held", "{out:?}");
    assert_eq!(held["rule"], "destructive-tools", "{out:?}");
    // Denied by name: a JSON-RPC error with our code, the rule and a verifiable receipt.
    let denied = &out[1]["error"]["data"];
    assert_eq!(denied["code"], "ERR_POLICY_DENIED", "{out:?}");
    assert_eq!(denied["rule"], "no-log-notes", "{out:?}");
    assert_receipt_verifies(&denied["receipt"], "rejection");
    // A read passes.
    assert_eq!(out[2]["result"]["result"], 5, "{out:?}");
    assert!(server.executions().is_empty(), "{:?}", server.executions());

    // Approved: the server runs the held write, once.
    let id = held["escrow_id"].as_str().unwrap();
    let (status, doc) = admin_post(p.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(doc["state"], "released", "{doc}");
    let runs = server.executions();
    assert_eq!(runs.len(), 1, "{runs:?}");
    assert!(runs[0].contains("set_stock"), "{runs:?}");
}
