//! The lease authority (SPEC §5.7) and inverse staging (SPEC §5.4), under
//! `/.well-known/ptcl/v1/leases` on the data plane.
//!
//! - `POST …/leases` grants a lease signed by the sidecar key: the next epoch of the resource
//!   (not reserved: a concurrent grant may race and the loser's write gets 409), the pre-image
//!   digest computed by the sidecar, `t_granted_ms = t_req_ms` (≤ `ptcl.max_grant`),
//!   `issued_at` now, and `agent_id` = the caller's identity. The inverse payload is staged
//!   durably with the grant.
//! - `PUT …/leases/{lease_id}/inverse` stages (or replaces) an inverse payload for a lease.
//!
//! Refusals here are refusals like any other: problem+json, rejection receipt, drift event.
//!
//! - `POST …/leases/{lease_id}/compensate` undoes a committed write within the lease's window
//!   (SPEC §5.4): COMPENSATING_ACTION sends the staged inverse, SNAPSHOT_RESTORE puts the
//!   stored pre-image back (or DELETEs when the resource was absent). The lease is marked
//!   compensated and the resource's fence advanced *before* the inverse is sent, so it is sent
//!   at most once and with a newer epoch than the write it undoes.
//!
//! - `GET …/leases/{lease_id}`: the lease's state (`granted|committed|compensated|expired`),
//!   epoch and receipts.

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::lease::{self, RecoveryMode};
use palisade_policy::{inverse, json, target, ErrorCode, Refusal};
use serde_json::{json, Value};

use crate::body::{self, ProxyBody};
use crate::enforce::{self, Enforcement, WriteContext};
use crate::pipeline::{AppState, ConnInfo};

pub const PREFIX: &str = "/.well-known/ptcl/v1/leases";

pub async fn handle(
    state: &AppState,
    enf: &Enforcement,
    parts: http::request::Parts,
    body: Incoming,
    conn: &ConnInfo,
    cx: &WriteContext,
) -> Response<ProxyBody> {
    let path = parts.uri.path().to_owned();
    let rest = &path[PREFIX.len()..];
    let result = match (&parts.method, rest) {
        (&Method::POST, "") => match read_body(state, body).await {
            Ok(b) => grant(state, enf, &parts, &b, conn).await,
            Err(r) => Err(r),
        },
        (&Method::GET, r) if r.starts_with('/') && !r[1..].contains('/') => {
            lookup(enf, &parts, &r[1..], conn).await
        }
        (&Method::POST, r) if r.starts_with('/') && r.ends_with("/compensate") => {
            let lease_id = &r[1..r.len() - "/compensate".len()];
            compensate(state, enf, &parts, lease_id, conn).await
        }
        (&Method::PUT, r) if r.starts_with('/') && r.ends_with("/inverse") => {
            let lease_id = &r[1..r.len() - "/inverse".len()];
            match read_body(state, body).await {
                Ok(b) => stage_inverse(state, enf, lease_id, &b).await,
                Err(r) => Err(r),
            }
        }
        _ => Err(Refusal::new(
            ErrorCode::NotFound,
            "no lease-authority endpoint at this path",
        )),
    };
    match result {
        Ok(resp) => resp,
        Err(refusal) => {
            state.metrics.refusal(refusal.code);
            enforce::refuse(enf, &refusal, cx, None, None, None).await
        }
    }
}

async fn read_body(state: &AppState, body: Incoming) -> Result<Bytes, Refusal> {
    body::read_request_body(body, state.config.max_body)
        .await
        .map_err(|e| match e {
            body::CollectError::TooLarge(_) => Refusal::new(
                ErrorCode::BodyTooLarge,
                "request body exceeds limits.max_body",
            ),
            body::CollectError::Read(_) => {
                Refusal::new(ErrorCode::BadRequest, "request body could not be read")
            }
        })
}

fn bad(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::BadRequest, detail)
}

