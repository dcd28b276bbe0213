//! A refused tool call: counted, its rejection receipt and drift event stored, answered as a
//! JSON-RPC error whose `data` is the problem object (SPEC §6).

use http::{Response, StatusCode};
use serde_json::Value;

use crate::context::{AppState, Outcome, WriteContext};
use crate::enforce::permit::Denied;
use crate::enforce::receipts;
use crate::net::body::ProxyBody;
use crate::net::jsonrpc::rewrap;
use crate::net::problem::Problem;

/// A refusal as a JSON-RPC error: the rejection receipt and drift event as for HTTP
/// (`receipts::refuse`), the problem object as the error's `data`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn refuse(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    lease: Option<&[u8]>,
    evidence: &[u8],
    id: Value,
    status: StatusCode,
) -> (Response<ProxyBody>, Outcome) {
    let resp = refusal_problem(state, cx, denied, lease, evidence).await;
    (rewrap(resp, id, status).await, Outcome::Refused)
}

/// A refusal of a tool call as problem+json: counted, with its rejection receipt and drift
/// event when enforcement is on.
pub(crate) async fn refusal_problem(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    lease: Option<&[u8]>,
    evidence: &[u8],
) -> Response<ProxyBody> {
    state.metrics.refusal(denied.refusal.code);
    match &state.enforcement {
        Some(enf) => receipts::refuse_denied(enf, &denied, cx, lease, Some(evidence)).await,
        None => Problem::from_refusal(
            &denied.refusal,
            &uuid::Uuid::new_v4().to_string(),
            &cx.trace_id,
        )
        .into_response(),
    }
}
