//! Operator control of synthesized contracts (seed 000 §3.5: "operators that want to force
//! callers off an old recipe version use the contract revocation surface"):
//! `GET /admin/v1/rcns/contracts` lists every live contract, revoked ones included;
//! `POST /admin/v1/rcns/contracts/{synthesis_id}/revoke` revokes one. A revoked contract is
//! refused on use with 464 `contract-revoked` until it expires, so the agent is told why.

use http::{Response, StatusCode};
use palisade_rich::rcns::SynthesizedContract;
use serde_json::{json, Value};

use crate::context::Plane;
use crate::net::body::{self, ProxyBody};
use crate::store::{RcnsKind, RcnsPutMode};

fn answer(status: StatusCode, doc: Value) -> Response<ProxyBody> {
    body::json_response(status, &doc)
}

fn unavailable(e: &crate::store::StoreError) -> Response<ProxyBody> {
    tracing::warn!(error = %e, "rcns admin: the store cannot be used");
    answer(
        StatusCode::SERVICE_UNAVAILABLE,
        json!({"error": "the state store does not answer; nothing was changed"}),
    )
}

pub async fn list(plane: &Plane) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": "write enforcement is off"}),
        );
    };
    let limit = crate::rcns::MAX_ADMIN_LISTED;
    match enf.store.rcns_list(RcnsKind::Contract, None, limit).await {
        Ok(records) => {
            let list: Vec<Value> = records
                .iter()
                .filter_map(|r| SynthesizedContract::from_record(&r.body))
                .map(|c| c.view())
                .collect();
            answer(StatusCode::OK, json!({"contracts": list}))
        }
        Err(e) => unavailable(&e),
    }
}

pub async fn revoke(plane: &Plane, id: &str) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return answer(
            StatusCode::NOT_FOUND,
            json!({"error": "write enforcement is off"}),
        );
    };
    let mut record = match enf.store.rcns_get(RcnsKind::Contract, id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            return answer(
                StatusCode::NOT_FOUND,
                json!({"error": "no live contract with this synthesis_id"}),
            )
        }
        Err(e) => return unavailable(&e),
    };
    let Some(mut contract) = SynthesizedContract::from_record(&record.body) else {
        return answer(
            StatusCode::INTERNAL_SERVER_ERROR,
            json!({"error": "the stored contract cannot be read"}),
        );
    };
    if !contract.revoked {
        contract.revoked = true;
        record.body = contract.to_record();
        if let Err(e) = enf.store.rcns_put(record, RcnsPutMode::Replace).await {
            return unavailable(&e);
        }
        enf.drift.lifecycle(json!({
            "event": "rcns_contract_revoked",
            "eventId": uuid::Uuid::now_v7().to_string(),
            "timestamp": enf.now_rfc3339(),
            "synthesis_id": contract.synthesis_id,
            "contract_hash": contract.contract_hash(),
            "originating_agent_id": contract.originating_agent_id,
        }));
    }
    answer(StatusCode::OK, contract.view())
}
