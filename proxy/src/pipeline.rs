//! One request, start to end (ARCHITECTURE.md "One request").
//!
//! ```text
//! head → trace context → reserved paths (lease authority, escrow status) → classify
//!   → reads: stream to upstream and back (fence token on fenced resources)
//!   → writes: read body (≤ max_body, else 413) → write::handle (idempotency, checks,
//!     forward | dry-run | escrow, receipt) — or straight to the upstream without enforcement
//!   → response: strip hop-by-hop, count bytes, access log, metrics
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, Version};
use hyper::body::Incoming;
use palisade_policy::ErrorCode;
use tokio::time::Instant;

use crate::body::{self, CollectError, Counted, ProxyBody};
use crate::config::Config;
use crate::problem::Problem;
use crate::telemetry;
use crate::upstream::{Upstream, UpstreamError};
use crate::{authority, enforce, escrow, headers, write};

/// State shared by every request of one server.
pub struct AppState {
    pub config: Config,
    pub metrics: telemetry::Metrics,
    /// Present when `ptcl.writes` is not empty: every write goes through it.
    pub enforcement: Option<Arc<crate::enforce::Enforcement>>,
    /// The RICH bundle in force (SPEC §7): swapped whole on reload; a request loads it once
    /// and is decided wholly by that version.
    pub bundle: arc_swap::ArcSwapOption<palisade_policy::rich::Bundle>,
    /// `upstream.shadow_url`: where DRY_RUN_SHADOW writes go instead of the SoR.
    pub shadow: Option<Upstream>,
    pub upstream: Upstream,
    /// Set on SIGTERM: `/readyz` turns 503 at once.
    pub draining: AtomicBool,
    /// MCP tools last listed with a changed definition (SPEC §7).
    pub mcp_drifted: crate::mcp::pinning::Drifted,
}

impl AppState {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// What the connection knows about the downstream peer.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    pub peer: SocketAddr,
    pub tls: bool,
    /// DER of the client's verified leaf certificate (mTLS only).
    pub client_cert: Option<Vec<u8>>,
}

impl ConnInfo {
    /// The caller's identity (SPEC §5.6, §5.7): the client certificate under mTLS, else a
    /// digest of `Authorization`; `None` for a caller with neither. Digests, so no credential
    /// is ever stored or signed into a lease.
    pub fn caller(&self, headers: &http::HeaderMap) -> Option<String> {
        use palisade_policy::digest::Sha256Digest;
        if let Some(der) = &self.client_cert {
            return Some(format!("x509:{}", Sha256Digest::of(der)));
        }
        headers
            .get(http::header::AUTHORIZATION)
            .map(|v| format!("authz:{}", Sha256Digest::of(v.as_bytes())))
    }
}

/// Whether a request's body must be buffered before it may be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
struct InflightGuard(metrics::Gauge);

