//! The third-generation bypasses (issue 54), each as the probe sent it, through the real
//! binary in front of a real HTTP upstream that records what it received: an emptied token
//! line, inverses that name another resource, freeze values in another spelling, callers in
//! another spelling, `compensate` past a freeze, cross-site admin calls, a read tool call that
//! carried its lease upstream, tile arithmetic at 2^56, and `Origin` on the MCP path. Each test
//! fails on the code before the fix; each asserts the status and code, and where the SPEC
//! gives one, the receipt, the drift event and what the upstream saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support;
use support::writes::*;
use support::*;

/// An admin call as a web page or a script would make it: method, path, headers, body.
async fn admin_call(
    p: &Palisade,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, bytes) = send(&http1_client(), b.body(full(body.to_owned())).unwrap()).await;
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

const JSON: (&str, &str) = ("content-type", "application/json");

async fn freezes(p: &Palisade, auth: &[(&str, &str)]) -> Vec<Value> {
    let (status, doc) = admin_call(p, "GET", "/admin/v1/freeze", auth, "").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    doc["freezes"].as_array().cloned().unwrap_or_default()
}

/// The codes of the drift events kept so far: a refusal's event is kept before it is
/// answered (enforce::receipts), so nothing needs waiting for.
async fn drift_codes(p: &Palisade) -> Vec<String> {
    drift_events(p)
        .iter()
        .filter_map(|e| e["code"].as_str().map(str::to_owned))
        .collect()
}

fn receipt_of(parts: &http::response::Parts, body: &Value) -> Value {
    let envelope = match parts.headers.get("agent-commit-receipt") {
        Some(h) => serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h.as_bytes()).unwrap()).unwrap(),
        None => body["receipt"].clone(),
    };
    verified_receipt(&envelope)
}

// ---- MCP, with the official SDK on both sides -----------------------------------------------

use crate::mcp::{client, client_with_headers, meta, tool_lease, McpServer};
use support::bundles::*;

mod admin;
mod inverses;
mod spellings;
mod tools;

fn puts_to(s: &Setup, path: &str) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method != "GET" && r.path_and_query.starts_with(path))
        .count()
}

/// A leased PUT of `path` by the caller `auth`, its inverse `inverse` inline.
async fn leased_put(
    s: &Setup,
    path: &str,
    epoch: u64,
    inverse: &[u8],
    auth: &str,
) -> (http::response::Parts, Value) {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let digest = Sha256Digest::of(&palisade_policy::canon::canonicalize(inverse, 8).unwrap());
    let lease = lease_for(&agent, path, epoch, |f| {
        f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
    });
    let mut req = put(&s.p, path, Some(&lease), Some(inverse));
    req.headers_mut()
        .insert("authorization", auth.parse().unwrap());
    let (parts, bytes) = send(&http1_client(), req).await;
    (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}
