//! HUMAN_ESCROW (SPEC §5.4): a write held durably until an operator releases or drops it.
//!
//! ```text
//! write (checks 1–12 pass, no epoch moves) → held: request stored with an escrow receipt
//!   → 202 + Location /.well-known/ptcl/v1/escrow/{id}
//! POST /admin/v1/escrow/{id}/approve → releasing → every check again (releasing = true)
//!   → forwarded: released (upstream status, body, commit receipt)  | refused: refused (code)
//! POST /admin/v1/escrow/{id}/reject  → rejected (escrow receipt), never forwarded
//! ```
//! Each transition is a compare-and-set on the escrow's state in the store, so approve and
//! reject race safely and a write is released at most once. The held record keeps the request
//! as it came (headers and body; the SoR needs its credentials); the request leaves the record
//! when the escrow is decided.
//!
//! A crash while an escrow is `releasing` leaves it so: the write may or may not have been
//! forwarded, and its lease's fence epoch keeps it from being forwarded twice. Such an escrow
//! shows in `GET /admin/v1/escrow` for an operator to look at.

use std::net::SocketAddr;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Method, Response, StatusCode};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::{ErrorCode, Refusal};
use serde_json::{json, Value};

use crate::context::Enforcement;
use crate::context::Outcome;
use crate::context::Plane;
use crate::enforce::delivery::{Delivery, Keep};
use crate::enforce::facts::Requester;
use crate::enforce::receipts;
use crate::enforce::written::Written;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::jsonrpc;
use crate::net::problem::Problem;
use crate::store::{
    Attachments, EscrowRecord, EscrowState, EscrowUpdate, HeldProtocol, HeldRequest,
};

pub const PREFIX: &str = "/.well-known/ptcl/v1/escrow";

/// Most escrow records `GET /admin/v1/escrow` looks through.
pub(crate) const LIST_SCAN: usize = 10_000;

pub(crate) fn problem(code: ErrorCode, detail: &str) -> Response<ProxyBody> {
    Problem::untraced(code, detail).into_response()
}

/// What an escrow looks like from outside: no request, no caller.
pub(crate) fn status_doc(record: &EscrowRecord) -> Value {
    let outside = EscrowRecord {
        request: None,
        caller: None,
        pre_image: None,
        ..record.clone()
    };
    serde_json::to_value(outside).unwrap_or(Value::Null)
}

/// How a held write is answered.
pub(crate) enum Answer {
    /// 202 with the escrow document.
    Http,
    /// An MCP tool call: a JSON-RPC result answering `id` that says the call is held, with
    /// the escrow in `_meta.escrow` (`typed`: the revision knows `resultType`); `lease` is
    /// the call's, for a refusal's receipt.
    Mcp {
        id: Value,
        typed: bool,
        lease: Option<Vec<u8>>,
    },
}

/// The `escrow_held` announcement of a hold (`escrow.webhook`): who, what, until when, and
/// where in the console; never the request. A Slack message with `escrow.webhook_format =
/// "slack"`.
fn announce(plane: &Plane, record: &EscrowRecord) -> Value {
    let link = plane.config.escrow.console_url.as_deref().map(|base| {
        let base = base.split('#').next().unwrap_or(base);
        format!("{base}#/escrow/{}", record.escrow_id)
    });
    if plane.config.escrow.webhook_slack {
        return crate::enforce::slack::held(plane, record, link.as_deref());
    }
    json!({
        "event": "escrow_held",
        "escrow_id": record.escrow_id,
        "operation": record.operation,
        "caller": record.caller,
        "contract_digest": record.contract_digest,
        "held_at": record.held_at,
        "lease_expires_at": record
            .lease_expires_at_ms
            .map(palisade_policy::lease::format_rfc3339_ms),
        "approvals_required": record
            .approvals_required
            .map_or(plane.config.escrow.approvals, |n| n as usize),
        "rule": record.rule,
        "link": link,
    })
}

