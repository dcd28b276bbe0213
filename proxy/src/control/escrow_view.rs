//! `GET /admin/v1/escrow/{id}` (SPEC §9): one held write as the operator decides on it — who
//! asked, under which contract, how long its lease has left, the request body beside the
//! resource as check 12 fetched it, and the contract's input check run again now. The list
//! (`GET /admin/v1/escrow`) stays the agent-safe status document; this view is for operators
//! only (it is under `/admin/`, so it needs the admin credential).
//!
//! Headers of the held request (its credentials, its lease) are never shown: the body is the
//! write, and the lease's id and window are shown on their own.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{Response, StatusCode};
use palisade_policy::ErrorCode;
use serde_json::{json, Value};

use crate::context::Plane;
use crate::enforce::escrow::{load, problem, status_doc};
use crate::net::body::{self, ProxyBody};
use crate::store::{EscrowRecord, EscrowState, HeldProtocol};

/// Bodies longer than this are shown cut (the console is for reading, not for copying out).
const SHOWN_BODY: usize = 64 * 1024;

/// `GET /admin/v1/escrow/{id}`.
pub async fn detail(plane: &Plane, id: &str) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return problem(ErrorCode::NotFound, "write enforcement is off");
    };
    let rec = match load(enf, id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    let now = enf.clock.now_ms();
    let mut doc = status_doc(&rec);
    doc["caller"] = json!(rec.caller);
    // A rule's own number of approvers, else `escrow.approvals_required` (SPEC §15).
    doc["approvals_required"] = json!(rec
        .approvals_required
        .map_or(plane.config.escrow.approvals, |n| n as usize));
    if let Some(ms) = rec.hold_expires_at_ms {
        doc["hold_expires_at"] = json!(palisade_policy::lease::format_rfc3339_ms(ms));
    }
    doc["expired"] = json!(expired(&rec, now));
    if let Some(ms) = rec.lease_expires_at_ms {
        doc["lease_expires_at"] = json!(palisade_policy::lease::format_rfc3339_ms(ms));
        doc["lease_left_ms"] = json!((ms - now).max(0));
    }
    if let Some(req) = &rec.request {
        let bytes = STANDARD.decode(&req.body_b64).unwrap_or_default();
        let depth = plane.config.limits.max_json_depth;
        let content_type = req
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("content-type"))
            .and_then(|(_, v)| STANDARD.decode(v).ok())
            .and_then(|v| String::from_utf8(v).ok());
        // Parsed once, for the view and for the contract check (an MCP call's tool and
        // arguments); an HTTP body too long to show is checked from its bytes alone.
        let parsed = read_json(&bytes, depth, req.protocol == HeldProtocol::Mcp);
        doc["input_check"] = input_check(plane, &rec, &bytes, parsed.as_ref(), depth);
        doc["request"] = json!({
            "method": req.method,
            "target": req.target,
            "protocol": match req.protocol {
                HeldProtocol::Http => "http",
                HeldProtocol::Mcp => "mcp",
            },
            "content_type": content_type,
            "body": shown(&bytes, parsed),
        });
    }
    if let Some(pre) = &rec.pre_image {
        doc["pre_image"] = if pre["absent"] == json!(true) {
            json!({"absent": true})
        } else {
            let bytes = pre["body_b64"]
                .as_str()
                .and_then(|b| URL_SAFE_NO_PAD.decode(b).ok())
                .unwrap_or_default();
            json!({
                "content_type": pre["content_type"],
                "body": shown(&bytes, read_json(&bytes, plane.config.limits.max_json_depth, false)),
            })
        };
    }
    body::json_response(StatusCode::OK, &doc)
}

/// Whether a held write's lease has run out (it can then no longer be approved).
pub fn expired(rec: &EscrowRecord, now_ms: i64) -> bool {
    // The lease's window, or an operator rule's `expires` (SPEC §15), whichever ends first.
    rec.state == EscrowState::Held
        && [rec.lease_expires_at_ms, rec.hold_expires_at_ms]
            .into_iter()
            .flatten()
            .any(|e| e <= now_ms)
}

/// A body as the console shows it: `{"json": …}` when it is I-JSON, else `{"text": …}` when it
/// is UTF-8, else `{"bytes": n}`; cut past [`SHOWN_BODY`]. `parsed`: the body read as I-JSON,
/// when it is.
fn shown(bytes: &[u8], parsed: Option<Value>) -> Value {
    if bytes.len() > SHOWN_BODY {
        let cut = String::from_utf8_lossy(&bytes[..SHOWN_BODY]);
        return json!({"text": cut, "truncated": bytes.len()});
    }
    if let Some(v) = parsed {
        return json!({ "json": v });
    }
    match std::str::from_utf8(bytes) {
        Ok(text) => json!({ "text": text }),
        Err(_) => json!({ "bytes": bytes.len() }),
    }
}

/// A body read as I-JSON for [`shown`]: only when it is short enough to be shown, unless
/// `always` (the check needs it whatever its length).
fn read_json(bytes: &[u8], depth: usize, always: bool) -> Option<Value> {
    (always || bytes.len() <= SHOWN_BODY)
        .then(|| palisade_policy::json::parse(bytes, depth).ok())
        .flatten()
}

/// The contract's input check on the held request, under the bundle in force now (the one
/// its release will be judged by): `{"ok": true}`, `{"ok": false, "code", "detail",
/// "location"}`, or `{"bound": false}` when no contract covers the operation.
fn input_check(
    plane: &Plane,
    rec: &EscrowRecord,
    bytes: &[u8],
    parsed: Option<&Value>,
    depth: usize,
) -> Value {
    let bundle = plane.bundle.load_full();
    let Some(b) = bundle.as_deref() else {
        return json!({"bound": false});
    };
    let Some(req) = &rec.request else {
        return json!({"bound": false});
    };
    let checked = match req.protocol {
        HeldProtocol::Http => {
            let path = req.target.split('?').next().unwrap_or("");
            b.route(&req.method, path)
                .map(|cap| palisade_rich::check_input(&cap.contract, bytes, depth))
        }
        HeldProtocol::Mcp => {
            let call = parsed.unwrap_or(&Value::Null);
            let name = call["params"]["name"].as_str().unwrap_or("");
            let args = &call["params"]["arguments"];
            b.tool(name)
                .map(|cap| palisade_rich::check_input_value(&cap.contract, args))
        }
    };
    match checked {
        None => json!({"bound": false}),
        Some(Ok(())) => json!({"bound": true, "ok": true}),
        Some(Err(r)) => json!({
            "bound": true,
            "ok": false,
            "code": r.code.as_str(),
            "detail": r.detail,
            "location": r.location,
        }),
    }
}
