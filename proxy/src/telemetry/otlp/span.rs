//! A request's spans: the server span (HTTP semantic conventions and SPEC §16's
//! `palisade.*` attributes; never a body, query or header value), its children, and the facts
//! the stages note for it.
//!
//! A span here is a small record, not an SDK `Span`: ids, start and end, a name, a kind and a
//! few attributes with static keys. The request's record is the request future's task-local
//! ([`CURRENT`]), so a stage reaches it without a parameter; children add themselves to it, and
//! when the answer has been sent the whole request (server span and children) is queued once
//! and encoded to OTLP protobuf by `encode` (issue 58: through the SDK's `Span`, its Context
//! map and `opentelemetry-otlp`'s conversion a traced request cost +31 % CPU; see
//! docs/performance.md).

use std::future::Future;
use std::sync::{Arc, Mutex};

use palisade_policy::ErrorCode;
use rand::RngCore as _;

use super::queue::Feed;
use crate::net::headers;

tokio::task_local! {
    /// The traced request a future belongs to, and the span its children hang under.
    static CURRENT: Current;
}

/// The request's record and the span a new child hangs under.
#[derive(Clone)]
pub struct Current {
    request: Arc<Request>,
    parent: [u8; 8],
}

/// A span's kind, as OTLP numbers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Internal = 1,
    Server = 2,
    Client = 3,
}

/// An attribute's value: what the spans here carry.
#[derive(Debug, Clone)]
pub enum Value {
    Str(&'static str),
    String(String),
    /// A string made once and shared by every span that carries it (the upstream's host).
    Shared(Arc<str>),
    Int(i64),
}

/// One span, finished.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace: [u8; 16],
    pub id: [u8; 8],
    /// All zeros: none (a root).
    pub parent: [u8; 8],
    pub name: &'static str,
    pub kind: Kind,
    pub start_ns: u64,
    pub end_ns: u64,
    pub attributes: Vec<(&'static str, Value)>,
    pub error: bool,
}

/// A traced request as it goes: the server span's start, and the children ended so far.
struct Request {
    feed: Arc<Feed<Vec<Span>>>,
    trace: [u8; 16],
    id: [u8; 8],
    parent: [u8; 8],
    start_ns: u64,
    method: &'static str,
    scheme: &'static str,
    state: Mutex<State>,
}

/// What the stages learned of the request, and its children, put together when it ends.
#[derive(Default)]
struct State {
    /// The request's path: here, so that the span takes it when it ends instead of copying it.
    path: String,
    status: u16,
    decision: &'static str,
    bytes: u64,
    code: Option<ErrorCode>,
    operation: Option<String>,
    rule: Option<String>,
    fence_epoch: Option<i64>,
    receipt_index: Option<i64>,
    children: Vec<Span>,
}

/// A sampled request's server span.
pub struct Traced {
    request: Arc<Request>,
}

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn span_id() -> [u8; 8] {
    let mut id = [0u8; 8];
    while id == [0; 8] {
        rand::thread_rng().fill_bytes(&mut id);
    }
    id
}

/// Starts the server span of a request: the client's `traceparent` is its parent; with none
/// (or an invalid one) it is a root and the request gets a `traceparent` naming it. The trace
/// id, and the span when it is sampled. Whether it is sampled is decided first and cheaply
/// (the client's flag, else one draw against `sample`): an unsampled request makes no span.
pub(super) fn server(
    feed: &Arc<Feed<Vec<Span>>>,
    sample: f64,
    parts: &mut http::request::Parts,
) -> (Option<Traced>, Arc<str>) {
    // The client's trace and span ids and its sampled flag, not its `tracestate`: that is a
    // header's value, which no span records (the upstream still gets the header).
    let remote = match headers::traceparent(&parts.headers) {
        Some(tp) if !tp.sampled => return (None, tp.trace_id.into()),
        Some(tp) => match (hex::decode(tp.trace_id), hex::decode(tp.parent_id)) {
            (Ok(t), Ok(p)) => match (<[u8; 16]>::try_from(t), <[u8; 8]>::try_from(p)) {
                (Ok(t), Ok(p)) => Some((t, p)),
                _ => None,
            },
            _ => None,
        },
        None => None,
    };
    if remote.is_none() && !draw(sample) {
        return (None, headers::ensure_unsampled(&mut parts.headers));
    }
    let id = span_id();
    let (trace, parent, trace_id) = match remote {
        Some((trace, parent)) => (trace, parent, headers::trace_id_hex(&trace)),
        None => {
            let mut trace = [0u8; 16];
            rand::thread_rng().fill_bytes(&mut trace);
            let hex = headers::install_traceparent(&mut parts.headers, &trace, &id, true);
            (trace, [0; 8], hex)
        }
    };
    let request = Request {
        feed: feed.clone(),
        trace,
        id,
        parent,
        start_ns: now_ns(),
        method: method_name(&parts.method),
        scheme: if parts.uri.scheme_str() == Some("https") {
            "https"
        } else {
            "http"
        },
        state: Mutex::new(State {
            path: parts.uri.path().to_owned(),
            // The server span and, for most requests, one child: one allocation.
            children: Vec::with_capacity(4),
            ..State::default()
        }),
    };
    let traced = Traced {
        request: Arc::new(request),
    };
    (Some(traced), trace_id)
}

/// Whether a new trace is recorded: `sample` of them (a root is decided once, here).
fn draw(sample: f64) -> bool {
    sample >= 1.0 || (sample > 0.0 && rand::random::<f64>() < sample)
}

/// A span is named by its method (a closed set: any other method is `_OTHER`).
pub(super) fn method_name(m: &http::Method) -> &'static str {
    match *m {
        http::Method::GET => "GET",
        http::Method::HEAD => "HEAD",
        http::Method::POST => "POST",
        http::Method::PUT => "PUT",
        http::Method::PATCH => "PATCH",
        http::Method::DELETE => "DELETE",
        http::Method::OPTIONS => "OPTIONS",
        _ => "_OTHER",
    }
}

