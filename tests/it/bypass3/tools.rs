//! MCP: a tool call's inverse, freezes of connected tools, read tools, origins.

use super::*;

/// A tool lease (the `_meta.compensationLease` object) whose inverse is `inverse`.
fn tool_lease_naming(tool: &str, epoch: u64, inverse: &Value) -> Value {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let digest = inverse_digest(inverse.to_string().as_bytes());
    let b64 = lease_for(&agent, &format!("/mcp/tools/{tool}"), epoch, |f| {
        f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
    });
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap()
}

/// Defect 2 (high), MCP: a `set_stock` lease whose inverse names another tool made the server
/// receive `tools/call wipe_all` on compensation. The call is refused where the inverse is
/// staged (inline, and by the authority), with a receipt; its own tool's inverse passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_inverse_is_a_call_of_the_same_tool() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = crate::mcp::erp_tools(dir.path());
    let p = crate::mcp::sidecar(&server, &b);
    let wipe = json!({"tool": "wipe_all", "arguments": {}});
    let steps = json!([
        {"op": "call", "name": "set_stock", "args": {"sku": "A", "qty": 1},
         "meta": {"compensationLease": tool_lease_naming("set_stock", 1, &wipe),
                  "compensationInverse": wipe}},
        {"op": "call", "name": "set_stock", "args": {"sku": "A", "qty": 2},
         "meta": meta(tool_lease("set_stock", 1))},
    ]);
    let out = client(p.url("/mcp"), "2026-07-28", steps).await;
    let e = &out[0]["error"]["data"];
    assert_eq!(e["code"], "ERR_INVERSE_TARGET", "{out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert_eq!(
        server.executions(),
        vec!["set_stock A 2"],
        "only the bound call ran"
    );
    // The authority does not sign such a lease either.
    let (parts, doc) = post_json(
        &p,
        "/.well-known/ptcl/v1/leases",
        Some("Bearer agent-7"),
        &json!({"sor_target_uri": format!("{BASE}/mcp/tools/set_stock"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": wipe}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
}

/// Defect 5: a freeze of a connection's agent-facing tool did nothing, as it was matched
/// against the legacy tool's name only. Either name now stops the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_of_a_connections_agent_facing_tool_stops_it() {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (b, _) = crate::connectors_mcp::bundle(dir.path());
    let p = crate::mcp::sidecar(&server, &b);
    let call = |epoch: u64| {
        json!([{"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": 5},
                "meta": meta(tool_lease("set_level", epoch))}])
    };
    for name in ["mcp:tool/stock.set", "mcp:tool/set_level"] {
        let body = json!({"scope": "operation", "value": name, "reason": "runaway"});
        let (status, made) =
            admin_call(&p, "POST", "/admin/v1/freeze", &[JSON], &body.to_string()).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let out = client(p.url("/mcp"), "2026-07-28", call(1)).await;
        let e = &out[0]["error"]["data"];
        assert_eq!(e["code"], "ERR_FROZEN", "{name}: {out:?}");
        assert_eq!(e["freeze_id"], made["id"], "{name}");
        assert_receipt_verifies(&e["receipt"], "rejection");
        let id = made["id"].as_str().unwrap();
        admin_call(&p, "DELETE", &format!("/admin/v1/freeze/{id}"), &[JSON], "").await;
    }
    assert!(server.executions().is_empty(), "nothing ran while frozen");
    let out = client(p.url("/mcp"), "2026-07-28", call(1)).await;
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(server.executions(), vec!["set_level SKU-1 5"]);
}

/// Defect 8: a read tool call passed `_meta.compensationLease` and `compensationInverse` to the
/// server, signature included. The server now receives the call without them (and with the
/// rest of `_meta` as sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_tool_call_reaches_the_server_without_its_lease() {
    let server = McpServer::start_with(&[("PEEK_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let b = write_mcp_bundle(
        dir.path(),
        "urn:palisade:test:peek/1",
        &[(
            "peek",
            "peek",
            contract(json!("unknown"), "read", "reversible", "none"),
        )],
    );
    let p = crate::mcp::sidecar(&server, &b);
    let mut m = meta(tool_lease("peek", 1));
    m["x-kept"] = json!("yes");
    let steps = json!([{"op": "call", "name": "peek", "args": {}, "meta": m}]);
    for mode in ["2026-07-28", "legacy"] {
        let out = client(p.url("/mcp"), mode, steps.clone()).await;
        assert_eq!(out[0]["is_error"], false, "{mode}: {out:?}");
    }
    let seen = server.executions();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for line in seen {
        assert!(line.contains("x-kept"), "the rest of _meta arrives: {line}");
        assert!(
            !line.contains("compensation"),
            "no lease or inverse: {line}"
        );
    }
}

/// A sidecar in front of `server` with `mcp.allowed_origins`.
fn sidecar_allowing(server: &McpServer, bundle: &BundleFiles, origins: &str) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let upstream_url = format!("http://127.0.0.1:{}", server.port());
    let text = write_config_for(
        &upstream_url,
        dir.path(),
        "",
        &format!(
            "[mcp]\npath = \"/mcp\"\nallowed_origins = {origins}\n{}",
            bundle.rich_toml("")
        ),
    );
    Palisade::start_in(dir, &text)
}

/// Defect 10: the MCP transport's DNS-rebinding rule. A request to `mcp.path` with an `Origin`
/// not in `mcp.allowed_origins` is refused 403 `ERR_ORIGIN_NOT_ALLOWED` (a JSON-RPC error
/// with no id), whatever its method; a listed origin, in any spelling, passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_request_from_another_origin_is_refused() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = crate::mcp::erp_tools(dir.path());
    // The SDK server checks Origin itself (against localhost); the sidecar's list is the
    // operator's, checked first.
    let p = sidecar_allowing(&server, &b, r#"["http://localhost:8080"]"#);
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let raw = |method: &str, origin: &str| {
        let mut r = Request::builder()
            .method(method)
            .uri(p.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list");
        if !origin.is_empty() {
            r = r.header("origin", origin);
        }
        r.body(full(if method == "POST" {
            list.to_string()
        } else {
            String::new()
        }))
        .unwrap()
    };
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost.evil.example:8080",
        "http://localhost:8081",
        "https://localhost:8080",
    ] {
        for method in ["POST", "GET", "DELETE"] {
            let (parts, bytes) = send(&http1_client(), raw(method, origin)).await;
            let doc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            assert_eq!(
                parts.status,
                StatusCode::FORBIDDEN,
                "{method} {origin}: {doc}"
            );
            assert_eq!(
                doc["error"]["data"]["code"], "ERR_ORIGIN_NOT_ALLOWED",
                "{doc}"
            );
            assert_eq!(doc["id"], Value::Null);
        }
    }
    let (parts, bytes) = send(&http1_client(), raw("POST", "http://localhost:8080")).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    // Another spelling of the listed origin passes the sidecar (the server judges it then).
    let (_, bytes) = send(&http1_client(), raw("POST", "HTTP://LOCALHOST:8080")).await;
    assert!(!String::from_utf8_lossy(&bytes).contains("ERR_ORIGIN_NOT_ALLOWED"));
    // The official client, sending a listed Origin on every request, works as before.
    let steps = json!([{"op": "call", "name": "set_stock", "args": {"sku": "O", "qty": 3},
                        "meta": meta(tool_lease("set_stock", 1))}]);
    let out = client_with_headers(
        p.url("/mcp"),
        "legacy",
        steps,
        json!({"Origin": "http://localhost:8080"}),
    )
    .await;
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(server.executions(), vec!["set_stock O 3"]);
    // With no list, any Origin is refused (the default is none).
    let q = crate::mcp::sidecar(&server, &b);
    let (parts, _) = send(
        &http1_client(),
        Request::post(q.url("/mcp"))
            .header("content-type", "application/json")
            .header("origin", "http://localhost:8080")
            .body(full(list.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
}
