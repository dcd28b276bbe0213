//! What a decided write leaves behind: the commit receipt of a permitted one, and for a
//! refused one problem+json with its signed rejection receipt and a drift event (SPEC §5.5, §8).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{HeaderValue, Response};
use palisade_policy::drift::{DriftEvent, EventContext};
use palisade_policy::lease::{self};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind, SealedReceipt};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{AppState, Enforcement, WriteContext};
use crate::enforce::permit::{Denied, Permit};
use crate::net::body::ProxyBody;
use crate::net::headers::{self, DRY_RUN_HEADER, FENCE_HEADER, RECEIPT_HEADER};
use crate::net::identity::Mismatch;
use crate::net::problem::Problem;
use crate::store::Attachments;

fn receipt_header(r: &SealedReceipt) -> Option<HeaderValue> {
    receipt_header_value(&r.value)
}

/// `Agent-Commit-Receipt`: base64url of the receipt's JSON.
pub(crate) fn receipt_header_value(receipt: &serde_json::Value) -> Option<HeaderValue> {
    if !receipt.is_object() {
        return None;
    }
    HeaderValue::from_str(&URL_SAFE_NO_PAD.encode(serde_json::to_vec(receipt).ok()?)).ok()
}

/// The `outcome` of a tool call answered with an interim result: its receipt is of kind
/// `interim`, not `commit`, and its lease is left with nothing to compensate (SPEC §7).
pub const INTERIM: &str = "interim";

/// After the forward: the commit receipt, `Agent-Commit-Receipt` and `Agent-Fence-Token`.
/// `outcome` marks what the receipt cannot otherwise say (`"uncertain"`: the upstream did
/// not answer in time, so the write may or may not have happened; [`INTERIM`]). `attach` builds what must
/// be stored with the receipt from the response as the client will get it (headers final
/// except the receipt).
pub async fn commit(
    enf: &Enforcement,
    permit: Permit,
    cx: &WriteContext,
    outcome: Option<&str>,
    resp: &mut Response<ProxyBody>,
    attach: impl FnOnce(&Response<ProxyBody>) -> Attachments,
) -> Option<SealedReceipt> {
    let l = permit.lease.lease();
    let dry_run = permit.is_dry_run();
    if dry_run {
        resp.headers_mut()
            .insert(DRY_RUN_HEADER, HeaderValue::from_static("1"));
    } else {
        resp.headers_mut()
            .insert(FENCE_HEADER, HeaderValue::from(l.cas_fence_epoch));
    }
    let kind = match outcome {
        _ if dry_run => ReceiptKind::DryRun,
        Some(INTERIM) => ReceiptKind::Interim,
        _ => ReceiptKind::Commit,
    };
    let body = ReceiptBody {
        outcome: if dry_run {
            Some("dry-run".to_owned())
        } else {
            outcome.map(str::to_owned)
        },
        upstream_status: Some(resp.status().as_u16()),
        ..permit_receipt(enf, &permit, cx, kind)
    };
    let attachments = attach(resp);
    let waited = tokio::time::Instant::now();
    let appended = enf.store.append_receipt_with(body, attachments).await;
    metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "receipt")
        .record(waited.elapsed().as_secs_f64());
    match appended {
        Ok(Some(sealed)) => {
            if let Some(v) = receipt_header(&sealed) {
                resp.headers_mut().insert(RECEIPT_HEADER, v);
            }
            Some(sealed)
        }
        Ok(None) => {
            tracing::error!(lease_id = %l.lease_id, "commit receipt refused by an escrow state change");
            None
        }
        // The write happened and its epoch is durable; only its receipt is missing. Say so
        // loudly: the audit chain will not show this write.
        Err(e) => {
            tracing::error!(error = %e, lease_id = %l.lease_id, "commit receipt not stored");
            metrics::counter!(crate::telemetry::RECEIPTS_NOT_STORED).increment(1);
            None
        }
    }
}

/// A receipt body naming a permitted write: lease, target, epoch, method, digests, trace.
pub(crate) fn permit_receipt(
    enf: &Enforcement,
    permit: &Permit,
    cx: &WriteContext,
    kind: ReceiptKind,
) -> ReceiptBody {
    let l = permit.lease.lease();
    ReceiptBody {
        lease_id: Some(l.lease_id.clone()),
        sor_target_uri: Some(permit.target.clone()),
        cas_fence_epoch: Some(l.cas_fence_epoch),
        method: Some(cx.method.to_string()),
        request_digest: Some(permit.request_digest.to_string()),
        pre_image_state_hash: permit.pre_image.map(|d| d.to_string()),
        trace_id: Some(cx.trace_id.to_string()),
        trace_anchor_ref: l.trace_anchor_ref.map(|d| d.to_string()),
        lockfile_digest: cx.lockfile_digest.clone(),
        caller: cx.caller.clone(),
        connector: cx.connector.clone(),
        attribution: cx.attribution.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            kind,
            enf.now_rfc3339(),
        )
    }
}

/// A refused write: problem+json with the rejection receipt, and a drift event.
pub async fn refuse(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
    current_epoch: Option<u64>,
) -> Response<ProxyBody> {
    refuse_as(
        enf,
        refusal,
        cx,
        lease_raw,
        evidence_body,
        current_epoch,
        None,
        &[],
    )
    .await
}

