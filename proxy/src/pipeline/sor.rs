//! The SoR stage: a request that is none of the sidecar's own surfaces goes to the System of
//! Record, decided by one bundle version from its admission to its end.
//!
//! ```text
//! admission (a bound operation needs a token that admits it, before its body is read)
//!   → read:  bound parameters; a read connection maps the query and the answer (RICH §9);
//!            an output contract buffers and checks the answer
//!            (SPEC §7, a qualified fallback may send it again); else streamed, fenced
//!            resources answered with their epoch
//!   → write: body read (≤ max_body); the admitted bound; a connection maps it (RICH §9);
//!            the write engine (enforce::write::run); the answer mapped back
//!   → with enforcement off: every method streams
//! ```
//! Plain forwarding is awaited in place (it is the common path, and the future hyper keeps
//! per request is its size); every other branch is boxed (issue 19).

use std::sync::Arc;

use hyper::body::Incoming;
use palisade_policy::{ErrorCode, Refusal};

use super::admit;
use super::connect;
use super::connect_read;
use super::exchange::{Exchange, Kind};
use crate::admission::{Gate, Presented};
use crate::context::{AppState, Plane, Routed, WriteContext};
use crate::enforce::forward::forward_plain;
use crate::enforce::own::{forwarded, Own, Staged};
use crate::enforce::receipts::{self, Evidence};
use crate::enforce::{facts, output, write};
use crate::net::body::{self, CollectError};
use crate::net::conn::ConnInfo;
use crate::net::problem::Failure;

/// A read or write for the SoR.
pub(super) async fn answer(
    state: &Arc<AppState>,
    conn: &Arc<ConnInfo>,
    req: http::Request<Incoming>,
    ex: &Exchange,
    presented: Option<&Presented>,
) -> Staged {
    let (parts, body) = req.into_parts();
    // One bundle version decides this request from here to its end.
    let bundle = state.bundle.load_full();
    // Routed once: every stage after this reads the binding from it (a connection that maps
    // the write onto another operation routes it anew, to that operation).
    let routed = Routed::of(bundle.as_deref(), &parts.method, parts.uri.path());
    let binding = routed.binding(bundle.as_deref());

    // RICH admission (SPEC §13): a bound operation needs a token that admits it, before its
    // body is read or any lease is looked at.
    let mut cx = ex.write_context();
    cx.rules_digest = state.rules.load_full().map(|r| r.digest_text().to_owned());
    let staged = admit::stage(state.gate(), presented, binding, bundle.as_deref(), &cx);
    let admitted = staged.await?;

    if ex.kind == Kind::Read {
        cx.bind(bundle.as_deref(), &binding);
        if let Some(cap) = binding.capability() {
            // A bound read's path and query parameters (`structural.parameters`).
            let (path, query) = (parts.uri.path(), parts.uri.query());
            if let Err(refusal) = palisade_rich::check_parameters(
                cap,
                path,
                query,
                &crate::net::headers::values(&parts.headers),
            ) {
                let pq = parts.uri.path_and_query().map_or("", |p| p.as_str());
                let evidence = Evidence {
                    body: Some(pq.as_bytes()),
                    ..Evidence::default()
                };
                let refused = receipts::record(state.recorder(), refusal, &cx, evidence);
                return Err(Box::pin(refused).await.into());
            }
            // A read connection (RICH §9, issue 37) maps the query and the answer.
            if let (Some(b), Routed::Bound(i)) = (&bundle, routed) {
                if b.connection_of(i).is_some_and(|c| c.read) {
                    let read = connect_read::read(&state.plane, conn, parts, b, i, &mut cx);
                    return Box::pin(read).await;
                }
            }
            if cap.contract.output.is_some() {
                let req = http::Request::from_parts(parts, body);
                return Box::pin(checked_read(state, conn, req, cap, &cx)).await;
            }
        }
        // Reads of a fenced resource carry its epoch too (SPEC §5.3), so an agent can lease
        // the next write from what it read.
        let fenced_read = match &state.enforcement {
            Some(_) if state.config.enforcing() => {
                facts::read_resource_key(&state.config, &parts, conn)
            }
            _ => None,
        };
        let sent = forward_plain(state, parts, body::boxed(body), conn, &cx, fenced_read);
        return sent.await.map(forwarded);
    }

    let bytes = match body::read_request_body(body, state.config.limits.max_body).await {
        Ok(bytes) => bytes,
        Err(CollectError::TooLarge(limit)) => {
            // A refused write like any other (SPEC §5.5): counted, and receipted when
            // enforcement is on, through the one refusal path. No drift event: the code has
            // no drift category (a size limit is not a contract violation).
            let detail = format!("request body exceeds limits.max_body ({limit} bytes)");
            cx.bind(bundle.as_deref(), &binding);
            let refusal = Refusal::new(ErrorCode::BodyTooLarge, detail);
            let refused = receipts::record(state.recorder(), refusal, &cx, Evidence::default());
            return Err(Box::pin(refused).await.into());
        }
        Err(CollectError::Read(e)) => {
            tracing::debug!(error = %e, "request body read failed");
            return Err(Own::failed(Failure::BodyUnreadable, &ex.trace_id));
        }
    };
    if !state.config.enforcing() {
        // `ptcl.writes = []`: a plain proxy.
        let sent = forward_plain(state, parts, body::full(bytes), conn, &cx, None);
        return sent.await.map(forwarded);
    }
    let w = Enforced {
        parts,
        bytes,
        cx,
        bundle,
        routed,
        admitted,
    };
    Box::pin(enforced_write(&state.plane, state.gate(), conn, w)).await
}

