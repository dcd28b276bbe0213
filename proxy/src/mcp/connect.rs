//! RICH connections between MCP tools (issue 37): an agent-facing tool served by a legacy
//! tool of the MCP server, through pinned connectors.
//!
//! ```text
//! tools/call source {arguments}
//!   → source structural.input → request connector → target structural.input
//!   → tools/call target {mapped arguments}: the read path or the write engine, as a call of
//!     the target (its lease names /mcp/tools/<target>, its fence and receipt are the target's)
//! result (complete, not an error) → the target's output contract (results.rs)
//!   → structuredContent → response connector → source structural.output
//!   → structuredContent and its text block replaced by the mapped value
//! ```
//!
//! A call that cannot be mapped reaches no one: a JSON-RPC error with a rejection receipt
//! naming both contracts and the connector, and a drift event whose `expectedDigest` is the
//! connector's. A result that cannot be mapped is refused under `fail-closed` and passed on
//! unmapped under `notify`, with a drift event either way.

use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use palisade_policy::drift::Action;
use palisade_policy::receipt::ConnectorRef;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::connector::Connector;
use palisade_rich::{Bundle, Contract, DriftPolicy};
use serde_json::{json, Value};

use super::wire::NAME_HEADER;
use crate::context::{Plane, WriteContext};
use crate::enforce::output::{self, Observed};

/// What a connected call's result needs to be mapped back.
pub(crate) struct Back {
    pub connector: Arc<Connector>,
    /// The agent-facing contract the mapped result must meet.
    pub source: Arc<Contract>,
    /// The connection's `onDrift`: `notify` passes an unmappable result on.
    pub on_drift: DriftPolicy,
}

/// A call mapped onto its target tool.
pub(crate) struct Mapped {
    pub msg: Value,
    pub bytes: Bytes,
    /// The target tool's capability index.
    pub target: usize,
    pub back: Option<Arc<Back>>,
}

/// The call `msg` to the tool at `index` mapped onto its connection's target; `Ok(None)`
/// when the tool has no connection. `headers` are the request's: its `Mcp-Name` names the
/// target afterwards. `cx` names the connection from here on, refused or not.
pub(crate) fn map_call(
    bundle: &Bundle,
    index: usize,
    msg: &Value,
    headers: &mut http::HeaderMap,
    cx: &mut WriteContext,
) -> Result<Option<Mapped>, Refusal> {
    let Some(conn) = bundle.connection_of(index) else {
        return Ok(None);
    };
    let (Some(source), Some(target)) = (
        bundle.capabilities.get(conn.source),
        bundle.capabilities.get(conn.target),
    ) else {
        return Ok(None);
    };
    cx.facing = Some(format!("mcp:tool/{}", source.operation));
    cx.connector = Some(ConnectorRef {
        source_contract_digest: source.contract.digest.clone(),
        target_contract_digest: target.contract.digest.clone(),
        connector_digest: conn.request.digest.clone(),
        response_connector_digest: conn.response.as_ref().map(|c| c.digest.clone()),
    });
    let arguments = msg
        .get("params")
        .and_then(|p| p.get("arguments"))
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mapped = palisade_rich::check_input_value(&source.contract, &arguments)
        .and_then(|()| conn.request.run(&arguments).map_err(Refusal::from))
        .and_then(|out| palisade_rich::check_mapped_input(&target.contract, &out).map(|()| out));
    let out = mapped?;
    // Copied only for a connected call: every other tool call goes on as it came.
    let mut msg = msg.clone();
    if let Some(params) = msg.get_mut("params").and_then(Value::as_object_mut) {
        params.insert("name".into(), Value::String(target.operation.clone()));
        params.insert("arguments".into(), out);
    }
    if headers.contains_key(NAME_HEADER) {
        if let Ok(v) = HeaderValue::from_str(&target.operation) {
            headers.insert(NAME_HEADER, v);
        }
    }
    let bytes = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
    let back = conn.response.as_ref().map(|c| {
        Arc::new(Back {
            connector: c.clone(),
            source: source.contract.clone(),
            on_drift: conn.on_drift,
        })
    });
    Ok(Some(Mapped {
        msg,
        bytes,
        target: conn.target,
        back,
    }))
}

/// What a complete result becomes on its way back.
pub(crate) enum MappedResult {
    /// The result with its mapped content.
    Mapped(Value),
    /// The result as it came (`notify`).
    Passed(Value),
    /// Refused: the JSON-RPC error to answer with.
    Refused(Refusal),
}

/// A complete, non-error result `msg` through `back` (its drift event reported here).
pub(crate) fn map_result(
    plane: &Plane,
    cx: &WriteContext,
    back: &Back,
    mut msg: Value,
) -> MappedResult {
    let content = msg.get("result").and_then(|r| r.get("structuredContent"));
    let mapped = match content {
        None => Err(Refusal::new(
            ErrorCode::ConnectorFailed,
            "the tool result has no structuredContent for the response connector to map",
        )
        .with_location("/structuredContent")),
        Some(c) => back
            .connector
            .run(c)
            .map_err(Refusal::from)
            .and_then(|out| {
                let at = "/structuredContent";
                palisade_rich::check_mapped_output(&back.source, &out, at).map(|()| out)
            }),
    };
    match mapped {
        Ok(out) => {
            if let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) {
                let text = serde_json::to_string(&out).unwrap_or_default();
                // The text block mirrors the structured content, as MCP asks of a tool that
                // returns both; the legacy tool's text would contradict the mapped value.
                result.insert("content".into(), json!([{"type": "text", "text": text}]));
                result.insert("structuredContent".into(), out);
            }
            MappedResult::Mapped(msg)
        }
        Err(refusal) => {
            let evidence = content
                .map(palisade_policy::canon::to_vec)
                .unwrap_or_default();
            let observed = Observed {
                identifier: None,
                expected: Some(back.connector.digest.clone()),
                evidence,
                diagnostics: vec![("direction", "response".to_owned())],
            };
            let refusal = refusal.with_status(502);
            if back.on_drift == DriftPolicy::Notify {
                output::report(plane, &refusal, cx, Action::Notify, observed);
                return MappedResult::Passed(msg);
            }
            output::report(plane, &refusal, cx, Action::Blocked, observed);
            MappedResult::Refused(refusal)
        }
    }
}
