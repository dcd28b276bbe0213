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

mod compensate;
mod grant;
mod lease_record;
mod lookup;

use bytes::Bytes;
use http::{Method, Response};
use hyper::body::Incoming;
use palisade_policy::{ErrorCode, Refusal};

use crate::context::Call;
use crate::context::Enforcement;
use crate::context::Plane;
use crate::enforce::own::Own;
use crate::enforce::permit::Denied;
use crate::enforce::receipts;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;

use compensate::compensate;
use grant::{grant, stage_inverse};
pub use grant::{issue, Grant};
pub use lease_record::PREFIX;
use lookup::lookup;

/// Undoes the committed write of `lease_id` for the caller `parts` and `conn` name (SPEC
/// §5.4): the endpoint's work, and RCNS's when a later step of a composition fails.
pub async fn compensate_lease(
    plane: &Plane,
    enf: &Enforcement,
    parts: &http::request::Parts,
    lease_id: &str,
    conn: &ConnInfo,
) -> Result<Response<ProxyBody>, Refusal> {
    compensate(plane, enf, parts, lease_id, conn)
        .await
        .map_err(|d| d.refusal)
}

pub async fn handle(
    call: &Call<'_>,
    enf: &Enforcement,
    parts: http::request::Parts,
    body: Incoming,
) -> Result<Response<ProxyBody>, Own> {
    let (state, conn, cx) = (&**call.state, &**call.conn, &call.cx);
    let path = parts.uri.path().to_owned();
    let rest = &path[PREFIX.len()..];
    let result: Result<_, Denied> = match (&parts.method, rest) {
        (&Method::POST, "") => match read_body(state.config.limits.max_body, body).await {
            Ok(b) => grant(state, enf, &parts, &b, conn)
                .await
                .map_err(Denied::from),
            Err(r) => Err(r.into()),
        },
        (&Method::GET, r) if r.starts_with('/') && !r[1..].contains('/') => {
            lookup(enf, &parts, &r[1..], conn)
                .await
                .map_err(Denied::from)
        }
        (&Method::POST, r) if r.starts_with('/') && r.ends_with("/compensate") => {
            let lease_id = &r[1..r.len() - "/compensate".len()];
            compensate(state, enf, &parts, lease_id, conn).await
        }
        (&Method::PUT, r) if r.starts_with('/') && r.ends_with("/inverse") => {
            let lease_id = &r[1..r.len() - "/inverse".len()];
            match read_body(state.config.limits.max_body, body).await {
                Ok(b) => stage_inverse(state, enf, lease_id, &b)
                    .await
                    .map_err(Denied::from),
                Err(r) => Err(r.into()),
            }
        }
        _ => Err(Refusal::new(
            ErrorCode::NotFound,
            "no lease-authority endpoint at this path",
        )
        .into()),
    };
    match result {
        Ok(resp) => Ok(resp),
        Err(denied) => Err(
            receipts::refuse_denied(state.recorder(), denied, cx, None, None)
                .await
                .into(),
        ),
    }
}

async fn read_body(max_body: u64, body: Incoming) -> Result<Bytes, Refusal> {
    body::read_request_body(body, max_body)
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