async fn grant(
    state: &AppState,
    enf: &Enforcement,
    parts: &http::request::Parts,
    body: &[u8],
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    let config = &state.config;
    let caller = conn.caller(&parts.headers).ok_or_else(|| {
        Refusal::new(
            ErrorCode::CallerUnidentified,
            "a lease grant needs a client certificate or an Authorization header",
        )
    })?;
    let req = json::parse(body, config.max_json_depth)
        .map_err(|_| bad("grant request is not valid I-JSON"))?;
    let Value::Object(req) = req else {
        return Err(bad("grant request must be a JSON object"));
    };
    let target_uri = req
        .get("sor_target_uri")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("sor_target_uri is required and must be a string"))?;
    let mode = req
        .get("recovery_mode")
        .and_then(Value::as_str)
        .and_then(RecoveryMode::parse)
        .ok_or_else(|| bad("recovery_mode must be one of the four PTCL modes"))?;
    let t_req = req
        .get("t_req_ms")
        .and_then(Value::as_u64)
        .filter(|t| *t <= json::MAX_SAFE_INTEGER)
        .ok_or_else(|| bad("t_req_ms must be a non-negative integer"))?;
    let trace_anchor = match req.get("trace_anchor_ref") {
        None => None,
        Some(v) => Some(
            v.as_str()
                .and_then(|s| Sha256Digest::parse_ptcl(s).ok())
                .ok_or_else(|| bad("trace_anchor_ref must be sha256: and 64 lowercase hex"))?,
        ),
    };
    // The inverse is signed into the lease, so it must be known now (docs/decisions.md).
    let inverse_value = req
        .get("inverse_payload")
        .ok_or_else(|| bad("inverse_payload is required"))?;
    let inverse = inverse::parse(
        &serde_json::to_vec(inverse_value).unwrap_or_default(),
        config.max_json_depth,
    )?;

    // The target must be a resource behind this sidecar.
    let normalized = target::normalize(target_uri)
        .map_err(|_| bad("sor_target_uri must be an absolute http(s) URI"))?;
    let own = enforce::origin(config, parts, conn)
        .and_then(|o| target::request_target(&o, "/").ok())
        .ok_or_else(|| bad("the request's origin cannot be formed (Host missing)"))?;
    if !normalized.starts_with(&own) {
        return Err(Refusal::new(
            ErrorCode::TargetMismatch,
            "sor_target_uri does not name a resource behind this sidecar",
        ));
    }
    if u128::from(t_req) > config.max_grant.as_millis() {
        return Err(Refusal::new(
            ErrorCode::RecoveryWindow,
            "t_req_ms exceeds ptcl.max_grant",
        ));
    }

    let resource = target::resource_key(&normalized);
    let current = enf
        .store
        .epoch(resource)
        .await
        .map_err(enforce::store_refusal)?;
    let pq = &normalized[own.len() - 1..];
    let pre_image = if config.pre_image_fetch {
        let path = pq.split('?').next().unwrap_or(pq);
        let identity = crate::peer_identity::for_route(state, &Method::GET, path);
        enforce::fetch_state(
            config,
            &state.upstream,
            pq,
            &parts.headers,
            identity.as_deref(),
        )
        .await
        .map_err(|d| d.refusal)?
        .digest
    } else {
        Sha256Digest::empty()
    };
    let now = enf.clock.now_ms();
    let lease_id = format!("urn:uuid:{}", uuid::Uuid::new_v4());
    let mut fields = json!({
        "ptcl_version": "1.0",
        "lease_id": lease_id,
        "sor_target_uri": normalized,
        "recovery_mode": mode.as_str(),
        "t_req_ms": t_req,
        "t_granted_ms": t_req.max(1),
        "cas_fence_epoch": current + 1,
        "pre_image_state_hash": pre_image.to_string(),
        "inverse_payload_jcs_hash": inverse.digest.to_string(),
        "issued_at": lease::format_rfc3339_ms(now),
        "agent_id": caller,
    });
    if let (Some(t), Some(obj)) = (trace_anchor, fields.as_object_mut()) {
        obj.insert("trace_anchor_ref".into(), json!(t.to_string()));
    }
    let signed = lease::sign(fields.as_object().cloned().unwrap_or_default(), &enf.key);
    let record = json!({
        "lease_id": lease_id,
        "state": "granted",
        "resource": resource,
        "epoch": current + 1,
        "recovery_mode": mode.as_str(),
        "expires_at_ms": now + t_req.max(1) as i64,
        "agent_id": caller,
    });
    enf.store
        .stage(
            lease_id.clone(),
            Some(serde_json::to_vec(&record).unwrap_or_default()),
            Some(inverse.jcs),
        )
        .await
        .map_err(enforce::store_refusal)?;
    let mut resp = body::json_response(StatusCode::CREATED, &signed);
    if let Ok(loc) = HeaderValue::from_str(&format!("{PREFIX}/{lease_id}")) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

