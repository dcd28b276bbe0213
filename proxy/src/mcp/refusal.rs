//! A refused tool call: recorded by the one refusal path (counted, its rejection receipt and
//! drift event stored) and answered as a JSON-RPC error whose `data` is the problem object
//! (SPEC §6).

use http::{Response, StatusCode};
use serde_json::Value;

use crate::context::{Outcome, Recorder, WriteContext};
use crate::enforce::own::Own;
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
#[derive(Debug)]
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

/// What a stage of the MCP surface comes to: an answer to pass on, or the sidecar's own
/// answer and the form it takes, which `mcp::handle` renders once.
pub(crate) type Staged = Result<(Response<ProxyBody>, Outcome), Stop>;

/// The sidecar's own answer to an MCP request, not yet on the wire.
#[derive(Debug)]
pub(crate) struct Stop {
    own: Own,
    /// The JSON-RPC error's addressee; `None`: the leg to the server failed, answered as
    /// problem+json like any proxied request's.
    reply: Option<Reply>,
}

impl Stop {
    /// A JSON-RPC error answering `reply`.
    pub fn rpc(own: impl Into<Own>, reply: Reply) -> Self {
        Self {
            own: own.into(),
            reply: Some(reply),
        }
    }

    /// An admission refusal: a JSON-RPC error answering `id`, its HTTP status (401, 403) and
    /// challenge kept.
    pub fn admission(refused: Refused, id: Value) -> Self {
        let status = refused.status();
        Self::rpc(refused, Reply { id, status })
    }

    /// problem+json: the request went no further than the sidecar's leg to the server.
    pub fn problem(own: Own) -> Self {
        Self { own, reply: None }
    }

    /// The one place an MCP request's own answer is rendered.
    pub fn render(self) -> (Response<ProxyBody>, Outcome) {
        let outcome = self.own.outcome();
        let resp = match self.reply {
            Some(r) => self.own.into_rpc(r.id, r.status),
            None => self.own.into_response(),
        };
        (resp, outcome)
    }
}

/// A refusal, recorded, as a JSON-RPC error answering `reply`.
pub(crate) async fn refuse(
    rec: Recorder<'_>,
    cx: &WriteContext,
    denied: Denied,
    carried: Carried<'_>,
    reply: Reply,
) -> Staged {
    Err(Stop::rpc(record(rec, cx, denied, carried).await, reply))
}

/// A request the server answers as it is, or the problem of the leg that failed.
pub(crate) fn passed(sent: Result<Response<ProxyBody>, Own>) -> Staged {
    sent.map(crate::enforce::own::forwarded)
        .map_err(Stop::problem)
}

/// A refusal of a tool call, recorded: its lease and arguments are the evidence.
pub(crate) async fn record(
    rec: Recorder<'_>,
    cx: &WriteContext,
    denied: Denied,
    carried: Carried<'_>,
) -> Refused {
    receipts::refuse_denied(rec, denied, cx, carried.lease, Some(carried.body)).await
}
