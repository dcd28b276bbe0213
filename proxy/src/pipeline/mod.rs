//! One request, start to end (docs/architecture.md, "One request"): a route, then one stage,
//! then one place that finishes the exchange, as pingora's ordered phases.
//!
//! ```text
//! head → trace context → request form (request_form: canonical, or refused)
//!   → admission takes the bearer token off → route_of: the sidecar's own surfaces in order
//!     (lease authority, escrow status, AIP-2.1 relay and quote channel, RCNS, reserved
//!     prefixes, admission metadata, MCP), else the SoR
//!   → own(...) | sor::answer(...): reads stream (fence token on fenced resources, output
//!     contracts buffered); writes read their body (≤ max_body) and go to the write engine
//!   → exchange::finish: strip hop-by-hop, count bytes, access log, metrics
//! ```

mod admit;
mod connect;
mod connect_read;
mod exchange;
mod request_form;
mod sor;

use std::convert::Infallible;
use std::sync::Arc;

use http::{Method, Request, Response};
use hyper::body::Incoming;
use palisade_policy::method::MethodClass;
use tokio::time::Instant;

use crate::aip::{quote_channel, relay};
use crate::authority;
use crate::context::{AdmissionState, AppState, Call, Outcome, Plane, Recorder, WriteContext};
use crate::enforce::escrow;
use crate::enforce::own::{Own, Staged};
use crate::enforce::receipts::{self, Evidence};
use crate::mcp;
use crate::net::body::ProxyBody;
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::problem::Failure;
pub use exchange::ExchangeBody;
use exchange::{finish, Exchange, InflightGuard, Kind};

/// Where a request goes, decided once from its head: the sidecar's own surfaces first (in
/// this order), then the SoR. The idea of pingora's phases: route, then one stage.
enum Route {
    /// Its form was refused (`request_form::prepare`).
    Refused(palisade_policy::Refusal),
    /// The lease authority (SPEC §5.7), under the reserved PTCL prefix.
    Authority,
    /// `GET` of an escrow's status (SPEC §5.4), for the caller that submitted the write.
    EscrowStatus,
    /// The AIP-2.1 negotiation relay, which the sidecar serves itself.
    Relay,
    /// The AIP-2.1 quote channel (SPEC §13): guarded by its own rules instead of PTCL.
    QuoteChannel,
    /// AGTP-RCNS (seed 000): PROPOSE, the inventory, unregistered pairs with Allow-RCNS.
    Rcns(crate::rcns::Route),
    /// Another reserved prefix (SPEC §3): the sidecar's own, never the upstream's.
    Reserved,
    /// RICH admission's protected-resource metadata (RFC 9728).
    Metadata,
    /// MCP (SPEC §11): classified by JSON-RPC method, not HTTP method.
    Mcp,
    /// Everything else: a read or a write for the SoR.
    Sor,
}

