//! The MCP server's tool list checked before the first call (issue 59, item 4): a tool
//! changed before the sidecar started or between sessions is refused before any listing;
//! a list that cannot be read refuses the call.

use super::pinning::pinned_erp_tools;
use super::*;

/// A tool changed while no sidecar was in front of the server (a restart) is caught before
/// any listing passes: the first tool call has the sidecar list the server's tools itself,
/// the changed one is refused and the server receives nothing of it (issue 59, item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_changed_before_the_sidecar_started_is_refused_before_any_listing() {
    for mode in ["2026-07-28", "legacy"] {
        let server = McpServer::start().await;
        let bundle_dir = tempfile::tempdir().unwrap();
        let b = pinned_erp_tools(&server, bundle_dir.path());
        // The server changes set_stock's description, called directly, with no sidecar.
        let direct = format!("http://127.0.0.1:{}/mcp", server.port());
        let out = client(direct, mode, json!([{"op": "call", "name": "rug_pull"}])).await;
        assert_eq!(
            out[0]["result"],
            json!({"result": "done"}),
            "{mode}: {out:?}"
        );
        // Then the sidecar starts, and the first request through it is a leased call.
        let p = sidecar(&server, &b);
        let out = client(
            p.url("/mcp"),
            mode,
            json!([
                {"op": "call", "name": "set_stock", "args": {"sku": "SKU-9", "qty": 1},
                 "meta": meta(tool_lease("set_stock", 1))},
                {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
            ]),
        )
        .await;
        assert_eq!(
            out[0]["error"]["data"]["code"], "ERR_TOOL_DRIFTED",
            "{mode}: {out:?}"
        );
        assert_receipt_verifies(&out[0]["error"]["data"]["receipt"], "rejection");
        assert!(server.executions().is_empty(), "{mode}: the server ran it");
        // A tool that did not change is called as before.
        assert!(out[1].get("error").is_none(), "{mode}: {out:?}");
        let events = drift_events(&p);
        assert!(
            events.iter().any(|e| e["category"] == "tool-definition"
                && e["observedIdentifier"] == "set_stock"
                && e["diagnostics"]["reason"] == "changed-definition"),
            "{mode}: {events:?}"
        );
    }
}

/// A client's new session (`initialize`) has the next call check the server's tools again:
/// a tool changed while the sidecar ran, after its first check, is caught on the new
/// session's first call, before any listing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_checks_the_tools_again() {
    let server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_erp_tools(&server, bundle_dir.path());
    let p = sidecar(&server, &b);
    // A first session: checked, unchanged, the call runs.
    let out = client(
        p.url("/mcp"),
        "legacy",
        json!([{"op": "call", "name": "add", "args": {"a": 2, "b": 3}}]),
    )
    .await;
    assert!(out[0].get("error").is_none(), "{out:?}");
    // The server changes set_stock, called directly.
    let direct = format!("http://127.0.0.1:{}/mcp", server.port());
    client(
        direct,
        "legacy",
        json!([{"op": "call", "name": "rug_pull"}]),
    )
    .await;
    // A new session through the sidecar: its first call is checked again.
    let out = client(
        p.url("/mcp"),
        "legacy",
        json!([{"op": "call", "name": "set_stock", "args": {"sku": "SKU-9", "qty": 1},
                "meta": meta(tool_lease("set_stock", 1))}]),
    )
    .await;
    assert_eq!(
        out[0]["error"]["data"]["code"], "ERR_TOOL_DRIFTED",
        "{out:?}"
    );
    assert!(server.executions().is_empty(), "the server ran it");
}

/// The check's fail-closed path: with the server's list unreadable (the server is gone), a
/// leased tool call is refused `ERR_UPSTREAM_UNAVAILABLE` with a rejection receipt before
/// anything is leased or sent. (The code has no drift category: no drift event.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_list_that_cannot_be_read_refuses_the_call() {
    let server = McpServer::start().await;
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_erp_tools(&server, bundle_dir.path());
    let p = sidecar(&server, &b);
    drop(server);
    let args = json!({"sku": "SKU-9", "qty": 1});
    let req = stateless_call(&p, 7, "set_stock", args, meta(tool_lease("set_stock", 1)));
    let (_, body) = send(&http1_client(), req).await;
    let answer: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(answer["id"], 7, "{answer}");
    let problem = &answer["error"]["data"];
    assert_eq!(problem["code"], "ERR_UPSTREAM_UNAVAILABLE", "{answer}");
    assert_receipt_verifies(&problem["receipt"], "rejection");
    assert_eq!(
        problem["receipt"]["receipt"]["code"],
        "ERR_UPSTREAM_UNAVAILABLE"
    );
    // Refused before anything was leased or sent: a forwarded call to a gone server would
    // have advanced the epoch and left a commit receipt (outcome uncertain), not a rejection.
    assert!(
        problem["receipt"]["receipt"]
            .get("cas_fence_epoch")
            .is_none(),
        "{answer}"
    );
    assert!(
        p.logs()
            .contains("the MCP server's tool list could not be checked"),
        "{}",
        p.logs()
    );
}
