//! A tool call's answer on its way back (SPEC §7, RICH §3.2): the output contract applies to
//! complete results only.
//!
//! - An interim outcome (`result.resultType` other than `"complete"`, e.g. `input_required`)
//!   is passed on unchecked.
//! - An error result (`isError: true`) or a JSON-RPC error belongs to the error domain and is
//!   passed on unchecked, as HTTP error answers are.
//! - A complete result of a tool whose contract has `structural.output` must carry
//!   `structuredContent` that validates. If not: a `structural` drift event (the location, the
//!   digest of the offending content), and by the binding's `onDrift`: `notify` passes it on;
//!   `quarantine` writes it (0600, named by its digest) and, like `fail-closed` and
//!   `qualified-fallback` (no fallback for MCP yet), replaces the message with a JSON-RPC error
//!   `ERR_CONTRACT_OUTPUT` carrying the request's id.
//!
//! JSON replies are checked whole (bounded by `limits.max_response`); SSE replies event by
//! event, so progress notifications still stream.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, Response};
use palisade_policy::drift::Action;
use palisade_policy::rich::{Capability, Contract, DriftPolicy};
use palisade_policy::{ErrorCode, Refusal};
use serde_json::{json, Value};

use super::sse;
use crate::body::{self, ProxyBody};
use crate::enforce::WriteContext;
use crate::pipeline::AppState;
use crate::problem::Problem;

/// Whether `result` is an interim outcome rather than a complete result.
pub fn is_interim(result: &Value) -> bool {
    result
        .get("resultType")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "complete")
}

/// The message that goes to the client instead of `msg`, if `msg` answers request `id` with
/// a complete result that breaks the output contract.
pub fn check(
    state: &AppState,
    cx: &WriteContext,
    contract: &Contract,
    on_drift: DriftPolicy,
    id: &Value,
    msg: &Value,
) -> Option<Value> {
    let schema = contract.output.as_ref()?;
    if msg.get("id") != Some(id) {
        return None;
    }
    let result = msg.get("result")?;
    if is_interim(result) || result.get("isError") == Some(&Value::Bool(true)) {
        return None;
    }
    let content = result.get("structuredContent");
    let location = match content {
        None => "/structuredContent".to_owned(),
        Some(c) => match schema.check(c) {
            Ok(()) => return None,
            Err(v) => format!("/structuredContent{}", v.instance_location),
        },
    };
    let evidence = content
        .map(palisade_policy::canon::to_vec)
        .unwrap_or_default();
    let action = match on_drift {
        DriftPolicy::Notify => Action::Notify,
        DriftPolicy::Quarantine => Action::Quarantined,
        DriftPolicy::FailClosed | DriftPolicy::QualifiedFallback => Action::Blocked,
    };
    let refusal = Refusal::new(
        ErrorCode::ContractOutput,
        "the tool result's structuredContent violates structural.output",
    )
    .with_location(location);
    crate::output::report(
        state,
        &refusal,
        cx,
        action,
        crate::output::Observed::payload(&evidence),
    );
    match action {
        Action::Notify | Action::Fallback => None,
        Action::Quarantined | Action::Blocked => {
            if action == Action::Quarantined {
                crate::output::quarantine(state, &evidence);
            }
            let p =
                Problem::from_refusal(&refusal, &uuid::Uuid::new_v4().to_string(), &cx.trace_id);
            Some(json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {"code": super::REFUSED, "message": p.code.title(), "data": p.to_json()},
            }))
        }
    }
}

/// `resp` (a tool call's reply) with its result checked against `cap`'s output contract.
pub async fn guard(
    state: &Arc<AppState>,
    cx: &WriteContext,
    cap: &Capability,
    id: Value,
    resp: Response<ProxyBody>,
) -> Response<ProxyBody> {
    if cap.contract.output.is_none() || !resp.status().is_success() {
        return resp;
    }
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
    let (mut parts, body) = resp.into_parts();
    let limit = state.config.max_response;
    if sse {
        let (state, cx) = (state.clone(), cx.clone());
        let (contract, on_drift) = (cap.contract.clone(), cap.runtime.on_drift);
        let body = sse::map_json(body, limit as usize, move |v| {
            match check(&state, &cx, &contract, on_drift, &id, v) {
                Some(new) => sse::Verdict::Replace(new),
                None => sse::Verdict::Keep,
            }
        });
        return Response::from_parts(parts, body);
    }
    let bytes = match body::collect_proxy(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            let p = Problem::new(
                ErrorCode::ResponseTooLarge,
                "the tool result exceeds limits.max_response and cannot be checked",
                &uuid::Uuid::new_v4().to_string(),
                &cx.trace_id,
            );
            return super::rpc_error(id, http::StatusCode::OK, &p);
        }
    };
    let replaced = serde_json::from_slice::<Value>(&bytes)
        .ok()
        .and_then(|v| check(state, cx, &cap.contract, cap.runtime.on_drift, &id, &v));
    let out = match replaced {
        Some(v) => Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
        None => bytes,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, body::full(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interim_outcomes_are_told_apart() {
        assert!(is_interim(&json!({"resultType": "input_required"})));
        assert!(!is_interim(&json!({"resultType": "complete"})));
        // Before 2026-07-28 there is no resultType: every result is complete.
        assert!(!is_interim(&json!({"content": []})));
    }
}
