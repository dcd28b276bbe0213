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
//! Not here yet: `GET …/leases/{lease_id}` (state and receipts) and `…/compensate`.

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
    cx: &WriteContext<'_>,
) -> Response<ProxyBody> {
    let path = parts.uri.path().to_owned();
    let rest = &path[PREFIX.len()..];
    let result = match (&parts.method, rest) {
        (&Method::POST, "") => match read_body(state, body).await {
            Ok(b) => grant(state, enf, &parts, &b, conn).await,
            Err(r) => Err(r),
        },
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
            enforce::refuse(enf, &refusal, cx, None, None).await
        }
    }
}

async fn read_body(state: &AppState, body: Incoming) -> Result<Bytes, Refusal> {
    body::collect_limited(body, state.config.max_body)
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

fn json_response(status: StatusCode, doc: &Value) -> Response<ProxyBody> {
    let mut r = Response::new(body::full(serde_json::to_vec(doc).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
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
        enforce::fetch_state(config, &state.upstream, pq, &parts.headers).await?
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
    let mut resp = json_response(StatusCode::CREATED, &signed);
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
    Ok(json_response(
        StatusCode::CREATED,
        &json!({"lease_id": lease_id, "inverse_payload_jcs_hash": digest}),
    ))
}
