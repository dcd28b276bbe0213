//! MCP over Streamable HTTP at `mcp.path` (SPEC §11), both protocol generations.
//!
//! Requests are classified by their JSON-RPC method, not their HTTP method:
//!
//! ```text
//! GET (SSE stream), DELETE (end of session)        → passed through, streamed
//! POST: parse (strict I-JSON) → Mcp-Method / Mcp-Name agree with the message?
//!   a batch holding a tools/call                   → refused: a tool call is enforced alone
//!   tools/call of a write (or unbound) tool        → the write pipeline (checks 1–11,
//!                                                    durable fence, receipt), then forwarded
//!                                                    without the PTCL members of `_meta`
//!   tools/call of a read tool                      → its input contract, then forwarded
//!   anything else (initialize, server/discover,
//!   tools/list, notifications, responses)          → passed through
//! ```
//! Replies, JSON or SSE, stream back event by event. A refusal is a JSON-RPC error with the
//! request's id and the problem object as `data` (SPEC §6), so an MCP client can read it.

use bytes::Bytes;
use http::{header, Method, Response, StatusCode};
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::SideEffect;
use serde_json::Value;

use crate::admission::Presented;
use crate::context::Binding;
use crate::context::Call;
use crate::context::Outcome;
use crate::context::Routed;
use crate::enforce::engine;
use crate::enforce::forward::forward_plain;
use crate::enforce::permit::Denied;
use crate::enforce::send;
use crate::net::body::{self, CollectError, ProxyBody};

mod admit;
pub(crate) mod call;
pub mod checked;
pub mod client;
mod connect;
pub mod inverse;
pub(crate) mod leg;
pub mod pinning;
pub mod refusal;
pub mod relay;
pub mod results;
pub mod sse;
pub mod wire;

use crate::enforce::own::Own;
use crate::net::problem::{Failure, Purpose};
use refusal::{passed, refuse, Carried, Reply, Staged, Stop};
use wire::{header_mismatch, method_of};
pub use wire::{METHOD_HEADER, NAME_HEADER, PROTOCOL_HEADER};

/// A request to `mcp.path`.
pub(crate) async fn handle(
    call: Call<'_>,
    parts: http::request::Parts,
    body: hyper::body::Incoming,
    presented: Option<&Presented>,
) -> (Response<ProxyBody>, Outcome) {
    serve(call, parts, body, presented)
        .await
        .unwrap_or_else(Stop::render)
}

