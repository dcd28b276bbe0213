//! Turns refusals and failures into RFC 9457 `application/problem+json` responses (SPEC §6).
//!
//! The code table in `palisade_policy::codes` fixes status, title and `type`; this file only
//! renders. `detail` comes from policy and names fields and rules, never request values.

use http::{header, Response, StatusCode};
use palisade_policy::{ErrorCode, Refusal};
use serde_json::{json, Map, Value};

use crate::net::body::{self, ProxyBody};

/// A new request id for a problem's `instance`.
pub fn new_instance() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A problem document about to be sent.
#[derive(Debug, Clone)]
pub struct Problem {
    pub code: ErrorCode,
    pub status: u16,
    pub detail: String,
    pub reason: Option<&'static str>,
    /// Request id (`instance`).
    pub instance: String,
    pub trace_id: String,
    /// Extension members (`current_epoch`, `receipt`, …).
    pub extensions: Map<String, Value>,
}

impl Problem {
    pub fn new(code: ErrorCode, detail: impl Into<String>, instance: &str, trace_id: &str) -> Self {
        Self {
            code,
            status: code.status(),
            detail: detail.into(),
            reason: None,
            instance: instance.to_owned(),
            trace_id: trace_id.to_owned(),
            extensions: Map::new(),
        }
    }

    pub fn from_refusal(r: &Refusal, instance: &str, trace_id: &str) -> Self {
        let mut p = Self {
            status: r.status(),
            reason: r.reason,
            ..Self::new(r.code, r.detail.to_string(), instance, trace_id)
        };
        if let Some(at) = &r.location {
            p.extensions
                .insert("violationLocation".into(), Value::String(at.clone()));
        }
        p
    }

    /// The sidecar's own answer with a fresh `instance`: a failure, or a refusal that is
    /// answered but not recorded (a path that names nothing, a flood past its first refusal).
    pub fn answer(code: ErrorCode, detail: impl Into<String>, trace_id: &str) -> Self {
        Self::new(code, detail, &new_instance(), trace_id)
    }

    /// An answer of the admin API, which no trace context reaches: a fresh trace id too.
    pub fn untraced(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::answer(code, detail, &uuid::Uuid::new_v4().simple().to_string())
    }

    /// A policy refusal with a fresh `instance`, not recorded: the one refusal path
    /// (`enforce::receipts::record`) renders recorded ones.
    pub fn of_refusal(r: &Refusal, trace_id: &str) -> Self {
        Self::from_refusal(r, &new_instance(), trace_id)
    }

    pub fn to_json(&self) -> Value {
        let mut doc = json!({
            "type": self.code.problem_type(),
            "title": self.code.title(),
            "status": self.status,
            "code": self.code.as_str(),
            "detail": self.detail,
            "instance": self.instance,
            "trace_id": self.trace_id,
        });
        let obj = doc.as_object_mut().expect("literal object");
        if let Some(reason) = self.reason {
            obj.insert("reason".into(), json!(reason));
        }
        for (k, v) in &self.extensions {
            obj.insert(k.clone(), v.clone());
        }
        doc
    }

    /// The response: problem+json, never cached. What made it keeps its code typed
    /// (`enforce::own::Own`); nothing reads it back out of the response.
    pub fn into_response(self) -> Response<ProxyBody> {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_vec(&self.to_json()).unwrap_or_default();
        let mut resp = Response::new(body::full(body));
        *resp.status_mut() = status;
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/problem+json"),
        );
        resp.headers_mut().insert(
            header::CACHE_CONTROL,
            header::HeaderValue::from_static("no-store"),
        );
        resp
    }
}

/// What went wrong when the sidecar answers itself and no policy refused: the upstream, a
/// limit on an answer, a path that names nothing, a task. Typed until the surface that
/// carries it renders it ([`Problem::of_failure`] is the one table from failure to code and
/// detail), so a stage says what happened and never how it looks on a wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// The request's target cannot be rewritten for the upstream.
    NotForwardable,
    /// The request body could not be read.
    BodyUnreadable,
    /// A read's body exceeds `limits.max_body`.
    BodyTooLarge,
    /// A reserved path that names no endpoint; `endpoints` says which there are.
    NoEndpoint(&'static str),
    /// The upstream failed: not reached, not answering in time (sent, so it may or may not
    /// have happened), or its connection broke (also while its answer was read).
    Upstream(Fault),
    /// The upstream's answer exceeds `limits.max_response`: it cannot be `checked` or
    /// `stored` (the purpose the detail names).
    ResponseTooLarge(Purpose),
    /// The fallback deployment did not answer.
    FallbackDown,
    /// A tool call sent and never answered: it may or may not have run.
    Unanswered(Silence),
    /// A task of the sidecar's failed: what could not be completed.
    Internal(Unfinished),
}

