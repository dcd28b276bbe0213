//! RICH admission of tool calls, and bodies too large or unreadable.

use super::*;

/// RICH admission for MCP (SPEC §13), with the SDK client sending PyJWT-minted tokens: a
/// listing made with a token shows only the bound tools it grants, calls need their grant and
/// keep to its bound, refusals are JSON-RPC errors at HTTP 401/403, and the server ran none
/// of the refused calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_admits_tool_calls_by_token() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = erp_tools(dir.path());
    let lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    let digest = |tool: &str| lock["capabilities"][tool]["contractDigest"].clone();
    let keys = tempfile::tempdir().unwrap();
    let grant = |ops: Value| json!([{"type": "rich_binding", "bindingId": b.binding_id, "operations": ops}]);
    let spec = json!({"resource": BASE, "issuer": support::tokens::ISSUER, "bindingId": b.binding_id,
    "digests": {},
    "custom": {
        "add_only": grant(json!([{"operation": "add", "contractDigest": digest("add"),
            "bound": {"type": "object", "properties": {"a": {"type": "integer", "maximum": 10}}}}])),
        "set_stock": grant(json!([{"operation": "set_stock", "contractDigest": digest("set_stock")}])),
    }});
    let tokens = support::tokens::mint(keys.path(), &spec);
    let admission = support::tokens::admission_toml("required", keys.path());
    let p = sidecar_with(&server, &b, &admission);
    let url = p.url("/mcp");
    let bearer =
        |name: &str| json!({"authorization": format!("Bearer {}", tokens[name].as_str().unwrap())});

    for (round, mode) in ["2026-07-28", "legacy"].into_iter().enumerate() {
        let before = server.executions().len();
        // Granted add (a ≤ 10), not set_stock.
        let got = client_with_headers(
            url.clone(),
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
                {"op": "call", "name": "add", "args": {"a": 50, "b": 3}},
                {"op": "call", "name": "set_stock", "args": {"sku": "S", "qty": 1},
                 "meta": meta(tool_lease("set_stock", 1))},
            ]),
            bearer("add_only"),
        )
        .await;
        assert_eq!(
            got[0]["tools"],
            json!(["add"]),
            "{mode}: the listing shows the granted tools"
        );
        assert_eq!(got[1]["result"]["result"], 5, "{mode}: {}", got[1]);
        for (i, why) in [(2, "outside the bound"), (3, "not granted")] {
            let data = &got[i]["error"]["data"];
            assert_eq!(data["code"], "ERR_NOT_ADMITTED", "{mode} {why}: {}", got[i]);
            assert_eq!(
                data["receipt"]["receipt"]["kind"], "rejection",
                "{mode} {why}"
            );
            assert_eq!(
                data["authorization_details"][0]["type"], "rich_binding",
                "{mode} {why}"
            );
        }
        assert_eq!(got[2]["error"]["data"]["violationLocation"], "/a", "{mode}");
        // No token: the listing is whole, a call of a bound tool is refused with 401.
        let got = client(
            url.clone(),
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "add", "args": {"a": 1, "b": 1}},
            ]),
        )
        .await;
        assert_eq!(
            got[0]["tools"],
            json!(["add", "set_stock", "count_slowly"]),
            "{mode}"
        );
        assert_eq!(
            got[1]["error"]["data"]["code"], "ERR_TOKEN_INVALID",
            "{mode}: {}",
            got[1]
        );
        // An expired token: the listing is refused too.
        let got = client_with_headers(
            url.clone(),
            mode,
            json!([{"op": "list"}]),
            bearer("expired"),
        )
        .await;
        assert_eq!(
            got[0]["error"]["data"]["code"], "ERR_TOKEN_INVALID",
            "{mode}: {}",
            got[0]
        );
        // With its grant, the write tool runs (under its lease, as always).
        let got = client_with_headers(
            url.clone(),
            mode,
            json!([{"op": "call", "name": "set_stock", "args": {"sku": "T", "qty": 2},
                    "meta": meta(tool_lease("set_stock", round as u64 + 1))}]),
            bearer("set_stock"),
        )
        .await;
        assert_eq!(got[0]["is_error"], false, "{mode}: {}", got[0]);
        assert_eq!(
            got[0]["meta"]["commitReceipt"]["receipt"]["kind"], "commit",
            "{mode}"
        );
        // The receipt names who acted: the token's subject, as a digest.
        assert!(got[0]["meta"]["commitReceipt"]["receipt"]["caller"]
            .as_str()
            .is_some_and(|c| c.starts_with("sub:sha256:")));
        let ran = &server.executions()[before..];
        assert!(
            ran.iter().all(|l| !l.contains("sku=S")),
            "{mode}: a refused call ran: {ran:?}"
        );
    }
    let events = drift_events(&p);
    for code in ["ERR_NOT_ADMITTED", "ERR_TOKEN_INVALID"] {
        assert!(events.iter().any(|e| e["code"] == code), "{code}");
    }
}