async fn stage_inverse(
    state: &AppState,
    enf: &Enforcement,
    lease_id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, Refusal> {
    if lease_id.is_empty() || lease_id.len() > lease::MAX_LEASE_ID_BYTES || lease_id.contains('/') {
        return Err(bad(
            "lease_id in the path must be 1 to 128 bytes without '/'",
        ));
    }
    let inverse = inverse::parse(body, state.config.max_json_depth)?;
    let digest = inverse.digest.to_string();
    enf.store
        .stage(lease_id.to_owned(), None, Some(inverse.jcs))
        .await
        .map_err(enforce::store_refusal)?;
    Ok(body::json_response(
        StatusCode::CREATED,
        &json!({"lease_id": lease_id, "inverse_payload_jcs_hash": digest}),
    ))
}

/// Undoes a committed write (SPEC §5.4).
async fn compensate(
    state: &AppState,
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    let record = caller_record(enf, parts, lease_id, conn).await?;
    match record["state"].as_str() {
        Some("committed") => {}
        Some("compensated") => {
            return Err(Refusal::new(
                ErrorCode::AlreadyCompensated,
                "the lease's write was already compensated",
            ))
        }
        _ => return Err(bad("the lease has no committed write to compensate")),
    }
    if enf.clock.now_ms() > record["expires_at_ms"].as_i64().unwrap_or(0) {
        return Err(Refusal::new(
            ErrorCode::LeaseExpired,
            "the lease's recovery window has passed",
        )
        .with_status(410));
    }
    let path = record["path"].as_str().unwrap_or("/").to_owned();
    let resource = record["resource"].as_str().unwrap_or_default().to_owned();
    // The request that undoes the write.
    let mut tool_inverse = false;
    let (method, inv_path, inv_headers, inv_body): (Method, String, Vec<(String, String)>, Bytes) =
        match record["recovery_mode"].as_str() {
            Some("COMPENSATING_ACTION") => {
                let bytes = enf
                    .store
                    .inverse(lease_id)
                    .await
                    .map_err(enforce::store_refusal)?
                    .ok_or_else(|| {
                        Refusal::new(
                            ErrorCode::InverseNotStaged,
                            "no inverse payload is staged for this lease",
                        )
                    })?;
                let inv = inverse::parse(&bytes, state.config.max_json_depth)?;
                if let Some(call) = &inv.tool {
                    tool_inverse = true;
                    let (path, headers, body) = crate::mcp::inverse_request(&state.config, call);
                    (Method::POST, path, headers, body)
                } else {
                    let body = inv
                        .body
                        .as_ref()
                        .map(|b| Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
                        .unwrap_or_default();
                    let mut headers: Vec<(String, String)> = inv.headers.into_iter().collect();
                    if inv.body.is_some() && !headers.iter().any(|(k, _)| k == "content-type") {
                        headers.push(("content-type".into(), "application/json".into()));
                    }
                    let method = Method::from_bytes(inv.method.as_bytes())
                        .map_err(|_| bad("inverse method"))?;
                    (method, inv.path, headers, body)
                }
            }
            Some("SNAPSHOT_RESTORE") => {
                let snap: Value = enf
                    .store
                    .snapshot(lease_id)
                    .await
                    .map_err(enforce::store_refusal)?
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .ok_or_else(|| {
                        bad("no snapshot was kept for this lease (pre_image = \"off\"?)")
                    })?;
                if snap["absent"] == true {
                    (Method::DELETE, path.clone(), Vec::new(), Bytes::new())
                } else {
                    let body = snap["body_b64"]
                        .as_str()
                        .and_then(|b| {
                            base64::Engine::decode(
                                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                                b,
                            )
                            .ok()
                        })
                        .unwrap_or_default();
                    let headers = snap["content_type"]
                        .as_str()
                        .map(|ct| vec![("content-type".to_owned(), ct.to_owned())])
                        .unwrap_or_default();
                    (Method::PUT, path.clone(), headers, Bytes::from(body))
                }
            }
            _ => {
                return Err(bad(
                    "only COMPENSATING_ACTION and SNAPSHOT_RESTORE leases are compensated",
                ))
            }
        };

    let _lock = enf.locks.lock(&resource).await;
    let epoch = match enf
        .store
        .begin_compensation(lease_id.to_owned())
        .await
        .map_err(enforce::store_refusal)?
    {
        crate::store::Compensation::Started { epoch } => epoch,
        crate::store::Compensation::AlreadyCompensated => {
            return Err(Refusal::new(
                ErrorCode::AlreadyCompensated,
                "the lease's write was already compensated",
            ))
        }
        crate::store::Compensation::NotCommitted => {
            return Err(bad("the lease has no committed write to compensate"))
        }
    };
    let uri = state
        .upstream
        .uri_for(&inv_path)
        .map_err(|_| bad("inverse path cannot be forwarded"))?;
    let mut req = http::Request::builder().method(method.clone()).uri(uri);
    for name in [header::AUTHORIZATION, header::COOKIE, header::HOST] {
        if let Some(v) = parts.headers.get(&name) {
            req = req.header(name, v.clone());
        }
    }
    for (k, v) in &inv_headers {
        req = req.header(k.as_str(), v.as_str());
    }
    req = req.header(enforce::FENCE_HEADER, epoch);
    let req = req
        .body(body::full(inv_body))
        .map_err(|_| bad("inverse request cannot be built"))?;
    let identity =
        crate::peer_identity::for_route(state, &method, inv_path.split('?').next().unwrap_or(""));
    // A tool call answers failure inside an HTTP 200: a JSON-RPC error or an isError result.
    let mut tool_failed = false;
    let upstream_status = match state.upstream.send_as(req, identity.as_deref()).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            // Drain the answer so the connection returns to the pool.
            let answer = body::collect_limited(resp.into_body(), state.config.max_response).await;
            if tool_inverse && status < 400 {
                tool_failed = answer.map_or(true, |a| crate::mcp::inverse_failed(&a));
            }
            status
        }
        Err(e) => {
            tracing::warn!(error = %e, lease_id, "compensation request failed; outcome uncertain");
            502
        }
    };
    let body = palisade_policy::receipt::ReceiptBody {
        lease_id: Some(lease_id.to_owned()),
        sor_target_uri: Some(resource.clone()),
        cas_fence_epoch: Some(epoch),
        method: Some(method.to_string()),
        upstream_status: Some(upstream_status),
        outcome: if upstream_status >= 500 {
            Some("uncertain".to_owned())
        } else if tool_failed {
            Some("failed".to_owned())
        } else {
            None
        },
        ..palisade_policy::receipt::ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            palisade_policy::receipt::ReceiptKind::Compensation,
            enforce::now_rfc3339(enf),
        )
    };
    let sealed = enf
        .store
        .append_receipt(body)
        .await
        .map_err(enforce::store_refusal)?;
    let status = if upstream_status < 400 && !tool_failed {
        StatusCode::OK
    } else {
        StatusCode::BAD_GATEWAY
    };
    let mut resp = body::json_response(
        status,
        &json!({"lease_id": lease_id, "upstream_status": upstream_status, "receipt": sealed.value}),
    );
    resp.headers_mut()
        .insert(enforce::FENCE_HEADER, HeaderValue::from(epoch));
    Ok(resp)
}