async fn serve(
    call: Call<'_>,
    parts: http::request::Parts,
    body: hyper::body::Incoming,
    presented: Option<&Presented>,
) -> Staged {
    let (state, conn, cx) = (call.state, call.conn, &call.cx);
    let rec = state.recorder();
    if let Some(refusal) = origin_refused(&state.config, &parts.headers) {
        // The transport's DNS-rebinding rule (SPEC §11): 403, the body a JSON-RPC error
        // with no id, as the MCP transport says.
        let reply = Reply::transport(StatusCode::FORBIDDEN);
        return refuse(rec, cx, refusal.into(), Carried::default(), reply).await;
    }
    if parts.method != Method::POST {
        // GET streams and the session DELETE carry no JSON-RPC request to check.
        return passed(forward_plain(state, parts, body::boxed(body), conn, cx, None).await);
    }
    // A body that is too large or cannot be read is refused through the one refusal path,
    // counted and receipted like its HTTP twin (SPEC §5.5; issue 55's first defect).
    let bytes = match body::read_request_body(body, state.config.limits.max_body).await {
        Ok(b) => b,
        Err(e) => {
            let (refusal, status) = match e {
                CollectError::TooLarge(_) => (
                    Refusal::new(
                        ErrorCode::BodyTooLarge,
                        "request body exceeds limits.max_body",
                    ),
                    StatusCode::PAYLOAD_TOO_LARGE,
                ),
                CollectError::Read(_) => (
                    Refusal::new(ErrorCode::BadRequest, "request body could not be read"),
                    StatusCode::BAD_REQUEST,
                ),
            };
            let (carried, reply) = (Carried::default(), Reply::transport(status));
            return refuse(rec, cx, refusal.into(), carried, reply).await;
        }
    };
    // What we check must be what the server reads: a body our strict parser refuses
    // (duplicate members, lone surrogates) could read differently there, so it goes nowhere.
    let msg = match palisade_policy::json::parse(&bytes, state.config.limits.max_json_depth) {
        Ok(v) => v,
        Err(_) => {
            let refusal = Refusal::new(
                ErrorCode::BadRequest,
                "the body is not a single well-formed I-JSON document",
            );
            let reply = Reply::transport(StatusCode::BAD_REQUEST);
            return refuse(rec, cx, refusal.into(), Carried::body(&bytes), reply).await;
        }
    };
    if let Value::Array(batch) = &msg {
        // 2025-03-26 batches: checked as a whole, so a tool call cannot hide in one.
        if batch.iter().any(|m| method_of(m) == Some("tools/call")) {
            let refusal = Refusal::new(
                ErrorCode::BadRequest,
                "a tools/call must be sent alone, not in a JSON-RPC batch",
            );
            let reply = Reply::transport(StatusCode::BAD_REQUEST);
            return refuse(rec, cx, refusal.into(), Carried::body(&bytes), reply).await;
        }
        return passed(forward_plain(state, parts, body::full(bytes), conn, cx, None).await);
    }
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    if let Some(refusal) = header_mismatch(&parts.headers, &msg) {
        let reply = Reply {
            id,
            status: StatusCode::BAD_REQUEST,
        };
        return refuse(rec, cx, refusal.into(), Carried::body(&bytes), reply).await;
    }
    let rpc = Rpc { bytes, msg, id };
    match method_of(&rpc.msg) {
        Some("tools/call") => tool_call(call, parts, rpc, presented).await,
        Some("tools/list") => list(call, parts, rpc, presented).await,
        Some("initialize") => {
            checked::forget(&state.mcp_checked);
            passed(forward_plain(state, parts, body::full(rpc.bytes), conn, cx, None).await)
        }
        _ => passed(forward_plain(state, parts, body::full(rpc.bytes), conn, cx, None).await),
    }
}

/// A JSON-RPC request as read once: its bytes (what the server receives unless a stage
/// re-encodes it), the parsed message every check reads, and its `id`.
struct Rpc {
    bytes: Bytes,
    msg: Value,
    id: Value,
}

/// A request to `mcp.path` whose `Origin` is not in `mcp.allowed_origins` (SPEC §11): a page
/// on another origin (or a rebound name) driving the user's MCP server. Compared normalised
/// (scheme and host case, default port); `null`, several values, or one that is no origin
/// are refused too. A request with no `Origin` is not from a browser page and passes.
fn origin_refused(config: &crate::config::Config, headers: &http::HeaderMap) -> Option<Refusal> {
    let mut all = headers.get_all(header::ORIGIN).iter();
    let first = all.next()?;
    let allowed = all.next().is_none()
        && first
            .to_str()
            .ok()
            .and_then(|o| palisade_policy::target::normalize_origin(o.trim()).ok())
            .is_some_and(|o| config.mcp_allowed_origins.contains(&o));
    (!allowed).then(|| {
        Refusal::new(
            ErrorCode::OriginNotAllowed,
            "the request's Origin is not listed in mcp.allowed_origins",
        )
    })
}

