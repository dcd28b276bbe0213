//! `POST …/leases/{id}/compensate`: the staged inverse sent, or the snapshot put back, at
//! most once, fenced with the next epoch (SPEC §5.4).

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use palisade_policy::{inverse, ErrorCode, Refusal};
use serde_json::{json, Value};

use crate::context::Enforcement;
use crate::context::Plane;
use crate::enforce::identity;
use crate::enforce::permit::Denied;
use crate::enforce::stop::Keys;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::store::LeaseState;
use crate::store::StoreError;

use super::lease_record::{bad, caller_record};

/// The request that undoes a write: method, path (and query), headers, body.
type Undo = (Method, String, Vec<(String, String)>, Bytes);

/// Undoes a committed write (SPEC §5.4): a write like any other, fenced on the inverse's
/// resource with that resource's next epoch and stopped by freezes.
pub(super) async fn compensate(
    plane: &Plane,
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Denied> {
    let record = caller_record(enf, parts, lease_id, conn).await?;
    match record.state {
        LeaseState::Committed => {}
        LeaseState::Compensated => {
            return Err(Refusal::new(
                ErrorCode::AlreadyCompensated,
                "the lease's write was already compensated",
            )
            .into())
        }
        _ => return Err(bad("the lease has no committed write to compensate").into()),
    }
    if enf.clock.now_ms() > record.expires_at_ms {
        return Err(Refusal::new(
            ErrorCode::LeaseExpired,
            "the lease's recovery window has passed",
        )
        .with_status(410)
        .into());
    }
    let path = record.path.clone().unwrap_or_else(|| "/".into());
    let resource = record.resource.clone();
    // The request that undoes the write.
    let mut tool_call = None;
    let (method, inv_path, inv_headers, inv_body): Undo = match record.recovery_mode.as_str() {
        "COMPENSATING_ACTION" => {
            let bytes = enf
                .store
                .inverse(lease_id)
                .await
                .map_err(StoreError::into_refusal)?
                .ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::InverseNotStaged,
                        "no inverse payload is staged for this lease",
                    )
                })?;
            let inv = inverse::parse(&bytes, plane.config.limits.max_json_depth)?;
            // A lease granted before the binding rule, with an inverse elsewhere, is refused
            // here with the code staging it would get now (SPEC §5.4, issue 54).
            check_record_target(plane, &inv, &record)?;
            if let Some(call) = &inv.tool {
                let (path, headers, body) =
                    crate::mcp::inverse::inverse_request(&plane.config, call);
                tool_call = Some(call.clone());
                (Method::POST, path, headers, body)
            } else {
                http_inverse(inv)?
            }
        }
        "SNAPSHOT_RESTORE" => {
            let snap: Value = enf
                .store
                .snapshot(lease_id)
                .await
                .map_err(StoreError::into_refusal)?
                .and_then(|b| serde_json::from_slice(&b).ok())
                .ok_or_else(|| bad("no snapshot was kept for this lease (pre_image = \"off\"?)"))?;
            if snap["absent"] == true {
                (Method::DELETE, path.clone(), Vec::new(), Bytes::new())
            } else {
                let body = snap["body_b64"]
                    .as_str()
                    .and_then(|b| {
                        base64::Engine::decode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, b)
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
            return Err(
                bad("only COMPENSATING_ACTION and SNAPSHOT_RESTORE leases are compensated").into(),
            )
        }
    };

    // What the inverse writes: its resource (fenced) and operation, as freezes name them.
    let (inv_resource, operation) = match &tool_call {
        Some(call) => tool_keys(plane, call),
        None => http_keys(plane, &resource, &method, &inv_path),
    };
    // A compensation is stopped like any write (SPEC §14): by a freeze of the inverse's
    // resource or operation, of the lease holder, or of all.
    let keys = Keys {
        caller: record.agent_id.clone().or_else(|| conn.caller(parts)),
        operation,
        also: None,
        resource: inv_resource.clone(),
    };
    if let Some(denied) = crate::enforce::stop::frozen(enf, &keys) {
        return Err(denied);
    }
    let _lock = enf
        .store
        .lock(&inv_resource)
        .await
        .map_err(StoreError::into_refusal)?;
    let epoch = match enf
        .store
        .begin_compensation(lease_id.to_owned(), inv_resource.clone())
        .await
        .map_err(StoreError::into_refusal)?
    {
        crate::store::Compensation::Started { epoch } => epoch,
        crate::store::Compensation::AlreadyCompensated => {
            return Err(Refusal::new(
                ErrorCode::AlreadyCompensated,
                "the lease's write was already compensated",
            )
            .into())
        }
        crate::store::Compensation::NotCommitted => {
            return Err(bad("the lease has no committed write to compensate").into())
        }
    };
    let uri = plane
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
    req = req.header(headers::FENCE_HEADER, epoch);
    let req = req
        .body(body::full(inv_body))
        .map_err(|_| bad("inverse request cannot be built"))?;
    let identity = identity::for_route(
        plane.bundle.load().as_deref(),
        &method,
        inv_path.split('?').next().unwrap_or(""),
    );
    // A tool call answers failure inside an HTTP 200: a JSON-RPC error or an isError result.
    let mut tool_failed = false;
    let upstream_status = match plane.upstream.send_as(req, identity.as_deref()).await {
        Ok(resp) => {
            let status = resp.status().as_u16();
            // Drain the answer so the connection returns to the pool.
            let answer =
                body::collect_limited(resp.into_body(), plane.config.limits.max_response).await;
            if tool_call.is_some() && status < 400 {
                tool_failed = answer.map_or(true, |a| crate::mcp::inverse::inverse_failed(&a));
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
        sor_target_uri: Some(inv_resource.clone()),
        cas_fence_epoch: Some(epoch),
        method: Some(method.to_string()),
        upstream_status: Some(upstream_status),
        rules_digest: plane.rules_digest(),
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
            enf.now_rfc3339(),
        )
    };
    let sealed = enf
        .seal_plain(body)
        .await
        .map_err(StoreError::into_refusal)?;
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
        .insert(headers::FENCE_HEADER, HeaderValue::from(epoch));
    Ok(resp)
}

/// The HTTP request a staged (non-tool) inverse describes, in the one canonical form any
/// request is sent in, with no PTCL header of the agent's choosing (the fence token is ours).
fn http_inverse(inv: inverse::InversePayload) -> Result<Undo, Refusal> {
    let body = inv
        .body
        .as_ref()
        .map(|b| Bytes::from(serde_json::to_vec(b).unwrap_or_default()))
        .unwrap_or_default();
    let mut headers: Vec<(String, String)> = inv.headers.into_iter().collect();
    if inv.body.is_some() && !headers.iter().any(|(k, _)| k == "content-type") {
        headers.push(("content-type".into(), "application/json".into()));
    }
    // The inverse goes out in the same canonical form as any request, and
    // with no PTCL header of the agent's choosing (the fence token is ours).
    headers.retain(|(k, _)| {
        let k = k.to_ascii_lowercase();
        !headers::SIDECAR_OWNED.contains(&k.as_str())
            && !headers::PTCL_REQUEST_HEADERS.contains(&k.as_str())
    });
    let method = Method::from_bytes(inv.method.as_bytes()).map_err(|_| bad("inverse method"))?;
    let (p, q) = match inv.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (inv.path.as_str(), None),
    };
    let p = palisade_policy::path::canonical_path(p).map_err(|_| {
        Refusal::new(
            ErrorCode::PathNotCanonical,
            "the inverse's path has no canonical form",
        )
    })?;
    let path = q.map_or(p.clone(), |q| format!("{p}?{q}"));
    Ok((method, path, headers, body))
}

