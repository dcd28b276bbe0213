//! Operator decisions on held writes (SPEC §5.4): `POST /admin/v1/escrow/{id}/approve|reject`
//! and `GET /admin/v1/escrow`. A release judges the held request again under the bundle in
//! force, as the protocol that carried it (an HTTP write or an MCP tool call); holding and the
//! escrow record itself are `enforce::escrow`.

use std::sync::Arc;

use http::{Method, Response, StatusCode};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::ErrorCode;
use serde_json::{json, Value};

use crate::context::{Enforcement, Outcome, Plane, WriteContext};
use crate::enforce::delivery::Keep;
use crate::enforce::engine;
use crate::enforce::escrow::{load, not_held, problem, rebuild, status_doc, LIST_SCAN};
use crate::enforce::receipts;
use crate::enforce::write::HttpLeg;
use crate::enforce::written::Written;
use crate::mcp::leg::McpLeg;
use crate::net::body::{self, ProxyBody};
use crate::store::{Attachments, EscrowRecord, EscrowState, EscrowUpdate, HeldProtocol};

/// One decision at a time in this process: an approval reads the names so far and adds one.
static DECISIONS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `POST /admin/v1/escrow/{id}/approve` by `by`: an approval (a receipt of kind `approval`
/// naming the approver, bound to the escrow, its lease and its request digest); once
/// `escrow.approvals_required` distinct names have approved, the write is released and every
/// check runs again. The same name twice counts once: the repeat is refused.
pub async fn approve(
    plane: Arc<Plane>,
    id: String,
    by: String,
    body: hyper::body::Incoming,
) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return problem(ErrorCode::NotFound, "write enforcement is off");
    };
    let said = match Said::read(body).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    // The decision runs to its end even if the operator's connection goes away.
    let task = tokio::spawn(async move {
        let one = DECISIONS.lock().await;
        let rec = match load(&enf, &id).await {
            Ok(r) if r.state == EscrowState::Held => r,
            Ok(_) => return not_held(),
            Err(resp) => return resp,
        };
        if let Err(why) = said.names(&rec) {
            return problem(ErrorCode::BadRequest, &why);
        }
        // A lease that ran out cannot carry the write any more: no approval is recorded for
        // it (it could never count); the release is refused at once, as on any release
        // after expiry (state `refused`, `ERR_LEASE_EXPIRED`, its receipt and drift event).
        if crate::control::escrow_view::expired(&rec, enf.clock.now_ms()) {
            drop(one);
            return release(&plane, &enf, &id).await;
        }
        if rec.approvals.contains(&by) {
            return problem(
                ErrorCode::ApprovalRepeated,
                "this approver has approved this write already: one name counts once",
            );
        }
        let mut approvals = rec.approvals.clone();
        approvals.push(by.clone());
        let record = EscrowRecord {
            approvals,
            ..rec.clone()
        };
        // An operator's rule may ask for its own number of approvers (SPEC §15).
        let required = record
            .approvals_required
            .map_or(plane.config.escrow.approvals, |n| n as usize);
        let enough = record.approvals.len() >= required;
        let decision = Decision {
            outcome: "approved",
            by: &by,
            reason: said.reason.clone(),
            rules_digest: plane.rules_digest(),
        };
        if let Err(resp) = decide(&enf, &rec, decision, record).await {
            return resp;
        }
        if !enough {
            return match load(&enf, &id).await {
                Ok(rec) => body::json_response(StatusCode::ACCEPTED, &status_doc(&rec)),
                Err(resp) => resp,
            };
        }
        // The release (held → releasing, compare-and-set) needs no other decision held back.
        drop(one);
        release(&plane, &enf, &id).await
    });
    task.await
        .unwrap_or_else(|_| problem(ErrorCode::Internal, "the release could not be completed"))
}

/// What an approval or a rejection says of itself (its optional JSON body):
/// `{"request_digest", "contract_digest"}` as the operator saw them, and a `reason`.
struct Said {
    saw: Value,
    reason: Option<String>,
}

/// Longest reason kept, in characters.
const MAX_REASON: usize = 280;

impl Said {
    async fn read(body: hyper::body::Incoming) -> Result<Said, Response<ProxyBody>> {
        let saw = match body::read_request_body(body, 16 * 1024).await {
            Ok(b) if b.is_empty() => Value::Null,
            Ok(b) => match palisade_policy::json::parse(&b, 4) {
                Ok(v @ Value::Object(_)) => v,
                _ => {
                    return Err(problem(
                        ErrorCode::BadRequest,
                        "a decision's body is a JSON object",
                    ))
                }
            },
            Err(_) => {
                return Err(problem(
                    ErrorCode::BadRequest,
                    "a decision's body is at most 16 KiB",
                ))
            }
        };
        let reason = match saw.get("reason") {
            None | Some(Value::Null) => None,
            Some(Value::String(r)) if r.chars().count() <= MAX_REASON => {
                Some(r.trim().to_owned()).filter(|r| !r.is_empty())
            }
            Some(_) => {
                return Err(problem(
                    ErrorCode::BadRequest,
                    "a decision's reason is text of at most 280 characters",
                ))
            }
        };
        Ok(Said { saw, reason })
    }

