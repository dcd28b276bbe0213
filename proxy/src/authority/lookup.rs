//! `GET …/leases/{id}`: the lease's state, epoch and receipts, for its caller.

use http::{Response, StatusCode};
use palisade_policy::lease::{self};
use palisade_policy::Refusal;
use serde_json::{json, Value};

use crate::context::Enforcement;
use crate::enforce::checks;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::store::LeaseState;

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
    let receipts: Vec<Value> = enf
        .store
        .lease_receipts(lease_id)
        .await
        .map_err(checks::store_refusal)?
        .iter()
        .filter_map(|r| serde_json::from_slice(r).ok())
        .collect();
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