/// A read whose contract has an output schema: its answer buffered and checked (SPEC §7),
/// its request kept so a qualified fallback can send it again.
async fn checked_read(
    plane: &Plane,
    conn: &Arc<ConnInfo>,
    req: http::Request<Incoming>,
    cap: &palisade_rich::Capability,
    cx: &WriteContext,
) -> Staged {
    let (parts, body) = req.into_parts();
    let bytes = body::read_request_body(body, plane.config.limits.max_body)
        .await
        .map_err(|_| Own::failed(Failure::BodyTooLarge, &cx.trace_id))?;
    let kept = output::copy_head(&parts);
    let resp = forward_plain(plane, parts, body::full(bytes.clone()), conn, cx, None).await?;
    let retry = kept.map(|parts| output::Retry {
        parts,
        body: bytes,
        conn,
    });
    let checked = output::check(plane, cap, cx, resp, retry).await;
    checked.map(forwarded).map_err(Own::replacing)
}

/// A write with enforcement on, its body read.
struct Enforced {
    parts: http::request::Parts,
    bytes: bytes::Bytes,
    cx: WriteContext,
    bundle: Option<Arc<palisade_rich::Bundle>>,
    routed: Routed,
    admitted: Option<crate::admission::Admission>,
}

/// The admitted bound, the connection's mapping, the write engine, the answer mapped back.
async fn enforced_write(
    plane: &Arc<Plane>,
    gate: Option<Gate<'_>>,
    conn: &Arc<ConnInfo>,
    w: Enforced,
) -> Staged {
    let Enforced {
        mut parts,
        bytes,
        mut cx,
        bundle,
        routed,
        admitted,
    } = w;
    let Some(enf) = &plane.enforcement else {
        let sent = forward_plain(plane, parts, body::full(bytes), conn, &cx, None);
        return sent.await.map(forwarded);
    };
    // The body parsed once, and only if something reads it as JSON: admission's granted
    // bound, a connection's mapping, the contract's input schema (check 9).
    let binding = routed.binding(bundle.as_deref());
    let connected = match (&bundle, routed) {
        (Some(b), Routed::Bound(i)) => b.connection_of(i).is_some(),
        _ => false,
    };
    let schema = binding
        .capability()
        .is_some_and(|c| c.contract.input.is_some());
    let mut input = (admitted.is_some() || connected || schema)
        .then(|| palisade_policy::json::parse(&bytes, plane.config.limits.max_json_depth).ok())
        .flatten();
    if let Some(a) = &admitted {
        admit::input(gate, a, bundle.as_ref(), binding, input.as_ref(), &cx).await?;
    }
    // A connection (RICH §9) maps the request onto the operation the SoR serves; everything
    // after it decides on the request the SoR will receive.
    let source = connect::Source {
        bundle: bundle.as_ref(),
        routed,
    };
    let mapped = connect::request(plane, source, &mut parts, &bytes, input.as_ref(), &mut cx);
    let (bytes, back, routed) = match mapped.await? {
        Some(m) => {
            // The target's input is the connector's output, as a value already.
            input = Some(m.input);
            (m.bytes, Some(m.back), m.target)
        }
        None => (bytes, None, routed),
    };
    let kept = back.as_ref().map(|_| cx.clone());
    let req = write::WriteRequest {
        parts,
        body: bytes,
        cx,
        bundle,
        routed,
        grant: None,
        input,
    };
    let written = write::run(plane, enf, conn, req).await;
    let outcome = written.outcome;
    let resp = match (back, kept) {
        (Some(back), Some(cx)) => {
            let mapped = connect::response(plane, back, &cx, written).await;
            mapped.map_err(Own::replacing)?
        }
        _ => written.resp,
    };
    Ok((resp, outcome))
}