/// Holds a permitted HUMAN_ESCROW write: 202 (or a tool result) with its Location and an
/// escrow receipt.
pub(crate) async fn hold(
    plane: &Plane,
    enf: &Enforcement,
    d: Delivery,
    who: &Requester,
    answer: Answer,
) -> Written {
    let Delivery {
        permit,
        parts,
        body: bytes,
        conn,
        cx,
        keep,
        ..
    } = d;
    let (conn, cx) = (&*conn, &cx);
    // The key's outcome (if the write has one) is stored with the hold's receipt.
    let pending = match keep {
        Keep::Key(p) => Some(p),
        _ => None,
    };
    let id = uuid::Uuid::now_v7().to_string();
    let location = format!("{PREFIX}/{id}");
    let mut headers = parts.headers.clone();
    crate::net::headers::strip_hop_by_hop(&mut headers);
    let headers = headers
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), STANDARD.encode(v.as_bytes())))
        .collect();
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // Held by an operator's rule (SPEC §15): its approvals and its expiry.
    let by_rule = permit.ruled().hold.clone();
    let record = EscrowRecord {
        escrow_id: id.clone(),
        state: EscrowState::Held,
        lease_id: permit.lease().lease_id.clone(),
        operation: cx.operation.clone(),
        trace_id: cx.trace_id.to_string(),
        held_at: enf.now_rfc3339(),
        caller: who.caller.clone(),
        request: Some(HeldRequest {
            method: parts.method.as_str().to_owned(),
            target: target.to_owned(),
            headers,
            body_b64: STANDARD.encode(&bytes),
            origin: who.origin.clone(),
            peer: conn.peer.to_string(),
            tls: conn.tls,
            protocol: match answer {
                Answer::Mcp { .. } => HeldProtocol::Mcp,
                Answer::Http => HeldProtocol::Http,
            },
        }),
        released_at: None,
        rejected_at: None,
        upstream_status: None,
        content_type: None,
        body_b64: None,
        code: None,
        receipt: None,
        approvals: Vec::new(),
        contract_digest: cx.contract_digest.clone(),
        request_digest: Some(permit.request_digest().to_string()),
        lease_expires_at_ms: Some(permit.expires_at_ms()),
        pre_image: permit
            .held_snapshot()
            .and_then(|s| serde_json::from_slice(s).ok()),
        facing: cx.facing.clone(),
        operation_key: cx.operation_key.clone(),
        resource: cx.resource_key.clone(),
        rule: by_rule.as_ref().map(|h| h.rule.to_string()),
        rule_reason: by_rule.as_ref().and_then(|h| h.reason.clone()),
        approvals_required: by_rule.as_ref().and_then(|h| h.approvals),
        hold_expires_at_ms: by_rule.as_ref().and_then(|h| h.expires_ms).map(|ms| {
            enf.clock
                .now_ms()
                .saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
        }),
    };
    let mut doc = json!({"escrow_id": id, "state": "held", "location": location});
    if let Some(h) = &by_rule {
        doc["rule"] = json!(h.rule.to_string());
    }
    let (status, doc) = match &answer {
        Answer::Http => (StatusCode::ACCEPTED, doc),
        Answer::Mcp {
            id: rpc_id, typed, ..
        } => {
            let mut result = json!({
                "content": [{"type": "text", "text": format!(
                    "held for human approval, not executed yet; its state is at {location}"
                )}],
                "isError": false,
                "_meta": {"escrow": doc},
            });
            if *typed {
                result["resultType"] = json!("complete");
            }
            let msg = json!({"jsonrpc": "2.0", "id": rpc_id, "result": result});
            (StatusCode::OK, msg)
        }
    };
    let mut resp = body::json_response(status, &doc);
    if let Ok(v) = HeaderValue::from_str(&location) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    let body = ReceiptBody {
        outcome: Some("held".into()),
        rule: by_rule.as_ref().map(|h| h.rule.to_string()),
        ..receipts::permit_receipt(enf, &permit, cx, ReceiptKind::Escrow)
    };
    let resp_body = Bytes::from(serde_json::to_vec(&doc).unwrap_or_default());
    // Announced once the hold is durable: a link to the write in the console, no payload.
    let announcement = enf.escrow_hook.as_ref().map(|_| announce(plane, &record));
    let attach = Attachments {
        idempotency: pending.as_ref().map(|p| p.record(&resp, &resp_body)),
        freeze: None,
        escrow: Some(EscrowUpdate {
            id,
            expect: None,
            record,
            expires_at_ms: Some(permit.expires_at_ms()),
        }),
    };
    match enf.seal(body, attach).await {
        Ok(Some(sealed)) => {
            if let (Some(hook), Some(a)) = (&enf.escrow_hook, announcement) {
                hook.offer(a);
            }
            if let Some(v) = receipts::receipt_header_value(&sealed.value) {
                resp.headers_mut().insert(headers::RECEIPT_HEADER, v);
            }
            if let Answer::Mcp { .. } = answer {
                // The tool result carries its receipt, as a committed call's does.
                let msg = jsonrpc::with_receipt(doc, Some(sealed.value.clone()));
                let mut with = body::json_response(status, &msg);
                for name in [header::LOCATION.as_str(), headers::RECEIPT_HEADER] {
                    if let Some(v) = resp.headers().get(name) {
                        with.headers_mut().insert(name, v.clone());
                    }
                }
                resp = with;
            }
            Written::with_receipt(resp, Outcome::Forwarded, Some(sealed.value))
        }
        Ok(None) | Err(_) => {
            let refusal = Refusal::new(
                ErrorCode::StoreUnavailable,
                "the state store cannot hold this write",
            );
            let lease = match &answer {
                Answer::Http => receipts::carried_lease(&parts.headers),
                Answer::Mcp { lease, .. } => lease.clone(),
            };
            let evidence = receipts::Evidence {
                lease: lease.as_deref(),
                ..receipts::Evidence::default()
            };
            let refused = receipts::record(plane.recorder(), refusal, cx, evidence).await;
            match answer {
                Answer::Http => Written::refused(refused),
                Answer::Mcp { id, .. } => Written::refused_rpc(refused, id),
            }
        }
    }
}

