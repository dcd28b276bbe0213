//! What an enforced write came to, typed, for the surface that renders it (issue 35): the
//! answer as the client gets it, and beside it the receipt and the refusal code, so no surface
//! reads a header back out of an answer the sidecar made.

use http::Response;
use palisade_policy::ErrorCode;
use serde_json::Value;

use crate::context::Outcome;
use crate::enforce::own::Own;
use crate::enforce::receipts::Refused;
use crate::net::body::ProxyBody;

pub(crate) struct Written {
    pub resp: Response<ProxyBody>,
    pub outcome: Outcome,
    /// The receipt the write left (commit, dry run, escrow hold, rejection) or the one its
    /// idempotency key replayed; `None` when there is none (a read-only operation, or the
    /// store did not take it).
    pub receipt: Option<Value>,
    /// The code of the sidecar's own answer, when it answered with one: a refusal before the
    /// write, a failure after it (an output contract, the upstream down or too slow). Set
    /// where the answer is made, never read back out of it; an upstream's own error answer
    /// has none.
    pub code: Option<ErrorCode>,
    /// A write committed on its answer (an MCP tool call): what the commit came to, told
    /// once the answer is known, which may be after `resp`'s head (a streamed answer).
    pub settled: Option<tokio::sync::oneshot::Receiver<Settled>>,
}

/// What a sent write committed on its answer came to.
#[derive(Debug)]
pub(crate) struct Settled {
    /// The commit receipt (kind `commit`; outcome `interim` or `uncertain` as it was).
    pub receipt: Option<Value>,
    /// The sidecar's problem that replaced the answer, if one did: an output contract broken,
    /// the answer too large to check, never come, or the leg failed.
    pub code: Option<ErrorCode>,
    /// The answer was interim: the call is not done.
    pub interim: bool,
}

impl Written {
    /// An answer that left no receipt (a read-only operation forwarded).
    pub fn plain(resp: Response<ProxyBody>, outcome: Outcome) -> Self {
        Self::with_receipt(resp, outcome, None)
    }

    /// An answer and the receipt it carries.
    pub fn with_receipt(
        resp: Response<ProxyBody>,
        outcome: Outcome,
        receipt: Option<Value>,
    ) -> Self {
        Self {
            resp,
            outcome,
            receipt,
            code: None,
            settled: None,
        }
    }

    /// The sidecar's own answer on the HTTP wire: problem+json.
    pub fn own(own: Own) -> Self {
        Self::rendered(own, Own::into_response)
    }

    /// The sidecar's own answer to a tool call: a JSON-RPC error answering `id`.
    pub fn own_rpc(own: Own, id: Value) -> Self {
        Self::rendered(own, |own| own.into_rpc(id, http::StatusCode::OK))
    }

    /// `own` rendered by `render`, its code, outcome and receipt kept beside the answer.
    fn rendered(own: Own, render: impl FnOnce(Own) -> Response<ProxyBody>) -> Self {
        let (code, outcome, receipt) = (own.code(), own.outcome(), own.receipt());
        Self {
            code: Some(code),
            ..Self::with_receipt(render(own), outcome, receipt)
        }
    }

    /// A recorded refusal, rendered as problem+json.
    pub fn refused(r: Refused) -> Self {
        Self::own(Own::from(r))
    }

    /// A recorded refusal of a tool call, rendered as a JSON-RPC error answering `id`.
    pub fn refused_rpc(r: Refused, id: Value) -> Self {
        Self::own_rpc(Own::from(r), id)
    }

    /// The wire form alone, for a surface that needs nothing else.
    pub fn into_pair(self) -> (Response<ProxyBody>, Outcome) {
        (self.resp, self.outcome)
    }
}