impl Request {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Traced {
    /// `fut` run as the request's (its children find the request).
    pub fn run<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(
            Current {
                request: self.request.clone(),
                parent: self.request.id,
            },
            fut,
        )
    }

    /// The answer's status and the decision, for the span.
    pub fn decided(&self, status: u16, decision: &'static str) {
        let mut s = self.request.state();
        s.status = status;
        s.decision = decision;
    }

    /// The answer's body has been sent: `bytes` of it.
    pub fn set_bytes(&self, bytes: u64) {
        self.request.state().bytes = bytes;
    }
}

impl Drop for Traced {
    /// The answer has been sent (or the exchange dropped): the server span is finished with
    /// what the stages noted, and the request's spans are queued together. Noted facts are
    /// read here, not when the answer's head left: a tool call streamed back commits on its
    /// last message.
    fn drop(&mut self) {
        let r = &self.request;
        let mut s = r.state();
        let mut a: Vec<(&'static str, Value)> = Vec::with_capacity(12);
        a.push(("http.request.method", Value::Str(r.method)));
        a.push(("url.path", Value::String(std::mem::take(&mut s.path))));
        a.push(("url.scheme", Value::Str(r.scheme)));
        a.push(("http.response.status_code", Value::Int(i64::from(s.status))));
        a.push((
            "http.response.body.size",
            Value::Int(i64::try_from(s.bytes).unwrap_or(i64::MAX)),
        ));
        a.push(("palisade.decision", Value::Str(s.decision)));
        if s.status >= 500 {
            a.push(("error.type", Value::String(s.status.to_string())));
        }
        if let Some(code) = s.code {
            a.push(("palisade.code", Value::Str(code.as_str())));
        }
        // An attribute, not the span's name: an unbound write's operation is its raw path,
        // which a span name must not be (names are low-cardinality).
        if let Some(op) = s.operation.take() {
            a.push(("palisade.operation", Value::String(op)));
        }
        if let Some(rule) = s.rule.take() {
            a.push(("palisade.rule", Value::String(rule)));
        }
        if let Some(epoch) = s.fence_epoch {
            a.push(("palisade.fence_epoch", Value::Int(epoch)));
        }
        if let Some(index) = s.receipt_index {
            a.push(("palisade.receipt_index", Value::Int(index)));
        }
        let mut spans = std::mem::take(&mut s.children);
        spans.push(Span {
            trace: r.trace,
            id: r.id,
            parent: r.parent,
            name: r.method,
            kind: Kind::Server,
            start_ns: r.start_ns,
            end_ns: now_ns(),
            attributes: a,
            error: s.status >= 500,
        });
        drop(s);
        r.feed.push(spans);
    }
}

/// Notes what the request's span should say, when the request is traced (one task-local
/// read otherwise).
fn note(f: impl FnOnce(&mut State)) {
    let _ = CURRENT.try_with(|c| f(&mut c.request.state()));
}

/// The code of the sidecar's own answer.
pub fn note_code(code: ErrorCode) {
    note(|f| f.code = Some(code));
}

/// A receipt the request left: its index, epoch, operation, code and rule.
pub fn note_receipt(index: u64, receipt: &serde_json::Value) {
    note(|f| {
        f.receipt_index = i64::try_from(index).ok();
        if let Some(e) = receipt["cas_fence_epoch"].as_u64() {
            f.fence_epoch = i64::try_from(e).ok();
        }
        if let Some(op) = receipt["operation"].as_str() {
            f.operation = Some(op.to_owned());
        }
        if let Some(rule) = receipt["rule"].as_str() {
            f.rule = Some(rule.to_owned());
        }
        if let Some(code) = receipt["code"].as_str().and_then(ErrorCode::from_wire) {
            f.code = Some(code);
        }
    });
}

/// A child of the request's span, when the request is traced; it ends when dropped.
pub struct Child {
    current: Current,
    span: Span,
}

impl Child {
    /// Starts `name` under the current span; `None` when the request is not traced
    /// (`attributes` is then never called).
    pub fn start(
        name: &'static str,
        kind: Kind,
        attributes: impl FnOnce() -> Vec<(&'static str, Value)>,
    ) -> Option<Child> {
        let current = CURRENT.try_with(Current::clone).ok()?;
        let id = span_id();
        let span = Span {
            trace: current.request.trace,
            id,
            parent: current.parent,
            name,
            kind,
            start_ns: now_ns(),
            end_ns: 0,
            attributes: attributes(),
            error: false,
        };
        Some(Child {
            current: Current {
                request: current.request,
                parent: id,
            },
            span,
        })
    }

    /// The upstream is told this span is the parent of its work (as Envoy and linkerd do).
    pub fn propagate(&self, headers: &mut http::HeaderMap) {
        headers::install_traceparent(headers, &self.span.trace, &self.span.id, true);
    }

    pub fn set(&mut self, key: &'static str, value: Value) {
        self.span.attributes.push((key, value));
    }

    /// Marks the span failed with `kind` (`error.type`).
    pub fn failed(&mut self, kind: &'static str) {
        self.span.error = true;
        self.span.attributes.push(("error.type", Value::Str(kind)));
    }

    /// `fut` with this span as the one its children hang under.
    pub fn run<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self.current.clone(), fut)
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let mut span = std::mem::replace(
            &mut self.span,
            Span {
                trace: [0; 16],
                id: [0; 8],
                parent: [0; 8],
                name: "",
                kind: Kind::Internal,
                start_ns: 0,
                end_ns: 0,
                attributes: Vec::new(),
                error: false,
            },
        );
        span.end_ns = now_ns();
        self.current.request.state().children.push(span);
    }
}

/// `fut`, to be spawned, carrying the request when it is traced (a spawned task does not
/// inherit a task-local); as it is otherwise.
pub fn carried<F: Future>(
    fut: F,
) -> futures_util::future::Either<tokio::task::futures::TaskLocalFuture<Current, F>, F> {
    use futures_util::future::Either;
    match CURRENT.try_with(Current::clone) {
        Ok(current) => Either::Left(CURRENT.scope(current, fut)),
        Err(_) => Either::Right(fut),
    }
}

/// `fut` as a child span `name` of the request's span, when it is traced.
pub async fn within<F: Future>(name: &'static str, fut: F) -> F::Output {
    match Child::start(name, Kind::Internal, Vec::new) {
        Some(child) => child.run(fut).await,
        None => fut.await,
    }
}
