//! The sidecar's own answer, typed until the surface that carries it renders it once in its
//! wire's form (issue 55; rustls's one table from error to alert, linkerd's `HttpRescue`):
//!
//! ```text
//! Own::Refused(Refused)   a policy refusal, counted (and receipted, with its drift event,
//!                         when recorded): receipts::record, receipts::counted
//! Own::Failed(Failure)    the upstream, a limit on an answer, a path naming nothing, a task:
//!                         net::problem's one table gives code and detail
//!   → into_response        problem+json (HTTP surfaces: pipeline::handle, the HTTP write leg)
//!   → into_rpc / rpc_doc   a JSON-RPC error whose data is the problem (MCP)
//! ```
//! A stage returns `Err(Own)`; it never builds a problem or a JSON-RPC error itself.

use std::sync::Arc;

use http::{HeaderName, HeaderValue, Response, StatusCode};
use palisade_policy::ErrorCode;
use serde_json::Value;

use crate::context::Outcome;
use crate::enforce::receipts::Refused;
use crate::net::body::ProxyBody;
use crate::net::jsonrpc;
use crate::net::problem::{Failure, Problem};

/// The sidecar's own answer, not yet on a wire.
#[derive(Debug)]
pub enum Own {
    /// Boxed: a refusal carries its receipt and members, and a stage's `Result` stays small.
    Refused(Box<Refused>),
    Failed(Failed),
    /// The request reached the upstream and this replaced its answer (an output contract
    /// refused it): counted as forwarded, as the request was.
    Replaced(Box<Own>),
}

/// A failure, answered under the request's trace id.
#[derive(Debug)]
pub struct Failed {
    pub failure: Failure,
    pub trace_id: Arc<str>,
}

impl Own {
    /// `failure`, answered under the request's trace id.
    pub fn failed(failure: Failure, trace_id: &Arc<str>) -> Self {
        Own::Failed(Failed {
            failure,
            trace_id: trace_id.clone(),
        })
    }

    /// The code the answer has.
    pub fn code(&self) -> ErrorCode {
        match self {
            Own::Refused(r) => r.code(),
            Own::Failed(f) => f.failure.code(),
            Own::Replaced(own) => own.code(),
        }
    }

    /// What the exchange is counted as.
    pub fn outcome(&self) -> Outcome {
        match self {
            Own::Refused(_) => Outcome::Refused,
            Own::Failed(f) if f.failure.is_refusal() => Outcome::Refused,
            Own::Failed(_) => Outcome::Error,
            Own::Replaced(_) => Outcome::Forwarded,
        }
    }

    /// The rejection receipt a recorded refusal left.
    pub fn receipt(&self) -> Option<Value> {
        match self {
            Own::Refused(r) => r.receipt.clone(),
            Own::Failed(_) => None,
            Own::Replaced(own) => own.receipt(),
        }
    }

    /// The problem every wire renders: the one place an own answer's code becomes known to
    /// the request's span (SPEC §16's `palisade.code`).
    fn problem(&self) -> Problem {
        crate::telemetry::otlp::span::note_code(self.code());
        match self {
            Own::Refused(r) => r.problem(),
            Own::Failed(f) => Problem::of_failure(f.failure, &f.trace_id),
            Own::Replaced(own) => own.problem(),
        }
    }

    /// The headers a refusal's answer carries (its receipt, the fence's epoch, a protocol's
    /// challenge); a failure's carries none.
    fn headers(&self) -> Vec<(HeaderName, HeaderValue)> {
        match self {
            Own::Refused(r) => r.headers(),
            Own::Failed(_) => Vec::new(),
            Own::Replaced(own) => own.headers(),
        }
    }

    /// problem+json, with the answer's headers.
    pub fn into_response(self) -> Response<ProxyBody> {
        let mut resp = self.problem().into_response();
        for (name, value) in self.headers() {
            resp.headers_mut().insert(name, value);
        }
        resp
    }

    /// The answer and how the exchange is counted.
    pub fn answer(self) -> (Response<ProxyBody>, Outcome) {
        let outcome = self.outcome();
        (self.into_response(), outcome)
    }

    /// A JSON-RPC error answering `id` in an HTTP answer of `status`, with the same headers.
    pub fn into_rpc(self, id: Value, status: StatusCode) -> Response<ProxyBody> {
        let mut resp = jsonrpc::error_response(id, status, self.problem().to_json());
        for (name, value) in self.headers() {
            resp.headers_mut().insert(name, value);
        }
        resp
    }

    /// The JSON-RPC error answering `id`, as a message (one of a stream's).
    pub fn rpc_doc(&self, id: Value) -> Value {
        jsonrpc::error_doc(id, self.problem().to_json())
    }

    /// This, as the answer that replaced the upstream's.
    pub fn replacing(self) -> Self {
        match self {
            Own::Replaced(_) => self,
            own => Own::Replaced(Box::new(own)),
        }
    }
}

impl From<Refused> for Own {
    fn from(r: Refused) -> Self {
        Own::Refused(Box::new(r))
    }
}

/// What a stage of an HTTP surface comes to: an answer to pass on (the upstream's, or the
/// surface's own success) and how it is counted, or the sidecar's own answer, typed, which
/// `pipeline::handle` renders once.
pub type Staged = Result<(Response<ProxyBody>, Outcome), Own>;

/// An answer passed on as the upstream gave it.
pub fn forwarded(resp: Response<ProxyBody>) -> (Response<ProxyBody>, Outcome) {
    (resp, Outcome::Forwarded)
}
