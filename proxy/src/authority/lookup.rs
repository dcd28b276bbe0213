//! `GET …/leases/{id}`: the lease's state, epoch and receipts, for its caller.

use http::{Response, StatusCode};
use palisade_policy::lease::{self};
use palisade_policy::Refusal;
use serde_json::{json, Value};

use crate::context::Enforcement;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::store::StoreError;
use crate::store::{log_read, LeaseReceipt, LeaseState};
use palisade_policy::log::merkle;

use super::lease_record::caller_record;

/// `GET …/leases/{lease_id}` (SPEC §5.7).
pub(super) async fn lookup(
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    let record = caller_record(enf, parts, lease_id, conn).await?;
    let expired = enf.clock.now_ms() > record.expires_at_ms;
    let state = match record.state {
        LeaseState::Granted if expired => "expired",
        s => s.as_str(),
    };
    let kept = enf
        .store
        .lease_receipts(lease_id)
        .await
        .map_err(StoreError::into_refusal)?;
    let receipts = envelopes(enf, kept).await?;
    Ok(body::json_response(
        StatusCode::OK,
        &json!({
            "lease_id": lease_id,
            "state": state,
            "epoch": record.epoch,
            "recovery_mode": record.recovery_mode,
            "expires_at": lease::format_rfc3339_ms(record.expires_at_ms),
            "receipts": receipts,
        }),
    ))
}

/// Each log entry with its envelope, proven against the log's newest checkpoint, so that a
/// caller verifies it alone (SPEC §5.5); a v1 receipt from before the log as it was kept. The
/// proofs are computed together, from one read of the hashes they need.
async fn envelopes(enf: &Enforcement, kept: Vec<LeaseReceipt>) -> Result<Vec<Value>, Refusal> {
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    let head = enf
        .store
        .log_head()
        .await
        .map_err(StoreError::into_refusal)?;
    let proven: Vec<u64> = kept
        .iter()
        .filter_map(|r| r.index.filter(|i| *i < head.size))
        .collect();
    let proofs = log_read::compute(enf.store.as_ref(), |h| {
        proven
            .iter()
            .map(|i| merkle::inclusion(*i, head.size, h))
            .collect::<Result<Vec<_>, _>>()
    })
    .await
    .map_err(StoreError::into_refusal)?
    .unwrap_or_else(|e| {
        tracing::error!(error = %e, "no inclusion proofs for a lease's receipts");
        Vec::new()
    });
    let proofs: std::collections::HashMap<u64, _> = proven.into_iter().zip(proofs).collect();
    let mut out = Vec::with_capacity(kept.len());
    for r in kept {
        let Ok(receipt) = serde_json::from_slice::<Value>(&r.bytes) else {
            continue;
        };
        match r.index.and_then(|i| proofs.get(&i).map(|p| (i, p))) {
            Some((index, p)) => out.push(json!({
                "receipt": receipt, "index": index,
                "inclusion": merkle::encode_proof(p), "checkpoint": head.note,
            })),
            // A v1 receipt, as kept.
            None if r.index.is_none() => out.push(receipt),
            None => {}
        }
    }
    Ok(out)
}
