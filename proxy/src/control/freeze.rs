//! The emergency stop on the admin listener (SPEC §14): `POST /admin/v1/freeze`,
//! `GET /admin/v1/freeze`, `DELETE /admin/v1/freeze/{id}`.
//!
//! A freeze and its removal are each an entry of the receipt log (kind `freeze`, `outcome`
//! `frozen` or `unfrozen`, naming who and the freeze), stored in one transaction with the
//! change itself, and in force here before the answer; other replicas of a shared store read
//! it within `context::FREEZE_POLL`. Bad input is a 400 problem and changes nothing.

use std::sync::Arc;

use http::{Response, StatusCode};
use hyper::body::Incoming;
use palisade_policy::freeze::{self, Freeze};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::ErrorCode;
use serde_json::{json, Value};

use crate::context::{Enforcement, Freezes, Plane};
use crate::enforce::escrow::problem;
use crate::net::body::{self, ProxyBody};
use crate::store::{Attachments, FreezeChange};

/// Largest freeze request body.
const MAX_BODY: u64 = 16 * 1024;

/// `POST /admin/v1/freeze` by `by` (the admin credential's name).
pub async fn make(
    plane: Arc<Plane>,
    req: http::Request<Incoming>,
    by: String,
) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return problem(
            ErrorCode::NotFound,
            "write enforcement is off: there is nothing to freeze",
        );
    };
    let bytes = match body::read_request_body(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(_) => return problem(ErrorCode::BadRequest, "the body must be at most 16 KiB"),
    };
    let parsed = palisade_policy::json::parse(&bytes, 8)
        .map_err(|_| "the body is not a single well-formed I-JSON document".to_owned())
        .and_then(|v| freeze::parse_request(&v, enf.clock.now_ms()));
    let mut request = match parsed {
        Ok(r) => r,
        Err(why) => return problem(ErrorCode::BadRequest, &why),
    };
    // Stored in the spelling writes are matched by; the 201 echoes it (SPEC §14).
    if let Some(value) = &request.value {
        let public_base = plane.config.public_base.as_deref();
        match freeze::canonical_value(request.scope, value, public_base) {
            Ok(v) => request.value = Some(v),
            Err(why) => return problem(ErrorCode::BadRequest, &why),
        }
    }
    let _one = enf.freezes.changes.lock().await;
    let now = enf.clock.now_ms();
    let in_force = enf.freezes.all().iter().filter(|f| f.in_force(now)).count();
    if in_force >= freeze::MAX_FREEZES {
        let why = format!(
            "{} freezes are in force: lift one first",
            freeze::MAX_FREEZES
        );
        return problem(ErrorCode::BadRequest, &why);
    }
    let id = uuid::Uuid::now_v7().to_string();
    let f = Freeze::made(id.clone(), request, by, now);
    let record = serde_json::to_vec(&f).unwrap_or_default();
    let made = f.clone();
    let apply = move |mut list: Vec<Freeze>| {
        list.push(made);
        list
    };
    match change(
        &enf,
        &f.id,
        &f.by,
        Some(record),
        apply,
        plane.rules_digest(),
    )
    .await
    {
        Ok(receipt) => {
            let mut doc = json!({"id": id, "freeze": f, "receipt": receipt});
            doc["freeze"]["in_force"] = json!(true);
            body::json_response(StatusCode::CREATED, &doc)
        }
        Err(resp) => resp,
    }
}

/// `DELETE /admin/v1/freeze/{id}` by `by`.
pub async fn lift(plane: Arc<Plane>, id: &str, by: String) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return problem(
            ErrorCode::NotFound,
            "write enforcement is off: there is nothing to freeze",
        );
    };
    let _one = enf.freezes.changes.lock().await;
    let stored = match stored(&enf).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    if !stored.iter().any(|f| f.id == id) {
        return problem(ErrorCode::NotFound, "no freeze with this id");
    }
    let gone = id.to_owned();
    let apply = move |list: Vec<Freeze>| list.into_iter().filter(|f| f.id != gone).collect();
    match change(&enf, id, &by, None, apply, plane.rules_digest()).await {
        Ok(receipt) => body::json_response(
            StatusCode::OK,
            &json!({"id": id, "lifted": true, "receipt": receipt}),
        ),
        Err(resp) => resp,
    }
}

