//! RCNS answers: refusals are problem documents with the seed's status and `reason`,
//! receipted with a drift event like every other refusal; approvals and inventory are JSON.

use http::{Response, StatusCode};
use palisade_policy::Refusal;
use serde_json::Value;

use crate::context::{Recorder, WriteContext};
use crate::enforce::own::{Own, Staged};
use crate::enforce::receipts;
use crate::net::body::{self, ProxyBody};

/// A receipted refusal with `extra` members.
pub async fn refusal(
    rec: Recorder<'_>,
    cx: &WriteContext,
    r: Refusal,
    extra: Vec<(&'static str, Value)>,
) -> Own {
    let evidence = receipts::Evidence::with_extra(&extra);
    receipts::record(rec, r, cx, evidence).await.into()
}

/// [`refusal`], as what a stage comes to.
pub async fn refused(
    rec: Recorder<'_>,
    cx: &WriteContext,
    r: Refusal,
    extra: Vec<(&'static str, Value)>,
) -> Staged {
    Err(refusal(rec, cx, r, extra).await)
}

/// A JSON answer with the seed's status (263 is not a status `http` names, but a valid one).
pub fn json(status: u16, doc: &Value) -> Response<ProxyBody> {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    body::json_response(status, doc)
}
