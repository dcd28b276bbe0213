//! What an enforced write came to, typed, for the surface that renders it (issue 35): the
//! answer as the client gets it, and beside it the receipt and the refusal code, so no surface
//! reads a header back out of an answer the sidecar made.

use http::Response;
use palisade_policy::ErrorCode;
use serde_json::Value;

use crate::context::Outcome;
use crate::enforce::receipts::Refused;
use crate::net::body::ProxyBody;

pub(crate) struct Written {
    pub resp: Response<ProxyBody>,
    pub outcome: Outcome,
    /// The receipt the write left (commit, dry run, escrow hold, rejection) or the one its
    /// idempotency key replayed; `None` when there is none (a read-only operation, or the
    /// store did not take it).
    pub receipt: Option<Value>,
    /// The refusal's code, when the write was refused.
    pub refused: Option<ErrorCode>,
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
    /// An answer that left no receipt (a read-only operation forwarded, a failure).
    pub fn plain(resp: Response<ProxyBody>, outcome: Outcome) -> Self {
        Self {
            resp,
            outcome,
            receipt: None,
            refused: None,
            settled: None,
        }
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
            refused: None,
            settled: None,
        }
    }

    /// A recorded refusal, rendered as problem+json.
    pub fn refused(r: Refused) -> Self {
        let (code, receipt) = (r.code(), r.receipt.clone());
        Self {
            resp: r.into_response(),
            outcome: Outcome::Refused,
            receipt,
            refused: Some(code),
            settled: None,
        }
    }

    /// The code of the sidecar's own problem, if it answered with one: a refusal before the
    /// write, or a failure after it (an output contract, the upstream down or too slow). An
    /// upstream's own error answer has none.
    pub fn code(&self) -> Option<ErrorCode> {
        self.refused
            .or_else(|| self.resp.extensions().get::<ErrorCode>().copied())
    }

    /// A recorded refusal of a tool call, rendered as a JSON-RPC error answering `id`.
    pub fn refused_rpc(r: Refused, id: Value) -> Self {
        let (code, receipt) = (r.code(), r.receipt.clone());
        Self {
            resp: r.into_rpc(id, http::StatusCode::OK),
            outcome: Outcome::Refused,
            receipt,
            refused: Some(code),
            settled: None,
        }
    }

    /// The wire form alone, for a surface that needs nothing else.
    pub fn into_pair(self) -> (Response<ProxyBody>, Outcome) {
        (self.resp, self.outcome)
    }
}
