//! One request, start to end (docs/architecture.md, "One request"). The order of the
//! stages is this one function, [`handle`], read top to bottom.
//!
//! ```text
//! head → trace context → reserved paths (lease authority, escrow status) → classify
//!   → reads: stream to upstream and back (fence token on fenced resources)
//!   → writes: read body (≤ max_body, else 413) → write::handle (idempotency, checks,
//!     forward | dry-run | escrow, receipt) — or straight to the upstream without enforcement
//!   → response: strip hop-by-hop, count bytes, access log, metrics
//! ```

mod admit;
mod connect;
mod exchange;
mod request_form;

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use palisade_policy::method::MethodClass;
use palisade_policy::ErrorCode;
use tokio::time::Instant;

use crate::aip::{quote_channel, relay};
use crate::authority;
use crate::context::{AppState, Binding, Outcome, WriteContext};
use crate::enforce::forward::forward_plain;
use crate::enforce::receipts::{self, Evidence};
use crate::enforce::{escrow, facts, output, write};
use crate::mcp;
use crate::net::body::{self, CollectError};
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::problem::Problem;
pub use exchange::ExchangeBody;
use exchange::{finish, Exchange, InflightGuard, Kind};

/// The data-plane service: never fails; every failure becomes a response.
///
/// Every branch but plain forwarding awaits its stage boxed (`Box::pin`): the future of this
/// function is moved into hyper's per-request slot (HTTP/1) or a spawned task (HTTP/2) on every
/// request, and unboxed it was as large as its largest branch (14 KB, the MCP relay); boxed, it
/// is the size of the forwarding path, and a branch pays one allocation when it runs (issue 19).
pub async fn handle(
    state: Arc<AppState>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ExchangeBody>, Infallible> {
    let inflight = InflightGuard::new(&state.metrics.inflight);
    let start = Instant::now();
    let (mut parts, body) = req.into_parts();
    let trace_id = headers::ensure_traceparent(&mut parts.headers);
    // The request as every later stage decides on it and the upstream receives it: method
    // classified fail-closed, path canonical, overrides and forged PTCL headers gone.
    let prepared = request_form::prepare(&state.config, &mut parts, state.enforcement.is_some());
    let kind = match prepared {
        // `ptcl.writes = []` turns enforcement off: a plain proxy, every method streams.
        _ if state.enforcement.is_none() => Kind::Read,
        Ok(MethodClass::Read) => Kind::Read,
        Ok(MethodClass::Write) | Err(_) => Kind::Write,
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
    if let Err(refusal) = prepared {
        // Nothing of it has reached anyone: refused with a receipt and a drift event, as any
        // other refusal, when enforcement keeps receipts.
        // The spelling refused is the client's, not an operation: events and receipts name
        // the method only, so no client-chosen text reaches an operator's tools.
        let cx = WriteContext::new(
            ex.method.clone(),
            ex.trace_id.clone(),
            format!("{} <refused request form>", ex.method),
        );
        let refused = receipts::record(&state, refusal, &cx, Evidence::default());
        let resp = Box::pin(refused).await.into_response();
        return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
    }

    // RICH admission (SPEC §13): the bearer token is taken off the request here, whatever
    // the request; its subject becomes the caller every later stage binds to; each surface
    // below decides with what was presented.
    let presented = crate::admission::take(&state, &mut parts);

    // The lease authority (SPEC §5.7) lives under the reserved PTCL prefix.
    if let (true, Some(enf)) = (state.config.authority, &state.enforcement) {
        if ex.path.starts_with(authority::PREFIX) {
            let cx = write_context(&ex);
            let resp = Box::pin(authority::handle(&state, enf, parts, body, &conn, &cx)).await;
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
            let resp = Box::pin(escrow::lookup(enf, &ex.path, conn.caller(&parts))).await;
            let outcome = if resp.status().is_success() {
                Outcome::Forwarded
            } else {
                Outcome::Refused
            };
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
    }
    // The AIP-2.1 quote channel (SPEC §13): guarded by its own rules instead of PTCL; and
    // the negotiation relay, which the sidecar serves itself.
    if let (Some(qc), Some(enf)) = (&state.quote_channel, &state.enforcement) {
        if relay::is_relay(&state, &ex.path) {
            let cx = write_context(&ex);
            let (resp, outcome) =
                Box::pin(relay::handle(&state, enf, parts, body, &conn, cx)).await;
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
        if quote_channel::is_channel(&state, &ex.path) {
            let cx = write_context(&ex);
            let (resp, outcome) = Box::pin(quote_channel::handle(
                &state, enf, qc, parts, body, &conn, cx,
            ))
            .await;
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
    }

    // AGTP-RCNS (seed 000): PROPOSE, the inventory, unregistered pairs sent with Allow-RCNS.
    if let Some(enf) = &state.enforcement {
        if let Some(route) = crate::rcns::route(&state, &parts, &ex.path) {
            let cx = write_context(&ex);
            let req = Request::from_parts(parts, body);
            let presented = presented.as_ref();
            let answered = crate::rcns::handle(&state, enf, route, req, &conn, presented, cx);
            let (resp, outcome) = Box::pin(answered).await;
            return Ok(finish(&state, resp, ex, outcome, inflight));
        }
    }

    // Reserved prefixes (SPEC §3) are the sidecar's own and never reach the upstream.
    if ex.path.starts_with("/.well-known/ptcl/") || ex.path.starts_with("/.well-known/agtp/") {
        let resp = refuse(ErrorCode::NotFound, "no sidecar endpoint at this path");
        return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
    }

    // RICH admission's protected-resource metadata (RFC 9728): the sidecar's own.
    if let Some(adm) = &state.admission {
        if crate::admission::metadata::is_metadata(&ex.path) && parts.method == Method::GET {
            let bundle = state.bundle.load_full();
            let resp = crate::admission::metadata::response(adm, bundle.as_deref());
            return Ok(finish(&state, resp, ex, Outcome::Forwarded, inflight));
        }
    }

    // MCP (SPEC §11): classified by JSON-RPC method, not HTTP method.
    if state.config.mcp_path.as_deref() == Some(ex.path.as_str()) {
        let cx = write_context(&ex);
        let handled = mcp::handle(&state, &conn, parts, body, cx, presented.as_ref());
        let (resp, outcome) = Box::pin(handled).await;
        return Ok(finish(&state, resp, ex, outcome, inflight));
    }

    // One bundle version decides this request from here to its end.
    let bundle = state.bundle.load_full();

    // RICH admission (SPEC §13): a bound operation needs a token that admits it, before its
    // body is read or any lease is looked at.
    let cx = write_context(&ex);
    let staged = admit::stage(&state, presented.as_ref(), &parts, bundle.as_deref(), &cx);
    let admitted = match staged.await {
        Ok(a) => a,
        Err(resp) => return Ok(finish(&state, resp, ex, Outcome::Refused, inflight)),
    };
    // From here every receipt and drift event names who acted, when a verified token says
    // (admitted here, or only presented where admission is not required).
    let caller = parts
        .extensions
        .get::<crate::net::conn::TokenCaller>()
        .map(|c| c.0.clone())
        .or_else(|| admitted.as_ref().map(crate::admission::Admission::caller));
    let write_context = |ex: &Exchange| {
        let mut cx = write_context(ex);
        cx.caller = caller.clone();
        cx
    };

    // A read is decided by the bundle in force: its binding names the upstream identity, and
    // a contract with an output schema has its answer buffered and checked (SPEC §7), its
    // request kept so a qualified fallback can send it again.
    let mut read_cx = None;
    if kind == Kind::Read {
        let binding = Binding::of(bundle.as_deref(), &parts.method, parts.uri.path());
        // The admission stage's context, now naming the caller (one fewer made per read).
        let mut cx = cx;
        cx.caller = caller.clone();
        cx.bind(bundle.as_deref(), &binding);
        // A bound read's path and query parameters (`structural.parameters`).
        if let Some(cap) = binding.capability() {
            let (path, query) = (parts.uri.path(), parts.uri.query());
            if let Err(refusal) = palisade_policy::rich::check_parameters(cap, path, query) {
                let pq = parts.uri.path_and_query().map_or("", |p| p.as_str());
                let evidence = Evidence {
                    body: Some(pq.as_bytes()),
                    ..Evidence::default()
                };
                let refused = receipts::record(&state, refusal, &cx, evidence);
                let resp = Box::pin(refused).await.into_response();
                return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
            }
        }
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
            let kept = output::copy_head(&parts);
            let (resp, outcome) =
                forward_plain(&state, parts, body::full(bytes.clone()), &conn, &cx, None).await;
            let resp = Box::pin(output::check(
                &state,
                cap,
                &cx,
                resp,
                kept.map(|parts| output::Retry {
                    parts,
                    body: bytes,
                    conn: &conn,
                }),
            ))
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
                if let Some(a) = &admitted {
                    let held = admit::input(&state, a, bundle.as_ref(), &parts, &bytes, &cx);
                    if let Err(resp) = Box::pin(held).await {
                        return Ok(finish(&state, resp, ex, Outcome::Refused, inflight));
                    }
                }
                // A connection (RICH §9) maps the request onto the operation the SoR serves;
                // everything after it decides on the request the SoR will receive.
                let mut cx = cx;
                let mut parts = parts;
                let mapped = connect::request(&state, bundle.as_ref(), &mut parts, &bytes, &mut cx);
                let (bytes, back) = match Box::pin(mapped).await {
                    Ok(Some((mapped, back))) => (mapped, Some(back)),
                    Ok(None) => (bytes, None),
                    Err(resp) => return Ok(finish(&state, resp, ex, Outcome::Refused, inflight)),
                };
                let kept = back.as_ref().map(|_| cx.clone());
                let req = write::WriteRequest {
                    parts,
                    body: bytes,
                    cx,
                    bundle,
                    grant: None,
                };
                let written = Box::pin(write::run(&state, enf, &conn, req)).await;
                let outcome = written.outcome;
                let resp = match (back, kept) {
                    (Some(back), Some(cx)) => {
                        let mapped = connect::response(&state, back, &cx, written);
                        Box::pin(mapped).await
                    }
                    _ => written.resp,
                };
                return Ok(finish(&state, resp, ex, outcome, inflight));
            }
            body::full(bytes)
        }
    };

    // Reads of a fenced resource carry its epoch too (SPEC §5.3), so an agent can lease the
    // next write from what it read.
    let fenced_read = match (&state.enforcement, kind) {
        (Some(_), Kind::Read) => facts::read_resource_key(&state.config, &parts, &conn),
        _ => None,
    };
    let cx = read_cx.unwrap_or_else(|| write_context(&ex));
    let (resp, outcome) = forward_plain(&state, parts, body, &conn, &cx, fenced_read).await;
    Ok(finish(&state, resp, ex, outcome, inflight))
}

fn write_context(ex: &Exchange) -> WriteContext {
    // `METHOD path`, without `format!`'s machinery: this runs on every request (issue 19).
    let method = ex.method.as_str();
    let mut operation = String::with_capacity(method.len() + 1 + ex.path.len());
    operation.push_str(method);
    operation.push(' ');
    operation.push_str(&ex.path);
    WriteContext::new(ex.method.clone(), ex.trace_id.clone(), operation)
}