/// `GET /admin/v1/freeze`: every freeze stored, oldest first, each with `in_force`.
pub async fn list(plane: Arc<Plane>) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return body::json_response(StatusCode::OK, &json!({"freezes": []}));
    };
    let stored = match stored(&enf).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let now = enf.clock.now_ms();
    let list: Vec<Value> = stored
        .iter()
        .map(|f| {
            let mut v = serde_json::to_value(f).unwrap_or(Value::Null);
            v["in_force"] = json!(f.in_force(now));
            v
        })
        .collect();
    body::json_response(StatusCode::OK, &json!({ "freezes": list }))
}

/// The freezes as the store has them (every replica's).
async fn stored(enf: &Enforcement) -> Result<Vec<Freeze>, Response<ProxyBody>> {
    match enf.store.freezes().await {
        Ok(s) => Ok(Freezes::decode(&s)),
        Err(_) => Err(problem(
            ErrorCode::StoreUnavailable,
            "the state store cannot be read",
        )),
    }
}

/// Stores the change with its receipt, then puts the store's list in force here (or, if the
/// store cannot be read back, `apply` on the list in force: the change is durable either way);
/// the sealed receipt's envelope.
async fn change(
    enf: &Enforcement,
    id: &str,
    by: &str,
    record: Option<Vec<u8>>,
    apply: impl FnOnce(Vec<Freeze>) -> Vec<Freeze>,
    rules_digest: Option<String>,
) -> Result<Value, Response<ProxyBody>> {
    let outcome = if record.is_some() {
        "frozen"
    } else {
        "unfrozen"
    };
    let body = ReceiptBody {
        outcome: Some(outcome.to_owned()),
        by: Some(by.to_owned()),
        freeze_id: Some(id.to_owned()),
        rules_digest,
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Freeze,
            enf.now_rfc3339(),
        )
    };
    let attach = Attachments {
        freeze: Some(FreezeChange {
            id: id.to_owned(),
            record,
        }),
        ..Attachments::default()
    };
    let unavailable = || {
        problem(
            ErrorCode::StoreUnavailable,
            "the state store cannot record the change",
        )
    };
    let sealed = match enf.seal(body, attach).await {
        Ok(Some(s)) => s,
        _ => return Err(unavailable()),
    };
    let list = match enf.store.freezes().await {
        Ok(s) => Freezes::decode(&s),
        Err(_) => apply(enf.freezes.all().as_ref().clone()),
    };
    enf.freezes.changed(list);
    tracing::warn!(freeze_id = id, by, outcome, "emergency stop changed");
    Ok(sealed.value)
}

/// With a shared store, reads the freezes every `context::FREEZE_POLL`, so that one made at
/// another replica holds here within that and one query. The embedded store has one sidecar:
/// its list changes only through this one's admin API.
pub fn spawn_poll(plane: Arc<Plane>) {
    let Some(enf) = plane.enforcement.clone() else {
        return;
    };
    if plane.config.store.kind != crate::config::StoreKind::Postgres {
        return;
    }
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(crate::context::FREEZE_POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let began = enf.freezes.generation();
            match enf.store.freezes().await {
                Ok(s) => enf.freezes.polled(began, Freezes::decode(&s)),
                // The list in force stays: a store that cannot be read refuses writes anyway.
                Err(e) => tracing::debug!(error = %e, "freezes not read"),
            }
        }
    });
}

/// `GET /admin/v1/budgets`: the `[budgets]` rules in force (SPEC §14). What each has spent is
/// in `palisade_budget_spent_total` and `palisade_budget_refusals_total`.
pub fn budgets(plane: &Plane) -> serde_json::Value {
    use palisade_policy::budget::Dim;
    let rules: Vec<serde_json::Value> = plane
        .enforcement
        .as_ref()
        .map(|e| e.budgets.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let per: Vec<&str> = r
                .per
                .iter()
                .map(|d| match d {
                    Dim::Caller => "caller",
                    Dim::Operation => "operation",
                    Dim::Resource => "resource",
                })
                .collect();
            serde_json::json!({"name": r.name, "per": per, "limit": r.limit,
                "window_ms": r.window_ms})
        })
        .collect();
    serde_json::json!({ "rules": rules })
}
