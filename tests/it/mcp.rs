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

mod admitted;
mod answers;
mod calls;
mod pinning;
mod routing;
mod rules;
mod sdks;
mod tool_check;

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
    write_keys(dir.path());
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

/// A stateless (2026-07-28) `tools/call` of `name` with `args`, its `_meta` from `meta` with
/// the revision's client members added, sent raw (no SDK client, which may list first).
pub(crate) fn stateless_call(
    p: &Palisade,
    id: u64,
    name: &str,
    args: Value,
    mut meta: Value,
) -> Request<BoxBody> {
    meta["io.modelcontextprotocol/protocolVersion"] = json!("2026-07-28");
    meta["io.modelcontextprotocol/clientInfo"] = json!({"name": "raw", "version": "1"});
    meta["io.modelcontextprotocol/clientCapabilities"] = json!({});
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": name, "arguments": args, "_meta": meta}});
    Request::post(p.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", name)
        .body(full(body.to_string()))
        .unwrap()
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