/// The data-plane service: never fails; every failure becomes a response.
///
/// Every route but the SoR's awaits its stage boxed (`Box::pin`), and so do the SoR stage's
/// own branches but plain forwarding: the future of this function is moved into hyper's
/// per-request slot (HTTP/1) or a spawned task (HTTP/2) on every request, and unboxed it was
/// as large as its largest branch (14 KB, the MCP relay); boxed, it is the size of the
/// forwarding path, and a branch pays one allocation when it runs (issue 19).
pub async fn handle(
    state: Arc<AppState>,
    conn: Arc<ConnInfo>,
    req: Request<Incoming>,
) -> Result<Response<ExchangeBody>, Infallible> {
    let inflight = InflightGuard::new(&state.metrics.inflight);
    let start = Instant::now();
    let (mut parts, body) = req.into_parts();
    // With OTLP on, the server span starts here and names the trace (SPEC §16).
    let (traced, trace_id) = match &state.otlp {
        Some(otlp) => otlp.server_span(&mut parts),
        None => (None, headers::ensure_traceparent(&mut parts.headers)),
    };
    // The request as every later stage decides on it and the upstream receives it: method
    // classified fail-closed, path canonical, overrides and forged PTCL headers gone.
    let prepared = request_form::prepare(&state.config, &mut parts, state.config.enforcing());
    let kind = match prepared {
        // `ptcl.writes = []` turns enforcement off: a plain proxy, every method streams.
        _ if !state.config.enforcing() => Kind::Read,
        Ok(MethodClass::Read) => Kind::Read,
        Ok(MethodClass::Write) | Err(_) => Kind::Write,
    };
    // RICH admission (SPEC §13): the bearer token is taken off the request here, whatever
    // the request; its subject becomes the caller every later stage binds to; each surface
    // decides with what was presented.
    let presented = match &prepared {
        Err(_) => None,
        Ok(_) => crate::admission::take(
            state.admission.as_ref(),
            state.enforcement.as_deref(),
            &mut parts,
        ),
    };
    // One caller for the request (conn::ConnInfo::caller). A write's is kept on the request
    // for the stages that read it again (the lease's agent_id, the idempotency scope); a
    // read's is worked out here only, since a read makes no lease or key.
    let caller = match kind {
        Kind::Write => conn.resolve_caller(&mut parts),
        Kind::Read => conn.caller(&parts),
    };
    let ex = Exchange {
        method: parts.method.clone(),
        // The path only: a query string may carry secrets.
        path: parts.uri.path().to_owned(),
        kind,
        trace_id,
        start,
        caller,
    };
    let route = match prepared {
        Err(refusal) => Route::Refused(refusal),
        Ok(_) => route_of(&state, &parts, &ex),
    };
    let presented = presented.as_ref();
    let req = Request::from_parts(parts, body);
    let staged = match (&traced, route) {
        (None, Route::Sor) => sor::answer(&state, &conn, req, &ex, presented).await,
        (None, route) => Box::pin(own(&state, &conn, route, req, &ex, presented)).await,
        // A traced request runs with its record as a task-local, where its children find it.
        // Not boxed: boxing moved the stage's future on every traced request; in place it
        // shares the slot of the untraced branches (pass-through's instructions unchanged).
        (Some(t), route) => {
            t.run(stage(&state, &conn, route, req, &ex, presented))
                .await
        }
    };
    // The one place an HTTP surface's own answer is rendered (problem+json).
    let (resp, outcome) = match &traced {
        Some(t) => t.run(async { staged.unwrap_or_else(Own::answer) }).await,
        None => staged.unwrap_or_else(Own::answer),
    };
    Ok(finish(&state, resp, ex, outcome, inflight, traced))
}

/// The stage of `route`, as `handle` awaits it.
async fn stage(
    state: &Arc<AppState>,
    conn: &Arc<ConnInfo>,
    route: Route,
    req: Request<Incoming>,
    ex: &Exchange,
    presented: Option<&crate::admission::Presented>,
) -> Staged {
    match route {
        Route::Sor => sor::answer(state, conn, req, ex, presented).await,
        // Boxed, as in `handle`: unboxed, this future would be as large as the MCP relay's
        // (14 KB), moved on every traced request.
        route => Box::pin(own(state, conn, route, req, ex, presented)).await,
    }
}

/// The route of a request whose form was accepted.
fn route_of(state: &AppState, parts: &http::request::Parts, ex: &Exchange) -> Route {
    let path = ex.path.as_str();
    if state.enforcement.is_none() || !state.config.enforcing() {
        // A plain proxy, or one whose only guard is AIP-2.1's (`[aip2]` without PTCL).
        if state.enforcement.is_some() {
            if let Some(r) = aip_route(state, path) {
                return r;
            }
        }
        return match &state.admission {
            _ if is_reserved(path) => Route::Reserved,
            Some(_) if is_metadata(parts, path) => Route::Metadata,
            _ if state.config.mcp_path.as_deref() == Some(path) => Route::Mcp,
            _ => Route::Sor,
        };
    }
    if state.config.authority && path.starts_with(authority::PREFIX) {
        return Route::Authority;
    }
    if path.starts_with(escrow::PREFIX) && parts.method == Method::GET {
        return Route::EscrowStatus;
    }
    if let Some(r) = aip_route(state, path) {
        return r;
    }
    if let Some(r) = crate::rcns::route(state, parts, path) {
        return Route::Rcns(r);
    }
    if is_reserved(path) {
        return Route::Reserved;
    }
    if state.admission.is_some() && is_metadata(parts, path) {
        return Route::Metadata;
    }
    if state.config.mcp_path.as_deref() == Some(path) {
        return Route::Mcp;
    }
    Route::Sor
}

