//! JSON-RPC 2.0 as the sidecar speaks it to MCP clients (SPEC §6, §11): a refusal is an error
//! whose `data` is the problem object, and a receipt rides in a result's `_meta`. Wire shapes
//! only: which call is refused, and why, is decided above.

use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::net::body::{self, ProxyBody};

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
