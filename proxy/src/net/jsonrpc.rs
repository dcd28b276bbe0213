//! JSON-RPC 2.0 as the sidecar speaks it to MCP clients (SPEC §6, §11): a refusal is an error
//! whose `data` is the problem object, and a receipt rides in a result's `_meta`. Wire shapes
//! only: which call is refused, and why, is decided above.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::net::body::{self, ProxyBody};
use crate::net::headers::{FENCE_HEADER, RECEIPT_HEADER};
use crate::net::problem::Problem;

/// JSON-RPC error code of a Palisade refusal (SPEC §6).
pub const REFUSED: i64 = -32001;

/// Where a result carries its receipt.
pub const RECEIPT_META: &str = "commitReceipt";

/// `msg` with `receipt` in `result._meta` (a result only: an error's `data` is the server's).
pub(crate) fn with_receipt(mut msg: Value, receipt: Option<Value>) -> Value {
    let Some(r) = receipt else {
        return msg;
    };
    if let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) {
        let meta = result.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(RECEIPT_META.to_owned(), r);
        }
        return msg;
    }
    // One of our own errors (a call given up on) carries it in its problem, unless that
    // already holds a rejection receipt of its own.
    if let Some(error) = msg.get_mut("error").and_then(Value::as_object_mut) {
        if error.get("code") == Some(&json!(REFUSED)) {
            if let Some(problem) = error.get_mut("data").and_then(Value::as_object_mut) {
                problem.entry("receipt").or_insert(r);
            }
        }
    }
    msg
}

/// A problem+json response re-cast as a JSON-RPC error, keeping its receipt headers.
pub(crate) async fn rewrap(
    resp: Response<ProxyBody>,
    id: Value,
    status: StatusCode,
) -> Response<ProxyBody> {
    let (parts, body) = resp.into_parts();
    // The problem was made here, in memory; the bound is only a guard.
    let problem: Value = body::collect_proxy(body, 1 << 20)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let mut out = error_response(id, status, problem);
    for name in [RECEIPT_HEADER, FENCE_HEADER] {
        if let Some(v) = parts.headers.get(name) {
            out.headers_mut().insert(name, v.clone());
        }
    }
    out
}

pub(crate) fn rpc_error(id: Value, status: StatusCode, p: &Problem) -> Response<ProxyBody> {
    error_response(id, status, p.to_json())
}

/// The JSON-RPC error answering `id` with `problem` as its data (SPEC §6).
pub(crate) fn error_doc(id: Value, problem: Value) -> Value {
    let message = problem
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("Refused")
        .to_owned();
    json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": REFUSED, "message": message, "data": problem},
    })
}

pub(crate) fn error_response(id: Value, status: StatusCode, problem: Value) -> Response<ProxyBody> {
    body::json_response(status, &error_doc(id, problem))
}