/// `GET …/leases/{lease_id}` (SPEC §5.7).
async fn lookup(
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    let record = caller_record(enf, parts, lease_id, conn).await?;
    let expired = enf.clock.now_ms() > record["expires_at_ms"].as_i64().unwrap_or(0);
    let state = match record["state"].as_str() {
        Some("granted") if expired => "expired",
        Some(s) => s,
        None => "unknown",
    };
    let receipts: Vec<Value> = enf
        .store
        .lease_receipts(lease_id)
        .await
        .map_err(enforce::store_refusal)?
        .iter()
        .filter_map(|r| serde_json::from_slice(r).ok())
        .collect();
    Ok(body::json_response(
        StatusCode::OK,
        &json!({
            "lease_id": lease_id,
            "state": state,
            "epoch": record["epoch"],
            "recovery_mode": record["recovery_mode"],
            "expires_at": lease::format_rfc3339_ms(record["expires_at_ms"].as_i64().unwrap_or(0)),
            "receipts": receipts,
        }),
    ))
}

/// A lease's stored record, for its caller only: 404 when there is none, 403 when the lease is
/// bound to another caller.
async fn caller_record(
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Value, Refusal> {
    let record: Value = enf
        .store
        .lease_record(lease_id)
        .await
        .map_err(enforce::store_refusal)?
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::NotFound,
                "no lease with this id has a record here",
            )
        })?;
    if let Some(agent) = record["agent_id"].as_str() {
        if conn.caller(&parts.headers).as_deref() != Some(agent) {
            return Err(Refusal::new(
                ErrorCode::LeaseNotYours,
                "the lease was granted to another caller",
            ));
        }
    }
    Ok(record)
}