/// Issue 55: an MCP request whose body is too large, or cannot be read, is refused through the
/// one refusal path as its HTTP twin is: counted in `palisade_refusals_total`, with a rejection
/// receipt in the log (in the JSON-RPC error's `data` when the client can still read it), and
/// nothing reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_body_too_large_or_unreadable_is_counted_and_receipted() {
    use std::io::{Read as _, Write as _};
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = erp_tools(dir.path());
    let p = sidecar_with(&server, &b, "[limits]\nmax_body = \"1KiB\"\n");
    let refusals = |code: &str| {
        let line = format!("palisade_refusals_total{{code=\"{code}\"}} ");
        let text = std::process::Command::new("curl")
            .args(["-s", &format!("http://{}/metrics", p.admin)])
            .output()
            .unwrap()
            .stdout;
        String::from_utf8_lossy(&text)
            .lines()
            .find_map(|l| {
                l.strip_prefix(&line)
                    .map(|n| n.trim().parse::<u64>().unwrap())
            })
            .unwrap_or(0)
    };
    let log_size = || async {
        let (_, text) = admin_get(p.admin, "/admin/v1/log/checkpoint").await;
        text.lines().nth(1).unwrap().parse::<u64>().unwrap()
    };

    // Too large: 413, a JSON-RPC error whose data carries a verifiable rejection receipt.
    let big = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                     "params": {"name": "set_stock", "arguments": {"sku": "x".repeat(4096), "qty": 1}}});
    let req = Request::post(p.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(full(big.to_string()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["error"]["data"]["code"], "ERR_BODY_TOO_LARGE", "{doc}");
    assert_receipt_verifies(&doc["error"]["data"]["receipt"], "rejection");
    assert_eq!(refusals("ERR_BODY_TOO_LARGE"), 1);

    // Unreadable: the client promises 200 bytes, sends 10 and stops sending.
    let before = log_size().await;
    let bad_before = refusals("ERR_BAD_REQUEST");
    let data_url = p.url("/mcp");
    let addr = data_url
        .trim_start_matches("http://")
        .split('/')
        .next()
        .unwrap()
        .to_owned();
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{{\"jsonrpc\""
        )
        .unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .unwrap();
    // A half-closed client still reads the answer.
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("ERR_BAD_REQUEST"), "{answer}");
    wait::until("the refusal is counted", Duration::from_secs(5), || {
        refusals("ERR_BAD_REQUEST") != bad_before
    })
    .await;
    assert_eq!(log_size().await, before + 1, "one rejection receipt");
    assert!(server.executions().is_empty(), "nothing reached the server");
}

/// The step-up (SPEC §13, issue 58): a token that does not admit a tool call gets 403 with
/// `WWW-Authenticate: Bearer error="insufficient_scope", scope=…, resource_metadata=…` (then
/// the RICH challenge), and the official MCP Python SDK's OAuth client acts on it: right after
/// the 403 it fetches the protected resource metadata at the URL the challenge named, then
/// looks for the authorization server that metadata lists (a local stand-in here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_steps_up_on_a_403_to_the_resource_metadata_it_names() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = erp_tools(dir.path());
    let lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    // The sidecar's own address is its resource identifier, so the metadata URL is reachable.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let resource = format!("http://127.0.0.1:{port}");
    let authority = Upstream::start().await;
    let keys = tempfile::tempdir().unwrap();
    let spec = json!({"resource": resource, "issuer": support::tokens::ISSUER,
        "bindingId": b.binding_id, "digests": {},
        "custom": {"add_only": [{"type": "rich_binding", "bindingId": b.binding_id, "operations": [
            {"operation": "add", "contractDigest": lock["capabilities"]["add"]["contractDigest"],
             "bound": {"type": "object", "properties": {"a": {"type": "integer", "maximum": 10}}}}]}]}});
    let tokens = support::tokens::mint(keys.path(), &spec);
    let token = tokens["add_only"].as_str().unwrap().to_owned();
    let admission = format!(
        "[admission]\nmode = \"required\"\nresource = \"{resource}\"\njwks = [\"{}\"]\n\
         issuers = [\"{}\", \"{}\"]\n",
        keys.path().join("jwks.json").display(),
        authority.url(),
        support::tokens::ISSUER
    );
    let side = tempfile::tempdir().unwrap();
    write_keys(side.path());
    let d = side.path().display();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:{port}\"\npublic_base = \"{BASE}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:{}\"\n\
         [signing]\nkey = \"{d}/signing.pem\"\n[trust]\nissuers = \"{d}/issuers.json\"\n\
         [store]\npath = \"{d}/state.redb\"\n[mcp]\npath = \"/mcp\"\n{}\n{admission}",
        server.port,
        b.rich_toml("")
    );
    let p = Palisade::start_in(side, &text);
    let url = p.url("/mcp");
    let metadata = format!("{resource}/.well-known/oauth-protected-resource");

    // The 403 as sent: both challenges, the step-up one first.
    let before = server.executions().len();
    let got = client_with_headers(
        url.clone(),
        "2026-07-28",
        json!([{"op": "call", "name": "add", "args": {"a": 50, "b": 3}}]),
        json!({"authorization": format!("Bearer {token}")}),
    )
    .await;
    assert_eq!(
        got[0]["error"]["data"]["code"], "ERR_NOT_ADMITTED",
        "{}",
        got[0]
    );
    let raw = std::process::Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null", "-X", "POST", &url])
        .args(["-H", "content-type: application/json", "-H", "accept: application/json, text/event-stream"])
        .args(["-H", "mcp-protocol-version: 2026-07-28", "-H", &format!("authorization: Bearer {token}")])
        .args(["-d", r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add","arguments":{"a":50,"b":3}}}"#])
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&raw.stdout).to_lowercase();
    let challenge = head
        .lines()
        .find(|l| l.starts_with("www-authenticate:"))
        .unwrap_or_else(|| panic!("{head}"));
    assert!(head.starts_with("http/1.1 403"), "{head}");
    let step_up = challenge
        .find("error=\"insufficient_scope\"")
        .expect(challenge);
    let rich = challenge
        .find("error=\"insufficient_authorization_details\"")
        .expect(challenge);
    assert!(step_up < rich, "{challenge}");
    assert!(challenge.contains("scope=\"rich_binding\""), "{challenge}");
    assert!(
        challenge.contains(&format!("resource_metadata=\"{metadata}\"")),
        "{challenge}"
    );

    // The SDK's OAuth client, holding that token, steps up on the 403.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/mcp/step_up.py");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python())
            .arg(script)
            .args([url.as_str(), token.as_str(), "add", r#"{"a": 50, "b": 3}"#])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(line.trim())
        .unwrap_or_else(|_| panic!("{line}\n{}", String::from_utf8_lossy(&out.stderr)));
    let requests = report["requests"].as_array().unwrap();
    let refused = requests
        .iter()
        .position(|r| r[0] == "POST" && r[2] == 403)
        .unwrap_or_else(|| panic!("no 403 seen: {report}"));
    assert_eq!(requests[refused + 1][0], "GET", "{report}");
    assert_eq!(requests[refused + 1][1], metadata.as_str(), "{report}");
    assert_eq!(requests[refused + 1][2], 200, "{report}");
    // Then the authorization server the metadata names first (the local stand-in).
    assert!(
        requests[refused + 2..]
            .iter()
            .any(|r| r[1].as_str().unwrap_or("").starts_with(&authority.url())),
        "{report}"
    );
    // The refused call never reached the server.
    assert!(server.executions()[before..]
        .iter()
        .all(|l| !l.contains("a=50")));
}
