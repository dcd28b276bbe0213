//! A request's spans: the server span (HTTP semantic conventions and SPEC §16's
//! `palisade.*` attributes; never a body, query or header value), its children, and the
//! facts the stages note for it. The server span's Context is the request future's
//! (`FutureExt::with_context`), so a stage reaches it without a parameter.

use std::future::Future;
use std::sync::{Arc, Mutex};

use opentelemetry::context::FutureExt as _;
use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt as _, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;
use palisade_policy::ErrorCode;

use crate::net::headers;

/// What the stages learned of the request, put on its span when it ends (a child's Context
/// shares it, so a fact noted inside a child still lands on the server span). The answer's
/// status and decision wait here too, so the span is written once, when it ends.
#[derive(Default)]
struct Facts {
    status: u16,
    decision: &'static str,
    bytes: u64,
    code: Option<ErrorCode>,
    operation: Option<String>,
    rule: Option<String>,
    fence_epoch: Option<i64>,
    receipt_index: Option<i64>,
}

/// The request's one value in its Context: the tracer its children are made with, and its
/// facts (one value: each `Context::with_value` copies the Context's map).
struct Tracing {
    tracer: SdkTracer,
    facts: Mutex<Facts>,
}

/// A sampled request's server span and its Context.
pub struct Traced {
    cx: Context,
}

/// Starts the server span of a request: the client's `traceparent` is its parent; with none
/// (or an invalid one) it is a root and the request gets a `traceparent` naming it. The trace
/// id, and the span when it is sampled. Whether it is sampled is decided first and cheaply
/// (the client's flag, else one draw against `sample`): an unsampled request makes no span.
pub(super) fn server(
    tracer: &SdkTracer,
    sample: f64,
    parts: &mut http::request::Parts,
) -> (Option<Traced>, Arc<str>) {
    {
        let parent = match headers::traceparent(&parts.headers) {
            // The client's trace, which it does not record: passed on as it is.
            Some(tp) if !tp.sampled => return (None, tp.trace_id.into()),
            // The client's trace and span ids and its sampled flag, not its `tracestate`:
            // that is a header's value, which no span records (the upstream still gets it).
            Some(tp) => match (
                TraceId::from_hex(tp.trace_id),
                SpanId::from_hex(tp.parent_id),
            ) {
                (Ok(trace), Ok(span)) => Some(SpanContext::new(
                    trace,
                    span,
                    TraceFlags::SAMPLED,
                    true,
                    TraceState::default(),
                )),
                _ => None,
            },
            None => None,
        };
        if parent.is_none() && !draw(sample) {
            return (None, headers::ensure_unsampled(&mut parts.headers));
        }
        let parent = match parent {
            Some(sc) => Context::new().with_remote_span_context(sc),
            None => Context::new(),
        };
        let method = method_name(&parts.method);
        let builder = tracer
            .span_builder(method)
            .with_kind(SpanKind::Server)
            .with_attributes([
                KeyValue::new("http.request.method", method),
                KeyValue::new("url.path", parts.uri.path().to_owned()),
                KeyValue::new(
                    "url.scheme",
                    if parts.uri.scheme_str() == Some("https") {
                        "https"
                    } else {
                        "http"
                    },
                ),
            ]);
        let span = tracer.build_with_context(builder, &parent);
        let sc = span.span_context();
        let trace_id = if parent.has_active_span() {
            hex_id(sc)
        } else {
            set_traceparent(&mut parts.headers, sc)
        };
        let cx = parent.with_span(span).with_value(Tracing {
            tracer: tracer.clone(),
            facts: Mutex::default(),
        });
        (Some(Traced { cx }), trace_id)
    }
}

/// Whether a new trace is recorded: `sample` of them (a root is decided once, here).
fn draw(sample: f64) -> bool {
    sample >= 1.0 || (sample > 0.0 && rand::random::<f64>() < sample)
}

/// `sc` as the request's `traceparent` (sampled); its trace id.
fn set_traceparent(headers: &mut http::HeaderMap, sc: &SpanContext) -> Arc<str> {
    headers::install_traceparent(
        headers,
        &sc.trace_id().to_bytes(),
        &sc.span_id().to_bytes(),
        sc.is_sampled(),
    )
}