/// How the upstream failed, as the client learns it (the error itself goes to the log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    Unreachable,
    Timeout,
    Broken,
}

/// Why an answer had to be read whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// An output contract checks it.
    Checked,
    /// It is stored with the write's receipt (an idempotency key, an escrow).
    Stored,
    /// A tools/list answer is pinned and filtered.
    Listing,
    /// An AIP-2.1 quote channel stores the agent's reply (64 KiB).
    QuoteReply,
    /// A tool call's result is checked against its output contract.
    ToolResult,
}

/// How a tool call's answer failed to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// Not within its timeout.
    Timeout,
    /// The server's stream ended first.
    StreamEnded,
}

/// What a failed task left undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unfinished {
    /// An enforced write's task.
    Write,
    /// An RCNS composition's task; its steps' receipts say what was done.
    Composition,
}

impl Failure {
    /// The failure the upstream's error is.
    pub fn upstream(e: &crate::net::upstream::UpstreamError) -> Self {
        use crate::net::upstream::UpstreamError;
        Failure::Upstream(match e {
            UpstreamError::Timeout(_) => Fault::Timeout,
            UpstreamError::Connect(_) => Fault::Unreachable,
            UpstreamError::Failed(_) | UpstreamError::Identity(_) => Fault::Broken,
        })
    }

    /// Whether the call was sent and not answered: it may or may not have happened.
    pub fn uncertain(self) -> bool {
        matches!(
            self,
            Failure::Upstream(Fault::Timeout) | Failure::Unanswered(_)
        )
    }

    /// Its code and detail: the one table.
    fn table(self) -> (ErrorCode, &'static str) {
        match self {
            Failure::NotForwardable => {
                (ErrorCode::BadRequest, "request target cannot be forwarded")
            }
            Failure::BodyUnreadable => (ErrorCode::BadRequest, "request body could not be read"),
            Failure::BodyTooLarge => (
                ErrorCode::BodyTooLarge,
                "request body exceeds limits.max_body",
            ),
            Failure::NoEndpoint(endpoints) => (ErrorCode::NotFound, endpoints),
            Failure::Upstream(Fault::Timeout) => (
                ErrorCode::UpstreamTimeout,
                "the upstream did not answer within upstream.timeout",
            ),
            Failure::Upstream(Fault::Unreachable) => (
                ErrorCode::UpstreamUnavailable,
                "the upstream could not be reached",
            ),
            Failure::Upstream(Fault::Broken) => (
                ErrorCode::UpstreamUnavailable,
                "the upstream connection failed",
            ),
            Failure::ResponseTooLarge(purpose) => (
                ErrorCode::ResponseTooLarge,
                match purpose {
                    Purpose::Checked => {
                        "the upstream response exceeds limits.max_response and cannot be checked"
                    }
                    Purpose::Stored => {
                        "the upstream response exceeds limits.max_response and cannot be stored"
                    }
                    Purpose::Listing => {
                        "the tools/list answer exceeds limits.max_response and cannot be checked"
                    }
                    Purpose::QuoteReply => {
                        "the agent's reply could not be read whole (limit 64 KiB)"
                    }
                    Purpose::ToolResult => {
                        "the tool result exceeds limits.max_response and cannot be checked"
                    }
                },
            ),
            Failure::FallbackDown => (
                ErrorCode::UpstreamUnavailable,
                "the fallback deployment did not answer",
            ),
            Failure::Unanswered(Silence::Timeout) => (
                ErrorCode::UpstreamTimeout,
                "the tool call was not answered within its timeout",
            ),
            Failure::Unanswered(Silence::StreamEnded) => (
                ErrorCode::UpstreamUnavailable,
                "the server's stream ended before the tool call was answered",
            ),
            Failure::Internal(Unfinished::Write) => {
                (ErrorCode::Internal, "the write could not be completed")
            }
            Failure::Internal(Unfinished::Composition) => (
                ErrorCode::Internal,
                "the composition could not be completed: its steps' receipts say what was done",
            ),
        }
    }

    pub fn code(self) -> ErrorCode {
        self.table().0
    }

    /// Whether the client's request was at fault (a refusal in the access log and metrics)
    /// rather than the sidecar or the upstream (an error).
    pub fn is_refusal(self) -> bool {
        matches!(
            self,
            Failure::NotForwardable
                | Failure::BodyUnreadable
                | Failure::BodyTooLarge
                | Failure::NoEndpoint(_)
        )
    }
}

impl Problem {
    /// The problem a failure is answered with, a fresh `instance`; a call sent and not
    /// answered says `"outcome": "uncertain"`.
    pub fn of_failure(f: Failure, trace_id: &str) -> Self {
        let (code, detail) = f.table();
        let mut p = Self::answer(code, detail, trace_id);
        if f.uncertain() {
            p.extensions.insert("outcome".into(), json!("uncertain"));
        }
        p
    }
}