impl InflightGuard {
    fn new(gauge: &metrics::Gauge) -> Self {
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
struct Exchange {
    method: Method,
    path: String,
    kind: Kind,
    trace_id: String,
    start: Instant,
}

/// The data-plane service: never fails; every failure becomes a response.
pub async fn handle(
    state: Arc<AppState>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, Infallible> {
    let inflight = InflightGuard::new(&state.metrics.inflight);
    let start = Instant::now();
    let (mut parts, body) = req.into_parts();
    let trace_id = headers::ensure_traceparent(&mut parts.headers);
    let kind = if state.config.writes.contains(&parts.method) {
        Kind::Write
    } else {
        Kind::Read
    };
    let ex = Exchange {
        method: parts.method.clone(),
        // The path only: a query string may carry secrets.
        path: parts.uri.path().to_owned(),
        kind,
        trace_id: trace_id.clone(),
        start,
    };
    // The request id (`instance`) is made only for problem responses: the happy path has no
    // use for it, and randomness costs a syscall.
    let refuse = |code: ErrorCode, detail: &str| {
        let request_id = uuid::Uuid::new_v4().to_string();
        Problem::new(code, detail, &request_id, &trace_id).into_response()
    };

    // The lease authority (SPEC §5.7) lives under the reserved PTCL prefix.
    if let (true, Some(enf)) = (state.config.authority, &state.enforcement) {
        if ex.path.starts_with(authority::PREFIX) {
            let cx = write_context(&ex);
            let resp = authority::handle(&state, enf, parts, body, &conn, &cx).await;
            let outcome = if resp.status().is_success() {
                Outcome::Forwarded
            } else {
                Outcome::Refused
            };
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
    }

    // Escrow status (SPEC §5.4), for the caller that submitted the write.
    if let (Some(enf), true) = (&state.enforcement, ex.path.starts_with(escrow::PREFIX)) {
        if parts.method == Method::GET {
            let resp = escrow::lookup(enf, &ex.path, conn.caller(&parts.headers)).await;
            let outcome = if resp.status().is_success() {
                Outcome::Forwarded
            } else {
                Outcome::Refused
            };
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
    }
    // Reserved prefixes (SPEC §3) are the sidecar's own and never reach the upstream.
    if ex.path.starts_with("/.well-known/ptcl/") || ex.path.starts_with("/.well-known/agtp/") {
        let resp = refuse(ErrorCode::NotFound, "no sidecar endpoint at this path");
        return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
    }

    // MCP (SPEC §11): classified by JSON-RPC method, not HTTP method.
    if state.config.mcp_path.as_deref() == Some(ex.path.as_str()) {
        let cx = write_context(&ex);
        let (resp, outcome) = crate::mcp::handle(&state, &conn, parts, body, cx).await;
        return Ok(finish(&state, resp, ex, outcome, inflight));
    }

    // A read is decided by the bundle in force: its binding names the upstream identity, and
    // a contract with an output schema has its answer buffered and checked (SPEC §7), its
    // request kept so a qualified fallback can send it again.
    let mut read_cx = None;
    if kind == Kind::Read {
        let bundle = state.bundle.load_full();
        let binding = enforce::Binding::of(bundle.as_deref(), &parts.method, parts.uri.path());
        let mut cx = write_context(&ex);
        cx.bind(bundle.as_deref(), &binding);
        let checked = binding.capability().filter(|c| c.contract.output.is_some());
        if let Some(cap) = checked {
            let bytes = match body::read_request_body(body, state.config.max_body).await {
                Ok(b) => b,
                Err(_) => {
                    let resp = refuse(
                        ErrorCode::BodyTooLarge,
                        "request body exceeds limits.max_body",
                    );
                    return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
                }
            };
            let kept = crate::output::copy_head(&parts);
            let (resp, outcome) =
                forward_plain(&state, parts, body::full(bytes.clone()), &conn, &cx, None).await;
            let resp = crate::output::check(
                &state,
                cap,
                &cx,
                resp,
                kept.map(|parts| crate::output::Retry {
                    parts,
                    body: bytes,
                    conn: &conn,
                }),
            )
            .await;
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
        read_cx = Some(cx);
    }

    let body = match kind {
        Kind::Read => body::boxed(body),
        Kind::Write => {
            let bytes = match body::read_request_body(body, state.config.max_body).await {
                Ok(bytes) => bytes,
                Err(CollectError::TooLarge(limit)) => {
                    state.metrics.refusal(ErrorCode::BodyTooLarge);
                    let resp = refuse(
                        ErrorCode::BodyTooLarge,
                        &format!("request body exceeds limits.max_body ({limit} bytes)"),
                    );
                    return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
                }
                Err(CollectError::Read(e)) => {
                    tracing::debug!(error = %e, "request body read failed");
                    let resp = refuse(ErrorCode::BadRequest, "request body could not be read");
                    return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
                }
            };
            if let Some(enf) = &state.enforcement {
                let cx = write_context(&ex);
                let (resp, outcome) = write::handle(&state, enf, &conn, parts, bytes, cx).await;
                return Ok(finish(&state, resp, ex, outcome, inflight));
            }
            body::full(bytes)
        }
    };

    // Reads of a fenced resource carry its epoch too (SPEC §5.3), so an agent can lease the
    // next write from what it read.
    let fenced_read = match (&state.enforcement, kind) {
        (Some(_), Kind::Read) => enforce::origin(&state.config, &parts, &conn).and_then(|o| {
            let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            palisade_policy::target::request_target(&o, pq)
                .ok()
                .map(|t| palisade_policy::target::resource_key(&t).to_owned())
        }),
        _ => None,
    };
    let cx = read_cx.unwrap_or_else(|| write_context(&ex));
    let (resp, outcome) = forward_plain(&state, parts, body, &conn, &cx, fenced_read).await;
    Ok(finish(&state, resp, ex, outcome, inflight))
}

/// Sends a request upstream as it is (no enforcement) and streams the answer back. A read of
/// a fenced resource (`fenced_read`: its resource key) gets `Agent-Fence-Token`.
pub(crate) async fn forward_plain(
    state: &AppState,
    parts: http::request::Parts,
    body: ProxyBody,
    conn: &ConnInfo,
    cx: &enforce::WriteContext,
    fenced_read: Option<String>,
) -> (Response<ProxyBody>, Outcome) {
    let trace_id = cx.trace_id.as_str();
    let problem = |code: ErrorCode, detail: &str| {
        let request_id = uuid::Uuid::new_v4().to_string();
        Problem::new(code, detail, &request_id, trace_id).into_response()
    };
    let upstream_req = match build_upstream_request(&state.upstream, parts, body, conn) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "request target not forwardable");
            let resp = problem(ErrorCode::BadRequest, "request target cannot be forwarded");
            return (resp, Outcome::Refused);
        }
    };
    let sent_at = Instant::now();
    let result = state
        .upstream
        .send_as(upstream_req, cx.identity.as_deref())
        .await;
    state
        .metrics
        .upstream_duration
        .record(sent_at.elapsed().as_secs_f64());
    match result {
        Ok(resp) => {
            let mut resp = crate::upstream::downstream(resp);
            if let (Some(resource), Some(enf)) = (fenced_read, &state.enforcement) {
                // A store that cannot answer costs the read nothing but this header.
                if let Ok(epoch @ 1..) = enf.store.epoch(&resource).await {
                    resp.headers_mut()
                        .insert(enforce::FENCE_HEADER, HeaderValue::from(epoch));
                }
            }
            (resp, Outcome::Forwarded)
        }
        Err(UpstreamError::Identity(m)) => {
            tracing::warn!(error = %m, trace_id = %trace_id, "upstream identity refused");
            (
                crate::peer_identity::refused(state, cx, &m).await,
                Outcome::Refused,
            )
        }
        Err(e) => {
            // The full error goes to the log; the client learns only the code (STYLE §2).
            tracing::warn!(error = %e, trace_id = %trace_id, "upstream failure");
            let (code, detail) = e.problem();
            (problem(code, detail), Outcome::Error)
        }
    }
}

fn write_context(ex: &Exchange) -> enforce::WriteContext {
    enforce::WriteContext::new(
        ex.method.clone(),
        ex.trace_id.clone(),
        format!("{} {}", ex.method, ex.path),
    )
}

/// Rewrites a downstream request for the upstream: its URI, hop-by-hop and PTCL headers,
/// `Host` (kept as the client sent it, as Envoy does), forwarding headers, HTTP/1.1.
pub(crate) fn build_upstream_request(
    upstream: &Upstream,
    mut parts: http::request::Parts,
    body: ProxyBody,
    conn: &ConnInfo,
) -> Result<Request<ProxyBody>, http::Error> {
    let pq = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let uri = upstream.uri_for(pq)?;
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()));
    headers::strip_hop_by_hop(&mut parts.headers);
    for name in headers::PTCL_REQUEST_HEADERS {
        parts.headers.remove(name);
    }
    headers::append_forwarded(
        &mut parts.headers,
        conn.peer,
        if conn.tls { "https" } else { "http" },
        host.as_deref(),
    );
    if let Some(h) = host.as_deref().and_then(|h| HeaderValue::from_str(h).ok()) {
        parts.headers.insert(header::HOST, h);
    }
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}

/// How a request ended, for metrics and the access log.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outcome {
    Forwarded,
    Refused,
    Error,
    /// An idempotency key's stored outcome, sent again (SPEC §5.6).
    Replayed,
}

impl Outcome {
    /// Index into [`telemetry::OUTCOMES`].
    fn index(self) -> usize {
        self as usize
    }
}

/// Records metrics now and writes the access-log line when the response body has been sent.
fn finish(
    state: &AppState,
    resp: Response<ProxyBody>,
    ex: Exchange,
    outcome: Outcome,
    inflight: InflightGuard,
) -> Response<ProxyBody> {
    let status = resp.status().as_u16();
    state
        .metrics
        .request(ex.kind.index(), method_index(&ex.method), outcome.index());
    state
        .metrics
        .request_duration
        .record(ex.start.elapsed().as_secs_f64());
    let outcome = telemetry::OUTCOMES[outcome.index()];
    let (parts, body) = resp.into_parts();
    let counted = Counted::new(body, move |bytes| {
        let _inflight = inflight;
        tracing::info!(
            target: "palisade::access",
            method = %ex.method,
            path = %ex.path,
            status,
            duration_ms = ex.start.elapsed().as_secs_f64() * 1000.0,
            bytes,
            trace_id = %ex.trace_id,
            outcome,
        );
    });
    Response::from_parts(parts, body::boxed(counted))
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