/// The held request, rebuilt as it came: its parts, body, connection facts and sender.
pub(crate) fn rebuild(
    request: &HeldRequest,
) -> Option<(http::request::Parts, Bytes, ConnInfo, Requester)> {
    let method = Method::from_bytes(request.method.as_bytes()).ok()?;
    let mut b = http::Request::builder()
        .method(method)
        .uri(request.target.as_str());
    for (name, value) in &request.headers {
        let name = HeaderName::from_bytes(name.as_bytes()).ok()?;
        let value = STANDARD.decode(value).ok()?;
        b = b.header(name, HeaderValue::from_bytes(&value).ok()?);
    }
    let (parts, ()) = b.body(()).ok()?.into_parts();
    let bytes = Bytes::from(STANDARD.decode(&request.body_b64).ok()?);
    // A released escrow is sent on no downstream connection: through the pool.
    let conn = ConnInfo::new(
        request.peer.parse::<SocketAddr>().ok()?,
        request.tls,
        None,
        None,
    );
    Some((parts, bytes, conn, Requester::default()))
}

pub(crate) async fn load(enf: &Enforcement, id: &str) -> Result<EscrowRecord, Response<ProxyBody>> {
    match enf.store.escrow(id).await {
        Ok(Some(rec)) => Ok(rec),
        Ok(None) => Err(problem(ErrorCode::NotFound, "no escrow with this id")),
        Err(e) => {
            tracing::warn!(error = %e, "escrow lookup failed");
            Err(problem(
                ErrorCode::StoreUnavailable,
                "the state store cannot be read",
            ))
        }
    }
}

pub(crate) fn not_held() -> Response<ProxyBody> {
    problem(
        ErrorCode::EscrowNotHeld,
        "the escrow has already been decided",
    )
}

/// `GET /.well-known/ptcl/v1/escrow/{id}` on the data plane: the escrow's state for the
/// caller that submitted it (anyone else gets 404, as for an unknown id).
pub(crate) async fn lookup(
    enf: &Enforcement,
    path: &str,
    caller: Option<String>,
) -> Response<ProxyBody> {
    let id = path
        .strip_prefix(PREFIX)
        .and_then(|r| r.strip_prefix('/'))
        .filter(|id| !id.is_empty() && !id.contains('/'));
    let Some(id) = id else {
        return problem(ErrorCode::NotFound, "no escrow endpoint at this path");
    };
    match load(enf, id).await {
        Ok(rec) if rec.caller == caller => body::json_response(StatusCode::OK, &status_doc(&rec)),
        Ok(_) => problem(ErrorCode::NotFound, "no escrow with this id"),
        Err(resp) => resp,
    }
}
