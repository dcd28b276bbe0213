//! A refused tool call: recorded by the one refusal path (counted, its rejection receipt and
//! drift event stored) and answered as a JSON-RPC error whose `data` is the problem object
//! (SPEC §6).

use http::{Response, StatusCode};
use serde_json::Value;

use crate::context::{AppState, Outcome, WriteContext};
use crate::enforce::permit::Denied;
use crate::enforce::receipts::{self, Refused};
use crate::net::body::ProxyBody;

/// A refusal as a JSON-RPC error answering `id`.
pub(crate) async fn refuse(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    lease: Option<&[u8]>,
    evidence: &[u8],
    id: Value,
    status: StatusCode,
) -> (Response<ProxyBody>, Outcome) {
    let refused = record(state, cx, denied, lease, evidence).await;
    (refused.into_rpc(id, status), Outcome::Refused)
}

/// A refusal of a tool call, recorded: its lease and arguments are the evidence.
pub(crate) async fn record(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    lease: Option<&[u8]>,
    evidence: &[u8],
) -> Refused {
    receipts::refuse_denied(state, denied, cx, lease, Some(evidence)).await
}