/// [`refuse`] with members added to the problem body (a protocol's own fields beside ours,
/// e.g. the AIP-2.1 handler's `accepted` and `reason`).
pub async fn refuse_with(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    extra: &[(&str, serde_json::Value)],
) -> Response<ProxyBody> {
    refuse_as(enf, refusal, cx, None, None, None, None, extra).await
}

/// [`refuse`] for a denied check: an identity mismatch at check 12 reports the peer (its
/// SPIFFE ID observed, its certificate as evidence), as a refused read does.
pub async fn refuse_denied(
    enf: &Enforcement,
    denied: &Denied,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
) -> Response<ProxyBody> {
    let (refusal, epoch, peer) = (&denied.refusal, denied.current_epoch, denied.peer.as_ref());
    refuse_as(enf, refusal, cx, lease_raw, evidence_body, epoch, peer, &[]).await
}

#[allow(clippy::too_many_arguments)]
async fn refuse_as(
    enf: &Enforcement,
    refusal: &Refusal,
    cx: &WriteContext,
    lease_raw: Option<&[u8]>,
    evidence_body: Option<&[u8]>,
    current_epoch: Option<u64>,
    peer: Option<&Mismatch>,
    extra: &[(&str, serde_json::Value)],
) -> Response<ProxyBody> {
    let request_id = uuid::Uuid::new_v4().to_string();
    let lease_id = lease_raw.and_then(lease_id_hint);
    let body = ReceiptBody {
        lease_id: lease_id.clone(),
        method: Some(cx.method.to_string()),
        code: Some(refusal.code.as_str().to_owned()),
        trace_id: Some(cx.trace_id.to_string()),
        cas_fence_epoch: current_epoch,
        lockfile_digest: cx.lockfile_digest.clone(),
        caller: cx.caller.clone(),
        connector: cx.connector.clone(),
        attribution: cx.attribution.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Rejection,
            enf.now_rfc3339(),
        )
    };
    let sealed = enf.store.append_receipt(body).await;
    let observed = match peer {
        Some(m) => m.observed.clone().unwrap_or_else(|| "none".into()),
        None => cx.operation.clone(),
    };
    // A contract refusal's offending payload is the body; a peer's, its certificate; any
    // other's, the lease.
    let evidence = match peer {
        Some(m) => Some(m.certificate.clone()),
        None if matches!(
            refusal.code,
            ErrorCode::ContractInput
                | ErrorCode::ConnectorFailed
                | ErrorCode::ConnectorPostcondition
        ) =>
        {
            evidence_body.map(<[u8]>::to_vec)
        }
        None => lease_raw.map(<[u8]>::to_vec),
    };
    if let Some(mut event) = DriftEvent::for_refusal(
        refusal,
        EventContext {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: enf.now_rfc3339(),
            trace_id: cx.trace_id.to_string(),
            observed_identifier: Some(observed),
            binding_id: cx.binding_id.clone(),
            // A connector's refusal is about the connector the lockfile pinned.
            expected_digest: match (&cx.connector, refusal.code) {
                (Some(c), ErrorCode::ConnectorFailed | ErrorCode::ConnectorPostcondition) => {
                    Some(c.connector_digest.clone())
                }
                _ => cx.contract_digest.clone(),
            },
            evidence,
            caller: cx.caller.clone(),
        },
    ) {
        if let Some(m) = peer {
            event
                .diagnostics
                .insert("expectedIdentity".into(), m.expected.clone().into());
            event
                .diagnostics
                .insert("operation".into(), cx.operation.clone().into());
        }
        enf.drift.emit(&event);
    }
    let mut problem = Problem::from_refusal(refusal, &request_id, &cx.trace_id);
    for (k, v) in extra {
        problem.extensions.insert((*k).to_owned(), v.clone());
    }
    if let Some(epoch) = current_epoch {
        problem
            .extensions
            .insert("current_epoch".into(), serde_json::json!(epoch));
    }
    let receipt_value = match &sealed {
        Ok(r) => {
            problem.extensions.insert("receipt".into(), r.value.clone());
            receipt_header(r)
        }
        Err(e) => {
            tracing::error!(error = %e, "rejection receipt not stored");
            None
        }
    };
    let mut resp = problem.into_response();
    if let Some(v) = receipt_value {
        resp.headers_mut().insert(RECEIPT_HEADER, v);
    }
    if let Some(epoch) = current_epoch {
        resp.headers_mut()
            .insert(FENCE_HEADER, HeaderValue::from(epoch));
    }
    resp
}

/// A refused write: problem+json, rejection receipt, drift event, refusal metric.
pub(crate) async fn refuse_write(
    state: &AppState,
    enf: &Enforcement,
    parts: &http::request::Parts,
    denied: Denied,
    cx: &WriteContext,
    body: &[u8],
) -> Response<ProxyBody> {
    state.metrics.refusal(denied.refusal.code);
    let lease = parts
        .headers
        .get(headers::LEASE_HEADER)
        .and_then(|v| palisade_policy::lease::decode_header(v.as_bytes()).ok());
    refuse_denied(enf, &denied, cx, lease.as_deref(), Some(body)).await
}

/// The `lease_id` of a refused lease document (which may not verify), for its receipt.
fn lease_id_hint(raw: &[u8]) -> Option<String> {
    let v = palisade_policy::json::parse(raw, lease::MAX_LEASE_DEPTH).ok()?;
    v.get("lease_id")?.as_str().map(str::to_owned)
}
