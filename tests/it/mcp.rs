//! MCP through the real proxy (SPEC §11), with the official MCP Python SDK (`mcp` on PyPI) as
//! both server and client: `tests/mcp/server.py` and `tests/mcp/client.py`, run from the venv
//! that `scripts/test.sh` makes (`target/pyenv`). A missing venv fails these tests.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::writes::*;
use support::*;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let p = repo().join("target/pyenv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh, which makes the venv with the MCP SDK",
        p.display()
    );
    p
}

/// `tests/mcp/server.py` on a free port; its executions log in a temp dir.
pub(crate) struct McpServer {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpServer {
    pub(crate) async fn start() -> McpServer {
        Self::start_with(&[]).await
    }

    /// The server with `tools/list` in pages of `page_size` tools (0: one page).
    async fn start_paged(page_size: usize) -> McpServer {
        Self::start_with(&[("PAGE_SIZE", &page_size.to_string())]).await
    }

    /// The server with `env` set (see `tests/mcp/server.py`).
    pub(crate) async fn start_with(env: &[(&str, &str)]) -> McpServer {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let dir = tempfile::tempdir().unwrap();
        let child = Command::new(python())
            .arg(repo().join("tests/mcp/server.py"))
            .arg(port.to_string())
            .arg(dir.path().join("exec.log"))
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("the MCP server must start");
        wait::until_async(
            "the MCP SDK server listens",
            Duration::from_secs(30),
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
        McpServer { child, port, dir }
    }

    /// The port the server listens on (127.0.0.1).
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// What the server executed (one line per state-changing tool run).
    pub(crate) fn executions(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.path().join("exec.log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

/// Runs `tests/mcp/client.py` against `url` in `mode` with `steps`; one JSON value per step.
pub(crate) async fn client(url: String, mode: &'static str, steps: Value) -> Vec<Value> {
    client_in(Vec::new(), url, mode, steps).await
}

/// [`client`], run under the `prefix` command (e.g. `nsenter` into a network namespace).
async fn client_in(
    prefix: Vec<String>,
    url: String,
    mode: &'static str,
    steps: Value,
) -> Vec<Value> {
    client_full(prefix, url, mode, steps, json!({})).await
}

/// [`client`], with `headers` (a JSON object) on every HTTP request the SDK client sends.
pub(crate) async fn client_with_headers(
    url: String,
    mode: &'static str,
    steps: Value,
    headers: Value,
) -> Vec<Value> {
    client_full(Vec::new(), url, mode, steps, headers).await
}

async fn client_full(
    prefix: Vec<String>,
    url: String,
    mode: &'static str,
    steps: Value,
    headers: Value,
) -> Vec<Value> {
    tokio::task::spawn_blocking(move || {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(python());
                c
            }
            None => Command::new(python()),
        };
        let mut child = cmd
            .arg(repo().join("tests/mcp/client.py"))
            .arg(&url)
            .arg(mode)
            .env("MCP_CLIENT_HEADERS", headers.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the MCP client must start");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(steps.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "MCP client failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    })
    .await
    .unwrap()
}

/// add and count_slowly read; set_stock writes, fenced per `sku`.
pub(crate) fn erp_tools(dir: &std::path::Path) -> BundleFiles {
    let mut set_stock = contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"],
               "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 0}}}),
        "write",
        "compensable",
        "optional",
    );
    set_stock["state"] = json!({"handle": "sku"});
    write_mcp_bundle(
        dir,
        "urn:palisade:test:mcp/1",
        &[
            (
                "add",
                "add",
                contract_with_output(
                    json!("unknown"),
                    json!({"$schema": DIALECT, "type": "object", "required": ["result"],
                           "properties": {"result": {"type": "integer", "maximum": 100}}}),
                    "read",
                    "reversible",
                ),
            ),
            ("set_stock", "set_stock", set_stock),
            (
                "count_slowly",
                "count_slowly",
                contract(json!("unknown"), "read", "reversible", "none"),
            ),
        ],
    )
}

/// A sidecar in front of the MCP server with `[mcp]` on and the ERP tools bound.
pub(crate) fn sidecar(server: &McpServer, bundle: &BundleFiles) -> Palisade {
    sidecar_with(server, bundle, "")
}

/// [`sidecar`] with `extra` added to its configuration.
pub(crate) fn sidecar_with(server: &McpServer, bundle: &BundleFiles, extra: &str) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    let agent = KeyPair::from_seed(AGENT_SEED);
    std::fs::write(dir.path().join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    std::fs::write(
        dir.path().join("issuers.json"),
        json!([{"kid": agent.kid(), "public_key": agent.public_b64()}]).to_string(),
    )
    .unwrap();
    let d = dir.path().display();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_base = \"{BASE}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:{}\"\n\
         [signing]\nkey = \"{d}/signing.pem\"\n[trust]\nissuers = \"{d}/issuers.json\"\n\
         [store]\npath = \"{d}/state.redb\"\n[mcp]\npath = \"/mcp\"\n{}\n{extra}",
        server.port,
        bundle.rich_toml("")
    );
    Palisade::start_in(dir, &text)
}

/// The SDK server, and a sidecar in front of it with `bundle`'s tools bound (the bundle's
/// directory is returned to live as long as the sidecar).
async fn setup(
    bundle: fn(&std::path::Path) -> BundleFiles,
) -> (McpServer, tempfile::TempDir, Palisade) {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    let p = sidecar(&server, &b);
    (server, dir, p)
}

/// A lease for a tool call, as the object `params._meta.compensationLease` carries.
pub(crate) fn tool_lease(tool: &str, epoch: u64) -> Value {
    tool_lease_mode(tool, epoch, "COMPENSATING_ACTION")
}

fn tool_lease_mode(tool: &str, epoch: u64, mode: &str) -> Value {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let b64 = lease_for(&agent, &format!("/mcp/tools/{tool}"), epoch, |f| {
        f.insert("recovery_mode".into(), json!(mode));
    });
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap()
}

/// `_meta` with `lease` and its inverse: a call of the tool the lease names (SPEC §5.4).
pub(crate) fn meta(lease: Value) -> Value {
    let target = lease["sor_target_uri"].as_str().unwrap_or_default();
    let path = target.strip_prefix(BASE).unwrap_or(target);
    json!({"compensationLease": lease,
           "compensationInverse": serde_json::from_slice::<Value>(&inverse_for(path)).unwrap()})
}

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

/// `palisade lock pin-mcp` against the running server: the digest it pins for each tool.
fn pinned_digests(server: &McpServer) -> serde_json::Map<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lock.json");
    let run = Command::new(bin())
        .args(["lock", "pin-mcp", "--url"])
        .arg(format!("http://127.0.0.1:{}/mcp", server.port))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // What it wrote compiles as it is.
    let check = lock_check(&out, &dir.path().join("contracts"));
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let lock: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    lock["capabilities"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["toolDigest"].clone()))
        .collect()
}

