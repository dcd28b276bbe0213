//! `POST …/leases` (grant) and `PUT …/leases/{id}/inverse` (stage an inverse).

use http::{header, HeaderValue, Method, Response, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::lease::{self, RecoveryMode};
use palisade_policy::{inverse, json, target, ErrorCode, Refusal};
use serde_json::{json, Value};

use crate::context::Enforcement;
use crate::context::Plane;
use crate::enforce::facts;
use crate::enforce::identity;
use crate::enforce::preimage;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::store::StoreError;
use crate::store::{LeaseRecord, LeaseState};

use super::lease_record::{bad, PREFIX};

pub(super) async fn grant(
    plane: &Plane,
    enf: &Enforcement,
    parts: &http::request::Parts,
    body: &[u8],
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    let config = &plane.config;
    let caller = conn.caller(parts).ok_or_else(|| {
        Refusal::new(
            ErrorCode::CallerUnidentified,
            "a lease grant needs a client certificate or an Authorization header",
        )
    })?;
    let req = json::parse(body, config.limits.max_json_depth)
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
    // The inverse is signed into the lease, so it must be known now (SPEC §5.7): the agent's
    // for the modes that send it; SNAPSHOT_RESTORE's and DRY_RUN_SHADOW's the authority
    // makes itself (`issue`) when none is given.
    let inverse = match req.get("inverse_payload") {
        Some(v) => Some(inverse::parse(
            &serde_json::to_vec(v).unwrap_or_default(),
            config.limits.max_json_depth,
        )?),
        None if matches!(
            mode,
            RecoveryMode::CompensatingAction | RecoveryMode::HumanEscrow
        ) =>
        {
            return Err(bad(
                "inverse_payload is required for COMPENSATING_ACTION and HUMAN_ESCROW: the request that undoes the write is signed into the lease (SNAPSHOT_RESTORE and DRY_RUN_SHADOW grants may leave it out)",
            ))
        }
        None => None,
    };

    let lease = Grant {
        caller,
        target_uri,
        mode,
        t_req,
        trace_anchor,
        inverse,
    };
    let (signed, lease_id) = issue(plane, enf, parts, conn, lease).await?;
    let mut resp = body::json_response(StatusCode::CREATED, &signed);
    if let Ok(loc) = HeaderValue::from_str(&format!("{PREFIX}/{lease_id}")) {
        resp.headers_mut().insert(header::LOCATION, loc);
    }
    Ok(resp)
}

/// What a lease is granted for.
pub struct Grant<'a> {
    /// The caller's identity (`ConnInfo::caller`): the lease's `agent_id`.
    pub caller: String,
    /// Absolute, behind this sidecar.
    pub target_uri: &'a str,
    pub mode: RecoveryMode,
    pub t_req: u64,
    pub trace_anchor: Option<Sha256Digest>,
    /// `None`: the authority makes it (SNAPSHOT_RESTORE, DRY_RUN_SHADOW).
    pub inverse: Option<inverse::InversePayload>,
}

