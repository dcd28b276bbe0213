//! MCP's HTTP wire (SPEC §11): the headers that name a message, and the messages of a whole
//! reply, JSON or SSE.

use palisade_policy::{ErrorCode, Refusal};
use serde_json::Value;

use super::sse;

/// Header naming the JSON-RPC method (2026-07-28) and the tool of a `tools/call`.
pub const METHOD_HEADER: &str = "mcp-method";
pub const NAME_HEADER: &str = "mcp-name";
/// The protocol revision a request speaks (both generations send it after the handshake).
pub const PROTOCOL_HEADER: &str = "mcp-protocol-version";

pub(crate) fn method_of(msg: &Value) -> Option<&str> {
    msg.get("method").and_then(Value::as_str)
}

/// `Mcp-Method` (and `Mcp-Name` for a tool call), where present, must say what the message
/// says: no hop may route by the header and be checked by the body (SPEC §11).
pub(crate) fn header_mismatch(headers: &http::HeaderMap, msg: &Value) -> Option<Refusal> {
    let method = method_of(msg);
    if let Some(h) = headers.get(METHOD_HEADER) {
        if method.is_none() || h.to_str().ok() != method {
            return Some(Refusal::new(
                ErrorCode::McpMethodMismatch,
                "the Mcp-Method header disagrees with the JSON-RPC method",
            ));
        }
    }
    if let (Some(h), Some("tools/call")) = (headers.get(NAME_HEADER), method) {
        let name = msg
            .get("params")
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str);
        if h.to_str().ok() != name {
            return Some(Refusal::new(
                ErrorCode::McpMethodMismatch,
                "the Mcp-Name header disagrees with params.name",
            ));
        }
    }
    None
}

/// The JSON-RPC messages of a whole reply: a JSON one, or each event's data of an SSE one
/// (one message per event, as MCP servers send them).
pub(crate) fn messages_in(answer: &[u8]) -> Vec<Value> {
    match serde_json::from_slice::<Value>(answer) {
        Ok(v) => vec![v],
        Err(_) => sse::json_events(answer),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use serde_json::json;

    #[test]
    fn headers_must_agree_with_the_message() {
        let call = json!({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}});
        let mut h = http::HeaderMap::new();
        assert!(header_mismatch(&h, &call).is_none());
        h.insert(METHOD_HEADER, HeaderValue::from_static("tools/call"));
        h.insert(NAME_HEADER, HeaderValue::from_static("add"));
        assert!(header_mismatch(&h, &call).is_none());
        h.insert(NAME_HEADER, HeaderValue::from_static("delete_everything"));
        assert_eq!(
            header_mismatch(&h, &call).map(|r| r.code),
            Some(ErrorCode::McpMethodMismatch)
        );
        h.remove(NAME_HEADER);
        h.insert(METHOD_HEADER, HeaderValue::from_static("tools/list"));
        assert_eq!(
            header_mismatch(&h, &call).map(|r| r.code),
            Some(ErrorCode::McpMethodMismatch)
        );
        // A response (no method) under an Mcp-Method header is a mismatch too.
        let resp = json!({"jsonrpc":"2.0","id":1,"result":{}});
        assert!(header_mismatch(&h, &resp).is_some());
    }
}