/// Runs `palisade lock pin-mcp` against `server` with `args`, writing into `dir`.
fn pin_mcp(server: &McpServer, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(["lock", "pin-mcp", "--url"])
        .arg(format!("http://127.0.0.1:{}/mcp", server.port))
        .arg("--out")
        .arg(dir.join("lock.json"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_mcp_takes_side_effects_from_tool_annotations() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let run = pin_mcp(&server, dir.path(), &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    // `add` is annotated read-only, `set_stock` idempotent; the rest say nothing.
    let effects = &summary["sideEffects"];
    assert_eq!(effects["add"], "read", "{summary}");
    assert_eq!(effects["set_stock"], "idempotent", "{summary}");
    for tool in ["count_slowly", "rug_pull", "confirm_stock", "log_note"] {
        assert_eq!(effects[tool], "unknown", "{tool}: {summary}");
    }
    // Recorded as declared evidence from the listing, not qualified, with the annotations.
    let add = BundleFiles::in_dir(dir.path()).contract("add");
    let prov = &add["provenance"];
    assert_eq!(prov["evidence"], "declared");
    assert_eq!(prov["qualified"], false);
    assert_eq!(prov["annotations"]["readOnlyHint"], true, "{prov}");
    assert_eq!(
        prov["assertions"]["/operational/sideEffect"],
        "generated-from-typed-source"
    );
    let slow = BundleFiles::in_dir(dir.path()).contract("count_slowly");
    assert_eq!(slow["provenance"]["annotations"], Value::Null);
    assert_eq!(
        slow["provenance"]["assertions"]["/operational/sideEffect"],
        "unresolved"
    );

    // The bundle as written runs: the read tool needs no lease, the idempotent write does,
    // and a tool with no hints is a write too.
    let b = BundleFiles::in_dir(dir.path());
    let p = sidecar(&server, &b);
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
            {"op": "call", "name": "set_stock", "args": {"sku": "SKU-A", "qty": 1}},
            {"op": "call", "name": "log_note", "args": {"text": "hi"}},
        ]),
    )
    .await;
    assert_eq!(out[0]["result"]["result"], 5, "{out:?}");
    for refused in [&out[1], &out[2]] {
        assert_eq!(
            refused["error"]["data"]["code"], "ERR_LEASE_REQUIRED",
            "{out:?}"
        );
        assert_receipt_verifies(&refused["error"]["data"]["receipt"], "rejection");
    }
    assert!(server.executions().is_empty(), "{:?}", server.executions());

    // The operator's word wins, and is recorded as such.
    let over = tempfile::tempdir().unwrap();
    let run = pin_mcp(
        &server,
        over.path(),
        &[
            "--side-effect",
            "add=write",
            "--side-effect",
            "log_note=read",
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["sideEffects"]["add"], "write");
    assert_eq!(summary["sideEffects"]["log_note"], "read");
    assert_eq!(summary["sideEffects"]["set_stock"], "idempotent");
    assert_eq!(
        BundleFiles::in_dir(over.path()).contract("add")["provenance"]["assertions"]
            ["/operational/sideEffect"],
        "manually-authored"
    );
    // Annotations ignored: nothing is read-only unless the operator says so.
    let ignored = tempfile::tempdir().unwrap();
    let run = pin_mcp(&server, ignored.path(), &["--ignore-annotations"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["sideEffects"]["add"], "unknown");
    assert_eq!(summary["sideEffects"]["set_stock"], "unknown");
    // A typo is an error, not a silent no-op; so is an effect that does not exist.
    for (args, says) in [
        (&["--side-effect", "ad=read"][..], "does not list"),
        (&["--side-effect", "add=readonly"][..], "must be one of"),
        (&["--side-effect", "add"][..], "TOOL=EFFECT"),
        (
            &["--side-effect", "add=read", "--side-effect", "add=write"][..],
            "named twice",
        ),
    ] {
        let bad = tempfile::tempdir().unwrap();
        let run = pin_mcp(&server, bad.path(), args);
        assert!(!run.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !bad.path().join("lock.json").exists(),
            "{args:?} wrote a lockfile"
        );
    }
}

/// Rewrites a bundle's lockfile with `edit` (and its digest recomputed).
fn edit_lock(mut b: BundleFiles, edit: impl FnOnce(&mut Value)) -> BundleFiles {
    let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    edit(&mut lock);
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    b.digest = format!(
        "sha-256:{}",
        palisade_policy::digest::Sha256Digest::of_json(&lock).to_hex()
    );
    b
}

/// Rewrites a bundle's lockfile with `toolDigest`s added.
fn with_tool_digests(b: BundleFiles, digests: &serde_json::Map<String, Value>) -> BundleFiles {
    edit_lock(b, |lock| {
        for (name, cap) in lock["capabilities"].as_object_mut().unwrap() {
            if let Some(d) = digests.get(name) {
                cap["toolDigest"] = d.clone();
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rug_pull_is_filtered_from_the_listing_and_its_calls_refused() {
    for mode in ["2026-07-28", "legacy"] {
        let server = McpServer::start().await;
        let digests = pinned_digests(&server);
        assert_eq!(digests.len(), 8, "{digests:?}");
        let bundle_dir = tempfile::tempdir().unwrap();
        let mut b = erp_tools(bundle_dir.path());
        // rug_pull is bound as a read tool, unpinned; the others carry pin-mcp's digests.
        let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
        let read = contract(json!("unknown"), "read", "reversible", "none");
        let digest = palisade_policy::digest::Sha256Digest::of_json(&read);
        lock["capabilities"]["rug_pull"] = json!({"protocol": "mcp", "operation": "rug_pull",
            "contractDigest": format!("sha-256:{}", digest.to_hex())});
        std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
        let mut pins = digests.clone();
        pins.remove("rug_pull");
        b = with_tool_digests(b, &pins);
        let p = sidecar(&server, &b);
        let out = client(
            p.url("/mcp"),
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "rug_pull"},
                {"op": "list"},
                {"op": "call", "name": "set_stock", "args": {"sku": "SKU-9", "qty": 1},
                 "meta": meta(tool_lease("set_stock", 1))},
            ]),
        )
        .await;
        assert_eq!(
            out[0]["tools"],
            json!(["add", "set_stock", "count_slowly", "rug_pull"]),
            "{mode}: {out:?}"
        );
        assert_eq!(
            out[1]["result"],
            json!({"result": "done"}),
            "{mode}: {out:?}"
        );
        assert_eq!(
            out[2]["tools"],
            json!(["add", "count_slowly", "rug_pull"]),
            "{mode}: the changed tool is gone: {out:?}"
        );
        assert_eq!(
            out[3]["error"]["data"]["code"], "ERR_TOOL_DRIFTED",
            "{mode}: {out:?}"
        );
        assert_receipt_verifies(&out[3]["error"]["data"]["receipt"], "rejection");
        assert!(server.executions().is_empty(), "{mode}");
        let events = drift_events(&p);
        let e = events
            .iter()
            .find(|e| {
                e["category"] == "tool-definition"
                    && e["actionTaken"] == "blocked"
                    && e["observedIdentifier"] == "set_stock"
            })
            .unwrap_or_else(|| panic!("{mode}: {events:?}"));
        assert_eq!(e["expectedDigest"], digests["set_stock"]);
        assert_eq!(e["diagnostics"]["reason"], "changed-definition");
        // No word of the new description leaks into the event.
        assert!(!e.to_string().contains("id_rsa"));
    }
}

/// The TypeScript SDK's example server, `@modelcontextprotocol/server-everything` (npm), behind
/// the proxy. It listens on every interface, so it runs in a network namespace of its own
/// (loopback only) together with the sidecar and the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_everything_server_works_through_the_proxy() {
    let everything = repo()
        .join("target/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        everything.exists(),
        "{} is missing: run scripts/test.sh, which installs it",
        everything.display()
    );
    let bundle_dir = tempfile::tempdir().unwrap();
    let echo = contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["message"],
               "properties": {"message": {"type": "string", "maxLength": 64}}}),
        "read",
        "reversible",
        "none",
    );
    let b = write_mcp_bundle(
        bundle_dir.path(),
        "urn:palisade:test:everything/1",
        &[("echo", "echo", echo)],
    );
    let dir = tempfile::tempdir().unwrap();
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    std::fs::write(dir.path().join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    let d = dir.path().display();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_base = \"{BASE}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:3001\"\n\
         [signing]\nkey = \"{d}/signing.pem\"\n[store]\npath = \"{d}/state.redb\"\n\
         [mcp]\npath = \"/mcp\"\n{}",
        b.rich_toml("")
    );
    // A new network namespace with only loopback, up.
    let wrapper = [
        "unshare",
        "-n",
        "--",
        "sh",
        "-c",
        "ip link set lo up && exec \"$@\"",
        "sh",
    ];
    let p = Palisade::start_wrapped(dir, &text, &wrapper);
    let ns = vec![
        "nsenter".to_owned(),
        "-t".to_owned(),
        p.pid().to_string(),
        "-n".to_owned(),
    ];
    let mut server = Command::new("nsenter")
        .args(["-t", &p.pid().to_string(), "-n", "env", "PORT=3001", "node"])
        .arg(&everything)
        .arg("streamableHttp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node must start server-everything");
    // Wait for it to listen, asking from inside the namespace.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let probe = Command::new("nsenter")
            .args([
                "-t",
                &p.pid().to_string(),
                "-n",
                "bash",
                "-c",
                "exec 3<>/dev/tcp/127.0.0.1/3001",
            ])
            .status();
        if probe.is_ok_and(|s| s.success()) {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            let _ = server.kill();
            let out = server.wait_with_output().unwrap();
            panic!(
                "server-everything did not listen: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = client_in(
        ns,
        format!("http://{}/mcp", p.data),
        "legacy",
        json!([
            {"op": "list"},
            {"op": "call", "name": "echo", "args": {"message": "hello through palisade"}},
            {"op": "call", "name": "echo", "args": {"message": 42}},
            {"op": "call", "name": "get-sum", "args": {"a": 1, "b": 2}},
        ]),
    )
    .await;
    let _ = server.kill();
    let _ = server.wait();
    // Under unbound_writes = "deny" only the bound tool is listed.
    assert_eq!(out[0]["tools"], json!(["echo"]), "{out:?}");
    let echoed = out[1]["result"].to_string();
    assert!(echoed.contains("hello through palisade"), "{out:?}");
    assert_eq!(
        out[2]["error"]["data"]["code"], "ERR_CONTRACT_INPUT",
        "{out:?}"
    );
    assert_eq!(
        out[3]["error"]["data"]["code"], "ERR_UNBOUND_OPERATION",
        "{out:?}"
    );
}

/// set_stock, confirm_stock and slow_set_stock write, fenced per `sku`.
fn confirm_tools(dir: &std::path::Path) -> BundleFiles {
    let write = || {
        let mut c = contract(
            json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"],
                   "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}}}),
            "write",
            "compensable",
            "optional",
        );
        c["state"] = json!({"handle": "sku"});
        c
    };
    write_mcp_bundle(
        dir,
        "urn:palisade:test:mcp/2",
        &[
            ("set_stock", "set_stock", write()),
            ("confirm_stock", "confirm_stock", write()),
            ("slow_set_stock", "slow_set_stock", write()),
        ],
    )
}

/// The fence epoch of `resource` as the admin API reports it.
async fn fence_of(p: &Palisade, resource: &str) -> u64 {
    let path = format!(
        "/admin/v1/fences/{}",
        resource.replace(':', "%3A").replace('/', "%2F")
    );
    let (_, body) = admin_get(p.admin, &path).await;
    let v: Value = serde_json::from_str(&body).unwrap();
    v["epoch"].as_u64().unwrap_or_else(|| panic!("{body}"))
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

/// A paginated listing is filtered page by page with its cursors kept; a tool added at run
/// time reaches the client as `notifications/tools/list_changed`, and is then filtered out
/// as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_listings_are_pinned_page_by_page_and_list_changed_passes() {
    let server = McpServer::start_paged(2).await;
    // pin-mcp follows the cursors too.
    let digests = pinned_digests(&server);
    assert_eq!(digests.len(), 8, "{digests:?}");
    let bundle_dir = tempfile::tempdir().unwrap();
    let mut b = erp_tools(bundle_dir.path());
    let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    let read = contract(json!("unknown"), "read", "reversible", "none");
    let digest = format!(
        "sha-256:{}",
        palisade_policy::digest::Sha256Digest::of_json(&read).to_hex()
    );
    for tool in ["rug_pull", "add_tool"] {
        lock["capabilities"][tool] =
            json!({"protocol": "mcp", "operation": tool, "contractDigest": digest});
    }
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let mut pins = digests.clone();
    pins.remove("rug_pull");
    pins.remove("add_tool");
    b = with_tool_digests(b, &pins);
    let p = sidecar(&server, &b);
    let out = client(
        p.url("/mcp"),
        "legacy",
        json!([
            {"op": "list_all"},
            {"op": "call", "name": "add_tool", "args": {"name": "sneaky_extra"}},
            {"op": "notifications"},
            {"op": "list_all"},
            {"op": "call", "name": "rug_pull"},
            {"op": "list_all"},
        ]),
    )
    .await;
    let all = json!(["add", "set_stock", "count_slowly", "rug_pull", "add_tool"]);
    // Eight tools in four pages; confirm_stock, slow_set_stock and log_note are not in the
    // lockfile and are removed.
    assert_eq!(out[0]["tools"], all, "{out:?}");
    assert_eq!(out[0]["pages"], 4, "{out:?}");
    assert_eq!(out[1]["result"], json!({"result": "added"}), "{out:?}");
    assert!(
        out[2]["seen"]
            .as_array()
            .unwrap()
            .contains(&json!("notifications/tools/list_changed")),
        "{out:?}"
    );
    // Nine tools now, five pages; the new one is unknown and filtered.
    assert_eq!(out[3]["tools"], all, "{out:?}");
    assert_eq!(out[3]["pages"], 5, "{out:?}");
    // The rug pull shows on its page; the other pages and the cursors are untouched.
    assert_eq!(
        out[5]["tools"],
        json!(["add", "count_slowly", "rug_pull", "add_tool"]),
        "{out:?}"
    );
    assert_eq!(out[5]["pages"], 5, "{out:?}");
    let events = drift_events(&p);
    for (tool, reason) in [
        ("sneaky_extra", "unknown-tool"),
        ("confirm_stock", "unknown-tool"),
        ("set_stock", "changed-definition"),
    ] {
        assert!(
            events.iter().any(|e| e["category"] == "tool-definition"
                && e["observedIdentifier"] == tool
                && e["diagnostics"]["reason"] == reason),
            "{tool}: {events:?}"
        );
    }
}

/// A stateless (2026-07-28) `slow_set_stock` call with a lease at epoch 1, asking for
/// progress, so the server answers with an SSE stream: a progress event, then after 1 s the
/// result.
fn slow_call(p: &Palisade, sku: &str) -> Request<BoxBody> {
    let mut m = meta(tool_lease("slow_set_stock", 1));
    m["progressToken"] = json!("p-1");
    m["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    m["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "1"});
    m["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "slow_set_stock", "arguments": {"sku": sku, "qty": 5},
                                 "_meta": m}});
    Request::post(p.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "slow_set_stock")
        .body(full(body.to_string()))
        .unwrap()
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