/// Grants a lease signed by the sidecar key and stages its inverse durably. `parts` is the
/// request the grant is made for: its origin and the headers the pre-image GET carries.
/// Returns the signed lease and its id.
pub async fn issue(
    plane: &Plane,
    enf: &Enforcement,
    parts: &http::request::Parts,
    conn: &ConnInfo,
    g: Grant<'_>,
) -> Result<(Value, String), Refusal> {
    let config = &plane.config;
    let (caller, mode, t_req, inverse) = (g.caller, g.mode, g.t_req, g.inverse);
    // The target must be a resource behind this sidecar.
    let normalized = target::normalize(g.target_uri)
        .map_err(|_| bad("sor_target_uri must be an absolute http(s) URI"))?;
    let own = facts::origin(config, parts, conn)
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
    let pq = &normalized[own.len() - 1..];
    let path = pq.split('?').next().unwrap_or(pq);
    if let Some(inv) = &inverse {
        check_target(plane, inv, path, None)?;
    }

    let current = enf
        .store
        .epoch(resource)
        .await
        .map_err(StoreError::into_refusal)?;
    let fetched = if config.pre_image_fetch {
        let identity = identity::for_route(plane.bundle.load().as_deref(), &Method::GET, path);
        let state = preimage::fetch_state(
            config,
            &plane.upstream,
            pq,
            &parts.headers,
            identity.as_deref(),
        )
        .await
        .map_err(|d| d.refusal)?;
        Some(state)
    } else {
        None
    };
    let pre_image = fetched
        .as_ref()
        .map_or_else(Sha256Digest::empty, |s| s.digest);
    let inverse = match inverse {
        Some(inv) => inv,
        None => made_inverse(mode, path, fetched.as_ref(), config.limits.max_json_depth)?,
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
    if let (Some(t), Some(obj)) = (g.trace_anchor, fields.as_object_mut()) {
        obj.insert("trace_anchor_ref".into(), json!(t.to_string()));
    }
    let signed = lease::sign(fields.as_object().cloned().unwrap_or_default(), &enf.key);
    let record = LeaseRecord {
        lease_id: lease_id.clone(),
        state: LeaseState::Granted,
        resource: resource.to_string(),
        path: None,
        method: None,
        epoch: current + 1,
        recovery_mode: mode.as_str().into(),
        expires_at_ms: now + t_req.max(1) as i64,
        agent_id: Some(caller.clone()),
        lease_digest: None,
        compensation_epoch: None,
    };
    enf.store
        .stage(lease_id.clone(), Some(record), Some(inverse.jcs))
        .await
        .map_err(StoreError::into_refusal)?;
    Ok((signed, lease_id))
}

/// The binding rule (SPEC §5.4) for an inverse staged for the write to `path` (a target's
/// path, without query) with `method` (`None`: not known yet, as at a grant): a tool path
/// (`/mcp/tools/<name>`) is a tool call, whose contract may declare another inverse tool; any
/// other an HTTP write.
pub(super) fn check_target(
    plane: &Plane,
    inv: &inverse::InversePayload,
    path: &str,
    method: Option<&str>,
) -> Result<(), Refusal> {
    let Some(name) = path.strip_prefix(crate::mcp::call::TOOL_PATH) else {
        return inverse::check_target(inv, &inverse::Undoes::Http { method, path });
    };
    let bundle = plane.bundle.load_full();
    let declared = bundle.as_deref().and_then(|b| {
        b.tool_index(name)
            .and_then(|i| b.capabilities.get(i))
            .and_then(|c| c.contract.inverse_tool.clone())
    });
    let declared = declared.as_deref();
    inverse::check_target(inv, &inverse::Undoes::Tool { name, declared })
}

/// The inverse the authority makes when a grant has none (SPEC §5.7): SNAPSHOT_RESTORE's is
/// the request that puts the fetched pre-image back (a PUT of its JSON representation, or a
/// DELETE when it was absent); DRY_RUN_SHADOW's names the resource and is never sent.
fn made_inverse(
    mode: RecoveryMode,
    path: &str,
    fetched: Option<&preimage::State>,
    max_depth: usize,
) -> Result<inverse::InversePayload, Refusal> {
    let doc = match (mode, fetched) {
        (RecoveryMode::DryRunShadow, _) => json!({"method": "PUT", "path": path}),
        (RecoveryMode::SnapshotRestore, Some(state)) => match &state.representation {
            None => json!({"method": "DELETE", "path": path}),
            Some((_, body)) => {
                let value = json::parse(body, max_depth).map_err(|_| {
                    bad("the resource's representation is not JSON, so the authority cannot write its inverse: send inverse_payload")
                })?;
                json!({"method": "PUT", "path": path, "body": value})
            }
        },
        (RecoveryMode::SnapshotRestore, None) => {
            return Err(bad(
                "a SNAPSHOT_RESTORE grant without inverse_payload needs ptcl.pre_image = \"fetch\": the authority builds the inverse from the pre-image it fetched",
            ))
        }
        _ => return Err(bad("inverse_payload is required for this recovery mode")),
    };
    inverse::parse(&serde_json::to_vec(&doc).unwrap_or_default(), max_depth)
}

pub(super) async fn stage_inverse(
    plane: &Plane,
    enf: &Enforcement,
    lease_id: &str,
    body: &[u8],
) -> Result<Response<ProxyBody>, Refusal> {
    if lease_id.is_empty() || lease_id.len() > lease::MAX_LEASE_ID_BYTES || lease_id.contains('/') {
        return Err(bad(
            "lease_id in the path must be 1 to 128 bytes without '/'",
        ));
    }
    let inverse = inverse::parse(body, plane.config.limits.max_json_depth)?;
    // A lease this authority granted names its target: the inverse is judged now. One signed
    // elsewhere is judged with its write, at check 10 (SPEC §5.4).
    if let Some(record) = enf
        .store
        .lease_record(lease_id)
        .await
        .map_err(StoreError::into_refusal)?
    {
        if let Some(path) = record_path(&record) {
            check_target(plane, &inverse, &path, None)?;
        }
    }
    let digest = inverse.digest.to_string();
    enf.store
        .stage(lease_id.to_owned(), None, Some(inverse.jcs))
        .await
        .map_err(StoreError::into_refusal)?;
    Ok(body::json_response(
        StatusCode::CREATED,
        &json!({"lease_id": lease_id, "inverse_payload_jcs_hash": digest}),
    ))
}

/// The path of a lease record's resource: its write's path, or, for a granted lease (no write
/// yet), the path of the resource key it names.
pub(super) fn record_path(record: &LeaseRecord) -> Option<String> {
    if let Some(p) = &record.path {
        return Some(p.split('?').next().unwrap_or(p).to_owned());
    }
    let rest = record.resource.split_once("://")?.1;
    Some(rest.find('/').map_or("/", |i| &rest[i..]).to_owned())
}