/// A `tools/call`: bound by tool name, enforced like an HTTP write when it writes.
async fn tool_call(
    rq: Call<'_>,
    mut parts: http::request::Parts,
    rpc: Rpc,
    presented: Option<&Presented>,
) -> Staged {
    let Call {
        state,
        conn,
        mut cx,
    } = rq;
    let rec = state.recorder();
    cx.rules_digest = state.rules.load_full().map(|r| r.digest_text().to_owned());
    let Rpc { bytes, msg, id } = rpc;
    let Some(call) = call::ToolCall::of(&msg) else {
        let refusal = Refusal::new(ErrorCode::BadRequest, "tools/call needs params.name");
        let carried = Carried::body(&bytes);
        return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
    };
    cx.operation = format!("tools/call {}", call.name);
    let bundle = state.bundle.load_full();
    let routed = Routed::tool(bundle.as_deref(), &call.name);
    let binding = routed.binding(bundle.as_deref());
    cx.bind(bundle.as_deref(), &binding);
    if let Err(refusal) = checked::ensure(
        &state.plane,
        (&state.mcp_checked, &state.mcp_drifted),
        bundle.as_ref(),
        &parts.headers,
        &cx,
    )
    .await
    {
        let carried = Carried::body(&bytes);
        return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
    }
    if let Some(refusal) = pin_drifted(&state.mcp_drifted, bundle.as_deref(), &binding, &call.name)
    {
        let carried = Carried::body(&bytes);
        return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
    }
    // RICH admission (SPEC §13): the tool, its contract digest and the granted bound over
    // its arguments, before anything else is looked at.
    match admit::tool_call(
        state.gate(),
        presented,
        bundle.as_deref(),
        &binding,
        &call,
        &cx,
    )
    .await
    {
        // Admitted: the token's subject is the request's caller already (admission::take).
        Ok(()) => {}
        Err(refused) => return Err(Stop::admission(refused, id)),
    }
    // A connection (RICH §9, issue 37) maps the call onto the legacy tool the server has;
    // everything after this decides on the call the server will receive.
    let (mut msg, mut bytes, mut call, mut routed, mut back) = (msg, bytes, call, routed, None);
    if let (Some(b), Routed::Bound(index)) = (bundle.as_deref(), routed) {
        match connect::map_call(b, index, &msg, &mut parts.headers, &mut cx) {
            Ok(None) => {}
            Ok(Some(m)) => {
                let Some(mapped_call) = call::ToolCall::of(&m.msg) else {
                    let refusal =
                        Refusal::new(ErrorCode::Internal, "the mapped call names no tool");
                    let carried = Carried::body(&bytes);
                    return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
                };
                (msg, bytes, call, routed, back) =
                    (m.msg, m.bytes, mapped_call, Routed::Bound(m.target), m.back);
                cx.operation = format!("tools/call {}", call.name);
                cx.bind(Some(b), &routed.binding(Some(b)));
                let binding = routed.binding(Some(b));
                if let Some(refusal) =
                    pin_drifted(&state.mcp_drifted, Some(b), &binding, &call.name)
                {
                    let carried = Carried::body(&bytes);
                    return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
                }
            }
            Err(refusal) => {
                let carried = Carried {
                    lease: call.lease.as_deref(),
                    body: &call.args,
                };
                return refuse(rec, &cx, refusal.into(), carried, Reply::to(id)).await;
            }
        }
    }
    let binding = routed.binding(bundle.as_deref());
    // Every refusal from here names the call's lease (if any) and has its arguments as
    // evidence.
    let refused = |denied: Denied| {
        let carried = Carried {
            lease: call.lease.as_deref(),
            body: &call.args,
        };
        let (cx, reply) = (&cx, Reply::to(id.clone()));
        async move { refuse(rec, cx, denied, carried, reply).await }
    };

    let Some(enf) = state
        .enforcement
        .clone()
        .filter(|_| state.config.enforcing())
    else {
        return passed(forward_plain(state, parts, body::full(bytes), conn, &cx, None).await);
    };
    let rule = results::OutputRule::of_call(binding.capability(), back.clone());
    // A tool that only reads needs no lease; its input contract still holds.
    if let Some(cap) = binding.capability() {
        if cap.contract.side_effect == SideEffect::Read {
            if let Err(refusal) = palisade_rich::check_input(
                &cap.contract,
                &call.args,
                state.config.limits.max_json_depth,
            ) {
                return refused(refusal.into()).await;
            }
            let rule = rule.map(|r| r.with_fallback(cap, &parts, &bytes, conn));
            // A read needs no lease: its PTCL members go no further than PTCL headers do on
            // an HTTP read (SPEC §11), so no signed lease reaches the server.
            let bytes = if call.lease.is_some() || call.inverse.is_some() {
                parts.headers.remove(header::CONTENT_LENGTH);
                call::without_ptcl(msg)
            } else {
                bytes
            };
            let answer = forward_plain(state, parts, body::full(bytes), conn, &cx, None).await;
            let sent = send::Sent::passed(answer);
            let outcome = sent.outcome;
            return Ok((
                relay::relay(&state.plane, &cx, rule, id, sent, None).await,
                outcome,
            ));
        }
    }

    if call.inverse_carried_twice(&parts.headers) {
        let refusal = Refusal::new(
            ErrorCode::BadRequest,
            "the inverse payload is carried both in params._meta.compensationInverse and in Agent-Compensation-Inverse; send one",
        );
        return refused(refusal.into()).await;
    }
    // The call as read above: parsed once.
    let mut leg = leg::McpLeg::new(call, msg, &parts.headers, routed);
    leg.back = back;
    let w = engine::Write {
        parts,
        body: bytes,
        cx,
        bundle,
        grant: None,
        leg,
    };
    Ok(Box::pin(engine::run(&state.plane, &enf, conn, w))
        .await
        .into_pair())
}

