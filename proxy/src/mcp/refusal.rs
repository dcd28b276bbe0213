//! A refused tool call: recorded by the one refusal path (counted, its rejection receipt and
//! drift event stored) and answered as a JSON-RPC error whose `data` is the problem object
//! (SPEC §6).

use http::{Response, StatusCode};
use serde_json::Value;

use crate::context::{AppState, Outcome, WriteContext};
use crate::enforce::permit::Denied;
use crate::enforce::receipts::{self, Refused};
use crate::net::body::ProxyBody;

/// What a refused request carried that its rejection receipt keeps: the lease (a tool
/// call's) and the body or the call's arguments.
#[derive(Clone, Copy, Default)]
pub(crate) struct Carried<'a> {
    pub lease: Option<&'a [u8]>,
    pub body: &'a [u8],
}

impl<'a> Carried<'a> {
    /// A body and no lease: a request refused before its tool call was read.
    pub fn body(body: &'a [u8]) -> Self {
        Self { lease: None, body }
    }
}

/// How the JSON-RPC error answers: the request's `id`, in an HTTP answer of `status`.
pub(crate) struct Reply {
    pub id: Value,
    pub status: StatusCode,
}

impl Reply {
    /// An error answering the request `id` (HTTP 200, as JSON-RPC errors travel).
    pub fn to(id: Value) -> Self {
        Self {
            id,
            status: StatusCode::OK,
        }
    }

    /// The transport's own error (no request `id` to answer): `status` says what failed.
    pub fn transport(status: StatusCode) -> Self {
        Self {
            id: Value::Null,
            status,
        }
    }
}

/// A refusal, recorded, as a JSON-RPC error.
pub(crate) async fn refuse(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    carried: Carried<'_>,
    reply: Reply,
) -> (Response<ProxyBody>, Outcome) {
    let refused = record(state, cx, denied, carried).await;
    (refused.into_rpc(reply.id, reply.status), Outcome::Refused)
}

/// A refusal of a tool call, recorded: its lease and arguments are the evidence.
pub(crate) async fn record(
    state: &AppState,
    cx: &WriteContext,
    denied: Denied,
    carried: Carried<'_>,
) -> Refused {
    receipts::refuse_denied(state, denied, cx, carried.lease, Some(carried.body)).await
}