    /// Bound to the exact write: a decision that names another request or contract than the
    /// one held decides nothing.
    fn names(&self, rec: &EscrowRecord) -> Result<(), String> {
        for (member, held) in [
            ("request_digest", &rec.request_digest),
            ("contract_digest", &rec.contract_digest),
        ] {
            if let Some(named) = self.saw.get(member) {
                if named.as_str() != held.as_deref() {
                    return Err(format!("the decision's {member} is not the held write's"));
                }
            }
        }
        Ok(())
    }
}

/// A decision as its receipt names it.
struct Decision<'a> {
    outcome: &'static str,
    by: &'a str,
    reason: Option<String>,
    rules_digest: Option<String>,
}

/// An approval or a rejection: its receipt (kind `approval`), stored with the escrow's new
/// record if the escrow is still held.
async fn decide(
    enf: &Enforcement,
    rec: &EscrowRecord,
    decision: Decision<'_>,
    record: EscrowRecord,
) -> Result<(), Response<ProxyBody>> {
    let request_digest = rec.request_digest.clone();
    let body = ReceiptBody {
        outcome: Some(decision.outcome.into()),
        rules_digest: decision.rules_digest,
        approver: Some(decision.by.to_owned()),
        reason: decision.reason,
        escrow_id: Some(rec.escrow_id.clone()),
        lease_id: Some(rec.lease_id.clone()),
        method: rec.request.as_ref().map(|r| r.method.clone()),
        operation: rec.operation_key.clone(),
        rule: rec.rule.clone(),
        request_digest,
        trace_id: Some(rec.trace_id.clone()),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Approval,
            enf.now_rfc3339(),
        )
    };
    let attach = Attachments {
        escrow: Some(EscrowUpdate {
            id: rec.escrow_id.clone(),
            expect: Some(EscrowState::Held),
            record,
            expires_at_ms: None,
        }),
        ..Attachments::default()
    };
    match enf.seal(body, attach).await {
        Ok(Some(_)) => Ok(()),
        // Another replica's decision came first: decided, or (still held) approved by
        // someone else meanwhile, so this approval was counted against a stale list.
        Ok(None) => Err(match load(enf, &rec.escrow_id).await {
            Ok(now) if now.state == EscrowState::Held => problem(
                ErrorCode::EscrowNotHeld,
                "the escrow's approvals changed meanwhile (another replica): read it again and decide again",
            ),
            _ => not_held(),
        }),
        Err(_) => Err(problem(
            ErrorCode::StoreUnavailable,
            "the state store cannot record the decision",
        )),
    }
}

