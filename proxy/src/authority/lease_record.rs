//! The stored record of a lease, as its caller may see it, and the refusals every endpoint
//! shares.

use palisade_policy::{ErrorCode, Refusal};

use crate::store::LeaseRecord;
use crate::store::StoreError;

use crate::context::Enforcement;
use crate::net::conn::ConnInfo;

/// Where the lease endpoints live on the data plane (SPEC §5.7).
pub const PREFIX: &str = "/.well-known/ptcl/v1/leases";

pub(super) fn bad(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::BadRequest, detail)
}

/// A lease's stored record, for its caller only: 404 when there is none, 403 when the lease is
/// bound to another caller.
pub(super) async fn caller_record(
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<LeaseRecord, Refusal> {
    let record = enf
        .store
        .lease_record(lease_id)
        .await
        .map_err(StoreError::into_refusal)?
        .ok_or_else(|| {
            Refusal::new(
                ErrorCode::NotFound,
                "no lease with this id has a record here (never seen, or removed store.lease_retention after it expired)",
            )
        })?;
    if let Some(agent) = &record.agent_id {
        if conn.caller(parts).as_ref() != Some(agent) {
            return Err(Refusal::new(
                ErrorCode::LeaseNotYours,
                "the lease was granted to another caller",
            ));
        }
    }
    Ok(record)
}