/// A pinned tool last listed with another definition is not called (SPEC §7): the refusal.
fn pin_drifted(
    pins: &crate::context::Drifted,
    bundle: Option<&palisade_rich::Bundle>,
    binding: &Binding<'_>,
    name: &str,
) -> Option<Refusal> {
    let (b, cap) = (bundle?, binding.capability()?);
    (cap.tool_digest.is_some()
        && pinning::refuses_calls(cap.runtime.on_drift)
        && pins.is_drifted(&b.digest, name))
    .then(|| {
        Refusal::new(
            ErrorCode::ToolDrifted,
            "the tool's listed definition no longer matches its pin",
        )
    })
}

/// A `tools/list`: forwarded, and its result filtered against the pins on the way back,
/// whether it comes as JSON or as an SSE event.
async fn list(
    rq: Call<'_>,
    parts: http::request::Parts,
    rpc: Rpc,
    presented: Option<&Presented>,
) -> Staged {
    let Call {
        state,
        conn,
        mut cx,
    } = rq;
    let Rpc { bytes, id, .. } = rpc;
    let bundle = state.bundle.load_full();
    cx.operation = "tools/list".to_owned();
    cx.bind(bundle.as_deref(), &Binding::Unbound);
    // With a token, the listing shows only the bound tools it grants (SPEC §13).
    let granted = match admit::listing(state.gate(), presented, &cx).await {
        Ok(g) => g,
        Err(refused) => return Err(Stop::admission(refused, id)),
    };
    let (resp, outcome) =
        passed(forward_plain(state, parts, body::full(bytes), conn, &cx, None).await)?;
    let Some(bundle) = bundle else {
        return Ok((resp, outcome));
    };
    if !resp.status().is_success() {
        return Ok((resp, outcome));
    }
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let (mut rparts, rbody) = resp.into_parts();
    let limit = state.config.limits.max_response;
    if content_type.starts_with("text/event-stream") {
        let (state, cx) = (state.clone(), cx.clone());
        let body = sse::map_json(rbody, limit as usize, move |v| {
            let pinned = pinning::filter(&state.plane, &state.mcp_drifted, &cx, &bundle, v);
            match admit::only_granted(pinned.as_ref().unwrap_or(v), &bundle, granted.as_ref())
                .or(pinned)
            {
                Some(new) => sse::Verdict::Replace(new),
                None => sse::Verdict::Keep,
            }
        });
        return Ok((Response::from_parts(rparts, body), outcome));
    }
    // A JSON reply: bounded, filtered, re-encoded.
    let b = match body::collect_proxy(rbody, limit).await {
        Ok(b) => b,
        Err(_) => {
            let failure = Failure::ResponseTooLarge(Purpose::Listing);
            let own = Own::failed(failure, &cx.trace_id);
            return Err(Stop::rpc(own, Reply::transport(StatusCode::BAD_GATEWAY)));
        }
    };
    let filtered = serde_json::from_slice::<Value>(&b).ok().and_then(|v| {
        let pinned = pinning::filter(&state.plane, &state.mcp_drifted, &cx, &bundle, &v);
        admit::only_granted(pinned.as_ref().unwrap_or(&v), &bundle, granted.as_ref()).or(pinned)
    });
    let out = match filtered {
        Some(v) => Bytes::from(serde_json::to_vec(&v).unwrap_or_default()),
        None => b,
    };
    rparts.headers.remove(header::CONTENT_LENGTH);
    Ok((Response::from_parts(rparts, body::full(out)), outcome))
}