/// The binding rule (SPEC §5.4) for a committed lease's inverse, against the write its record
/// names.
fn check_record_target(
    plane: &Plane,
    inv: &inverse::InversePayload,
    record: &crate::store::LeaseRecord,
) -> Result<(), Refusal> {
    let path = super::grant::record_path(record).unwrap_or_else(|| "/".into());
    super::grant::check_target(plane, inv, &path, record.method.as_deref())
}

/// An inverse tool call's resource (`mcp:tool/<name>`, or `…/<handle>` when its contract names
/// a state handle the arguments carry, SPEC §11) and operation.
fn tool_keys(plane: &Plane, call: &inverse::ToolCall) -> (String, String) {
    let bundle = plane.bundle.load_full();
    let handle = bundle
        .as_deref()
        .and_then(|b| b.tool_index(&call.name).and_then(|i| b.capabilities.get(i)))
        .and_then(|c| c.contract.state_handle.as_deref());
    let resource = crate::mcp::call::tool_resource(&call.name, &call.arguments, handle);
    (resource, format!("mcp:tool/{}", call.name))
}

/// An HTTP inverse's resource (the written resource's origin and the inverse's path, without
/// query: SPEC §4.3) and operation (the lockfile's, else `METHOD <path>`).
fn http_keys(plane: &Plane, written: &str, method: &Method, pq: &str) -> (String, String) {
    let path = pq.split('?').next().unwrap_or(pq);
    let origin = written
        .split_once("://")
        .map(|(scheme, rest)| {
            let host = rest.find('/').map_or(rest, |i| &rest[..i]);
            format!("{scheme}://{host}")
        })
        .unwrap_or_default();
    let resource = palisade_policy::target::request_target(&origin, path)
        .map(|t| palisade_policy::target::resource_key(&t).to_owned())
        .unwrap_or_else(|_| written.to_owned());
    let bundle = plane.bundle.load_full();
    let operation = bundle
        .as_deref()
        .and_then(|b| {
            b.route_index(method.as_str(), path)
                .and_then(|i| b.capabilities.get(i))
        })
        .map_or_else(|| format!("{method} {path}"), |c| c.operation.clone());
    (resource, operation)
}
