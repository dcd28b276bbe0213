//! One exchange's bookkeeping: the in-flight gauge, request metrics, and the access-log line
//! written when the response body has been sent.

use std::sync::atomic::{AtomicU64, Ordering};

use http::{Method, Response};
use tokio::time::Instant;

use crate::config::AccessLog;
use crate::context::{Outcome, Plane};
use crate::net::body::{Counted, OnEnd, ProxyBody};
use crate::telemetry;
use crate::telemetry::otlp::span::Traced;

/// Whether a request's body must be buffered before it may be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// Streams both ways.
    Read,
    /// Buffered (≤ `max_body`) for the checks that need the whole body.
    Write,
}

impl Kind {
    /// Index into [`telemetry::KINDS`].
    fn index(self) -> usize {
        match self {
            Kind::Read => 0,
            Kind::Write => 1,
        }
    }
}

/// Keeps `palisade_inflight_requests` right whichever way a request ends.
pub(super) struct InflightGuard(metrics::Gauge);

impl InflightGuard {
    pub(super) fn new(gauge: &metrics::Gauge) -> Self {
        gauge.increment(1.0);
        Self(gauge.clone())
    }
}

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}

/// Per-request facts the access log and metrics need once the response body ends.
pub(super) struct Exchange {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) kind: Kind,
    pub(super) trace_id: std::sync::Arc<str>,
    pub(super) start: Instant,
    /// Who acted ([`crate::net::conn::ConnInfo::caller`]), named by every receipt and drift
    /// event of the request.
    pub(super) caller: Option<String>,
}

impl Exchange {
    /// The context of a write (or any request that may be refused with a receipt): its
    /// method, trace and `METHOD path` as the operation.
    pub(super) fn write_context(&self) -> crate::context::WriteContext {
        // `METHOD path`, without `format!`'s machinery: this runs on every request (issue 19).
        let method = self.method.as_str();
        let mut operation = String::with_capacity(method.len() + 1 + self.path.len());
        operation.push_str(method);
        operation.push(' ');
        operation.push_str(&self.path);
        let mut cx = crate::context::WriteContext::new(
            self.method.clone(),
            self.trace_id.clone(),
            operation,
        );
        cx.caller = self.caller.clone();
        cx
    }
}

/// What the service answers with: the response body counted, the access-log line written
/// when it has been sent. The body is not boxed again (it is a [`ProxyBody`] already: a
/// second box cost a dynamic call and an error mapping per frame); the line is, so the
/// response hyper moves about stays small (issue 19).
pub type ExchangeBody = Counted<ProxyBody, Box<AccessLine>>;

/// Records metrics now and writes the access-log line when the response body has been sent.
pub(super) fn finish(
    plane: &Plane,
    resp: Response<ProxyBody>,
    ex: Exchange,
    outcome: Outcome,
    inflight: InflightGuard,
    traced: Option<Traced>,
) -> Response<ExchangeBody> {
    let status = resp.status().as_u16();
    if let Some(t) = &traced {
        t.decided(status, telemetry::OUTCOMES[outcome.index()]);
    }
    plane
        .metrics
        .request(ex.kind.index(), method_index(&ex.method), outcome.index());
    plane
        .metrics
        .duration(ex.kind.index(), ex.start.elapsed().as_secs_f64());
    let log = should_log(plane.config.access_log, status, outcome);
    let (parts, body) = resp.into_parts();
    let line = Box::new(AccessLine {
        ex,
        status,
        outcome: telemetry::OUTCOMES[outcome.index()],
        log,
        traced,
        _inflight: inflight,
    });
    Response::from_parts(parts, Counted::new(body, line))
}

/// The exchange's access-log line, held until its response body has been sent; the request
/// counts as in flight until then.
pub struct AccessLine {
    ex: Exchange,
    status: u16,
    outcome: &'static str,
    log: bool,
    /// The request's span, ended when the answer has been sent (or dropped with this).
    traced: Option<Traced>,
    _inflight: InflightGuard,
}

impl OnEnd for Box<AccessLine> {
    fn on_end(mut self, bytes: u64) {
        if let Some(t) = self.traced.take() {
            t.set_bytes(bytes);
            // Dropped: the span ends.
        }
        if !self.log {
            return;
        }
        let ex = &self.ex;
        telemetry::access_log::write(&telemetry::access_log::AccessFields {
            method: ex.method.as_str(),
            path: &ex.path,
            status: self.status,
            duration_ms: ex.start.elapsed().as_secs_f64() * 1000.0,
            bytes,
            trace_id: &ex.trace_id,
            outcome: self.outcome,
        });
    }
}

/// Successful requests seen under `log.access = "sampled"`, process-wide: one in `every` is
/// logged. A counter rather than a random draw: cheap, and the logged share is exact.
static SAMPLED: AtomicU64 = AtomicU64::new(0);

/// Whether this exchange gets an access-log line. Sampling never drops a refusal, an error or
/// a 5xx: those are what an operator reads the log for.
fn should_log(mode: AccessLog, status: u16, outcome: Outcome) -> bool {
    match mode {
        AccessLog::Off => false,
        AccessLog::Full => true,
        AccessLog::Sampled { every } => {
            matches!(outcome, Outcome::Refused | Outcome::Error)
                || status >= 500
                || SAMPLED.fetch_add(1, Ordering::Relaxed) % every == 0
        }
    }
}

/// Index into [`telemetry::METHODS`]: a closed label set (clients must not mint label
/// values).
fn method_index(m: &Method) -> usize {
    match *m {
        Method::GET => 0,
        Method::HEAD => 1,
        Method::POST => 2,
        Method::PUT => 3,
        Method::PATCH => 4,
        Method::DELETE => 5,
        Method::OPTIONS => 6,
        _ => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_keeps_every_refusal_and_error_and_one_success_in_n() {
        assert!(!should_log(AccessLog::Off, 500, Outcome::Error));
        assert!(should_log(AccessLog::Full, 200, Outcome::Forwarded));
        let every = 10;
        let sampled = AccessLog::Sampled { every };
        let logged = (0..1000)
            .filter(|_| should_log(sampled, 200, Outcome::Forwarded))
            .count();
        assert_eq!(logged, 100);
        for (status, outcome) in [
            (403, Outcome::Refused),
            (502, Outcome::Error),
            (503, Outcome::Forwarded),
        ] {
            assert!((0..every).all(|_| should_log(sampled, status, outcome)));
        }
    }
}