async fn release(plane: &Arc<Plane>, enf: &Arc<Enforcement>, id: &str) -> Response<ProxyBody> {
    let rec = match load(enf, id).await {
        Ok(r) => r,
        Err(resp) => return resp,
    };
    if rec.state != EscrowState::Held {
        return not_held();
    }
    let releasing = EscrowRecord {
        state: EscrowState::Releasing,
        released_at: Some(enf.now_rfc3339()),
        ..rec.clone()
    };
    let update = EscrowUpdate {
        id: id.to_owned(),
        expect: Some(EscrowState::Held),
        record: releasing.clone(),
        expires_at_ms: None,
    };
    match enf.store.escrow_put(update).await {
        Ok(true) => {}
        Ok(false) => return not_held(),
        Err(_) => {
            return problem(
                ErrorCode::StoreUnavailable,
                "the state store cannot record the release",
            )
        }
    }
    let decided = releasing.decided();
    let held = rec.request.as_ref();
    let mut cx = WriteContext::new(
        held.and_then(|r| Method::from_bytes(r.method.as_bytes()).ok())
            .unwrap_or(Method::POST),
        rec.trace_id.as_str().into(),
        rec.operation.clone(),
    );
    // The release's receipts name the caller whose write it was.
    cx.caller = rec.caller.clone();
    cx.facing = rec.facing.clone();
    cx.rules_digest = plane.rules.load_full().map(|r| r.digest_text().to_owned());
    let finish_refused = |code: &str, receipt: Option<Value>| EscrowUpdate {
        id: id.to_owned(),
        expect: Some(EscrowState::Releasing),
        record: EscrowRecord {
            state: EscrowState::Refused,
            code: Some(code.to_owned()),
            receipt,
            ..decided.clone()
        },
        expires_at_ms: None,
    };
    let Some((parts, bytes, conn, mut who)) = held.and_then(rebuild) else {
        tracing::error!(escrow_id = %id, "held request unreadable; refusing its release");
        let _ = enf
            .store
            .escrow_put(finish_refused(ErrorCode::Internal.as_str(), None))
            .await;
        return problem(ErrorCode::Internal, "the held request cannot be read");
    };
    who.origin = held.and_then(|r| r.origin.clone());
    who.caller = rec.caller.clone();
    let keep = Keep::Escrow {
        id: id.to_owned(),
        record: Box::new(decided.clone()),
    };
    // Released under the bundle in force now: its contract is what the write must meet. The
    // held request is judged again as the protocol that carried it.
    let bundle = plane.bundle.load_full();
    let conn = Arc::new(conn);
    let written = if let Some(refusal) =
        crate::control::escrow_expiry::ran_out(&rec, enf.clock.now_ms())
    {
        // The rule that held it gave it until then (SPEC §15): it is rejected, not released.
        let extra = [("rule", Value::from(rec.rule.clone()))];
        let evidence = receipts::Evidence::with_extra(&extra);
        Written::refused(receipts::record(plane.recorder(), refusal, &cx, evidence).await)
    } else if held.is_some_and(|r| r.protocol == HeldProtocol::Mcp) {
        let held = McpLeg::held(
            &bytes,
            &parts.headers,
            plane.config.limits.max_json_depth,
            bundle.as_deref(),
        );
        match held {
            Ok(leg) => {
                let w = engine::Write {
                    parts,
                    body: bytes,
                    cx,
                    bundle,
                    grant: None,
                    leg,
                };
                engine::release(plane, enf, conn, w, &who, keep).await
            }
            Err(refusal) => {
                let evidence = receipts::Evidence {
                    body: Some(&bytes),
                    ..receipts::Evidence::default()
                };
                Written::refused(receipts::record(plane.recorder(), refusal, &cx, evidence).await)
            }
        }
    } else {
        let leg = HttpLeg::of(bundle.as_deref(), &parts);
        let w = engine::Write {
            parts,
            body: bytes,
            cx,
            bundle,
            grant: None,
            leg,
        };
        engine::release(plane, enf, conn, w, &who, keep).await
    };
    // A refusal, not a failure after the release was sent (its escrow says released).
    let refused = written
        .code
        .filter(|_| matches!(written.outcome, Outcome::Refused));
    let receipt = written.receipt;
    // Read to its end: a streamed answer is committed by its relay before the stream ends.
    let _ = body::collect_proxy(written.resp.into_body(), plane.config.limits.max_response).await;
    // A refused release records its code and rejection receipt in the escrow, from the
    // refusal itself.
    if let Some(code) = refused {
        let update = finish_refused(code.as_str(), receipt);
        if let Err(e) = enf.store.escrow_put(update).await {
            tracing::error!(error = %e, escrow_id = %id, "escrow refusal not recorded");
        }
    }
    // An approval whose release was refused (the lease ran out, the contract in force now
    // refuses the write, a freeze) released nothing: 409, with the escrow's final document
    // (state `refused`, the `code` and the rejection receipt), so a script that reads only the
    // status does not take it for a release (issue 54).
    let status = if refused.is_some() {
        StatusCode::CONFLICT
    } else {
        StatusCode::OK
    };
    match load(enf, id).await {
        Ok(rec) => body::json_response(status, &status_doc(&rec)),
        Err(resp) => resp,
    }
}

/// `POST /admin/v1/escrow/{id}/reject` by `by`: one rejection rejects; its receipt (kind
/// `approval`, outcome `rejected`) names the approver.
pub async fn reject(
    plane: Arc<Plane>,
    id: String,
    by: String,
    body: hyper::body::Incoming,
) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return problem(ErrorCode::NotFound, "write enforcement is off");
    };
    let said = match Said::read(body).await {
        Ok(s) => s,
        Err(resp) => return resp,
    };
    let _one = DECISIONS.lock().await;
    let rec = match load(&enf, &id).await {
        Ok(r) if r.state == EscrowState::Held => r,
        Ok(_) => return not_held(),
        Err(resp) => return resp,
    };
    if let Err(why) = said.names(&rec) {
        return problem(ErrorCode::BadRequest, &why);
    }
    let rejected = EscrowRecord {
        state: EscrowState::Rejected,
        rejected_at: Some(enf.now_rfc3339()),
        ..rec.decided()
    };
    let decision = Decision {
        outcome: "rejected",
        by: &by,
        reason: said.reason,
        rules_digest: plane.rules_digest(),
    };
    if let Err(resp) = decide(&enf, &rec, decision, rejected).await {
        return resp;
    }
    match load(&enf, &id).await {
        Ok(rec) => body::json_response(StatusCode::OK, &status_doc(&rec)),
        Err(resp) => resp,
    }
}

/// `GET /admin/v1/escrow`: escrows not yet decided (held, or left releasing by a crash).
pub async fn list(plane: Arc<Plane>) -> Response<ProxyBody> {
    let Some(enf) = plane.enforcement.clone() else {
        return body::json_response(StatusCode::OK, &json!({"escrows": []}));
    };
    match enf.store.escrows(LIST_SCAN).await {
        Ok(all) => {
            let open: Vec<Value> = all
                .iter()
                .filter(|r| r.state.is_open())
                .map(status_doc)
                .collect();
            body::json_response(StatusCode::OK, &json!({"escrows": open}))
        }
        Err(_) => problem(
            ErrorCode::StoreUnavailable,
            "the state store cannot be read",
        ),
    }
}
