//! An inverse given as a tool call (`{"tool", "arguments"}`), as `compensate` sends it and
//! reads its answer.

use bytes::Bytes;
use serde_json::{json, Value};

use super::wire::{messages_in, METHOD_HEADER, NAME_HEADER, PROTOCOL_HEADER};

/// The revision an inverse tool call is sent in: stateless, so it needs no session.
const INVERSE_REVISION: &str = "2026-07-28";

/// The request that sends an inverse given as a tool call (`{"tool", "arguments"}`,
/// SPEC §5.4 as extended in docs/decisions.md): a stateless 2026-07-28 `tools/call` POSTed
/// to `mcp.path`, so it needs no session. Path, headers and body.
pub(crate) fn inverse_request(
    config: &crate::config::Config,
    call: &palisade_policy::inverse::ToolCall,
) -> (String, Vec<(String, String)>, Bytes) {
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        (PROTOCOL_HEADER, INVERSE_REVISION),
        (METHOD_HEADER, "tools/call"),
        (NAME_HEADER, call.name.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let body = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": call.name,
            "arguments": call.arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": INVERSE_REVISION,
                "io.modelcontextprotocol/clientInfo":
                    {"name": "palisade", "version": env!("CARGO_PKG_VERSION")},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    });
    let path = config.mcp_path.clone().unwrap_or_else(|| "/mcp".to_owned());
    (
        path,
        headers,
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default()),
    )
}

/// Whether the answer to an inverse tool call (JSON or SSE, whole) reports a failure: a
/// JSON-RPC error or an `isError` result. An answer with no response in it counts as failed.
pub(crate) fn inverse_failed(answer: &[u8]) -> bool {
    let Some(response) = messages_in(answer)
        .into_iter()
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
    else {
        return true;
    };
    response.get("error").is_some() || response["result"].get("isError") == Some(&Value::Bool(true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_inverse_tool_call_fails_on_an_error_or_is_error() {
        assert!(!inverse_failed(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#
        ));
        assert!(inverse_failed(
            br#"{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}"#
        ));
        assert!(inverse_failed(
            br#"{"jsonrpc":"2.0","id":1,"error":{"code":-1,"message":"x"}}"#
        ));
        let sse = b"event: message\ndata: {\"method\":\"notifications/progress\"}\n\n\
                    event: message\ndata: {\"id\":1,\"result\":{\"isError\":false}}\n\n";
        assert!(!inverse_failed(sse));
        assert!(inverse_failed(b"not an answer"));
    }
}