/// `sc`'s trace id as lower-case hex.
fn hex_id(sc: &SpanContext) -> Arc<str> {
    headers::trace_id_hex(&sc.trace_id().to_bytes())
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

impl Traced {
    /// `fut` run in the span's Context.
    pub fn run<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        fut.with_context(self.cx.clone())
    }

    /// The answer's status and the decision, for the span.
    pub fn decided(&self, status: u16, decision: &'static str) {
        self.facts(|f| {
            f.status = status;
            f.decision = decision;
        });
    }

    /// The answer's body has been sent: `bytes` of it.
    pub fn set_bytes(&self, bytes: u64) {
        self.facts(|f| f.bytes = bytes);
    }

    fn facts(&self, f: impl FnOnce(&mut Facts)) {
        if let Some(t) = self.cx.get::<Tracing>() {
            f(&mut t.facts.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }
}

impl Drop for Traced {
    /// The answer has been sent (or the exchange dropped): the answer and what the stages
    /// noted go onto the span in one write, and it ends. Noted facts are read here, not when
    /// the answer's head left: a tool call streamed back commits on its last message.
    fn drop(&mut self) {
        let span = self.cx.span();
        if let Some(t) = self.cx.get::<Tracing>() {
            let f = t.facts.lock().unwrap_or_else(|e| e.into_inner());
            let mut a = Vec::with_capacity(8);
            a.push(KeyValue::new(
                "http.response.status_code",
                i64::from(f.status),
            ));
            a.push(KeyValue::new("palisade.decision", f.decision));
            a.push(KeyValue::new(
                "http.response.body.size",
                i64::try_from(f.bytes).unwrap_or(i64::MAX),
            ));
            if f.status >= 500 {
                span.set_status(Status::error(""));
                a.push(KeyValue::new("error.type", f.status.to_string()));
            }
            if let Some(code) = f.code {
                a.push(KeyValue::new("palisade.code", code.as_str()));
            }
            if let Some(op) = &f.operation {
                // An attribute, not the span's name: an unbound write's operation is its raw
                // path, which a span name must not be (names are low-cardinality).
                a.push(KeyValue::new("palisade.operation", op.clone()));
            }
            if let Some(rule) = &f.rule {
                a.push(KeyValue::new("palisade.rule", rule.clone()));
            }
            if let Some(epoch) = f.fence_epoch {
                a.push(KeyValue::new("palisade.fence_epoch", epoch));
            }
            if let Some(index) = f.receipt_index {
                a.push(KeyValue::new("palisade.receipt_index", index));
            }
            span.set_attributes(a);
        }
        span.end();
    }
}

/// Notes what the request's span should say, when the request is traced (one thread-local
/// read otherwise).
fn note(f: impl FnOnce(&mut Facts)) {
    Context::map_current(|cx| {
        if let Some(t) = cx.get::<Tracing>() {
            f(&mut t.facts.lock().unwrap_or_else(|e| e.into_inner()));
        }
    });
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

/// A child of the request's span, when the request is traced.
pub struct Child {
    cx: Context,
}

impl Child {
    /// Starts `name` under the current span; `None` when the request is not traced
    /// (`attributes` is then never called).
    pub fn start(
        name: &'static str,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Option<Child> {
        Context::map_current(|cx| {
            let tracer = &cx.get::<Tracing>()?.tracer;
            let span = tracer
                .span_builder(name)
                .with_kind(kind)
                .with_attributes(attributes())
                .start_with_context(tracer, cx);
            Some(Child {
                cx: cx.with_span(span),
            })
        })
    }

    /// The upstream is told this span is the parent of its work (as Envoy and linkerd do).
    pub fn propagate(&self, headers: &mut http::HeaderMap) {
        set_traceparent(headers, self.cx.span().span_context());
    }

    pub fn set(&self, attribute: KeyValue) {
        self.cx.span().set_attribute(attribute);
    }

    /// Marks the span failed with `kind` (`error.type`).
    pub fn failed(&self, kind: &'static str) {
        let span = self.cx.span();
        span.set_status(Status::error(""));
        span.set_attribute(KeyValue::new("error.type", kind));
    }

    /// `fut` in this span's Context.
    pub fn run<F: Future>(&self, fut: F) -> impl Future<Output = F::Output> {
        fut.with_context(self.cx.clone())
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.cx.span().end();
    }
}

/// `fut`, to be spawned, carrying the request's Context when the request is traced (a
/// spawned task does not inherit it); as it is otherwise.
pub fn carried<F: Future>(
    fut: F,
) -> futures_util::future::Either<opentelemetry::context::WithContext<F>, F> {
    use futures_util::future::Either;
    let traced = Context::map_current(|cx| cx.get::<Tracing>().is_some());
    if traced {
        Either::Left(fut.with_current_context())
    } else {
        Either::Right(fut)
    }
}

/// `fut` as a child span `name` of the request's span, when it is traced.
pub async fn within<F: Future>(name: &'static str, fut: F) -> F::Output {
    match Child::start(name, SpanKind::Internal, Vec::new) {
        Some(child) => child.run(fut).await,
        None => fut.await,
    }
}