/// The AIP-2.1 surfaces the sidecar serves itself, when `[aip2]` is configured.
fn aip_route(state: &AppState, path: &str) -> Option<Route> {
    state.quote_channel.as_ref()?;
    if relay::is_relay(&state.config, path) {
        return Some(Route::Relay);
    }
    quote_channel::is_channel(&state.config, path).then_some(Route::QuoteChannel)
}

fn is_reserved(path: &str) -> bool {
    path.starts_with("/.well-known/ptcl/") || path.starts_with("/.well-known/agtp/")
}

fn is_metadata(parts: &http::request::Parts, path: &str) -> bool {
    crate::admission::metadata::is_metadata(path) && parts.method == Method::GET
}

/// One of the sidecar's own surfaces.
async fn own(
    state: &Arc<AppState>,
    conn: &Arc<ConnInfo>,
    route: Route,
    req: Request<Incoming>,
    ex: &Exchange,
    presented: Option<&crate::admission::Presented>,
) -> Staged {
    let by_status = |resp: Response<ProxyBody>| {
        let outcome = if resp.status().is_success() {
            Outcome::Forwarded
        } else {
            Outcome::Refused
        };
        (resp, outcome)
    };
    let (parts, body) = req.into_parts();
    let call = Call::new(state, conn, ex.write_context());
    let Some(enf) = &state.enforcement else {
        return match route {
            Route::Mcp => Ok(mcp::handle(call, parts, body, presented).await),
            Route::Metadata => metadata(state.admission.as_ref(), state, ex),
            Route::Refused(refusal) => refused_form(state.recorder(), ex, refusal).await,
            _ => reserved(ex),
        };
    };
    match route {
        Route::Refused(refusal) => refused_form(state.recorder(), ex, refusal).await,
        Route::Authority => authority::handle(&call, enf, parts, body)
            .await
            .map(by_status),
        Route::EscrowStatus => Ok(by_status(
            escrow::lookup(enf, &ex.path, ex.caller.clone()).await,
        )),
        Route::Relay => relay::handle(&call, enf, parts, body).await,
        Route::QuoteChannel => match &state.quote_channel {
            Some(qc) => quote_channel::handle(&call, enf, qc, parts, body).await,
            None => reserved(ex),
        },
        Route::Rcns(r) => {
            let req = Request::from_parts(parts, body);
            crate::rcns::handle(call, enf, r, req, presented).await
        }
        Route::Reserved => reserved(ex),
        Route::Metadata => metadata(state.admission.as_ref(), state, ex),
        Route::Mcp => Ok(mcp::handle(call, parts, body, presented).await),
        Route::Sor => {
            sor::answer(state, conn, Request::from_parts(parts, body), ex, presented).await
        }
    }
}

/// A request whose form was refused: nothing of it has reached anyone. Refused with a receipt
/// and a drift event, as any other refusal, when enforcement keeps receipts; they name the
/// method only (the spelling refused is the client's, not an operation), so no client-chosen
/// text reaches an operator's tools.
async fn refused_form(
    rec: Recorder<'_>,
    ex: &Exchange,
    refusal: palisade_policy::Refusal,
) -> Staged {
    let cx = WriteContext::new(
        ex.method.clone(),
        ex.trace_id.clone(),
        format!("{} <refused request form>", ex.method),
    );
    Err(receipts::record(rec, refusal, &cx, Evidence::default())
        .await
        .into())
}

/// A reserved prefix that names no endpoint of the sidecar's.
fn reserved(ex: &Exchange) -> Staged {
    let failure = Failure::NoEndpoint("no sidecar endpoint at this path");
    Err(Own::failed(failure, &ex.trace_id))
}

/// RICH admission's protected-resource metadata (RFC 9728): the sidecar's own.
fn metadata(adm: Option<&AdmissionState>, plane: &Plane, ex: &Exchange) -> Staged {
    let Some(adm) = adm else {
        return reserved(ex);
    };
    let bundle = plane.bundle.load_full();
    let resp = crate::admission::metadata::response(adm, bundle.as_deref());
    Ok((resp, Outcome::Forwarded))
}
