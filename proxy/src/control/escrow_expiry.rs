//! Held writes an operator's rule gave until a time (SPEC §15, `expires`): undecided by then,
//! each is rejected, with a rejection receipt naming the rule and a `policy` drift event. Every
//! replica looks; the store's compare-and-set on the escrow (held → rejected, in the receipt's
//! own transaction) lets exactly one of them reject it and append its receipt.

use std::sync::Arc;
use std::time::Duration;

use palisade_policy::drift::{DriftEvent, EventContext};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{Enforcement, Plane};
use crate::store::{Attachments, EscrowRecord, EscrowState, EscrowUpdate};

/// How often held writes are looked at: a hold ends within this much of its `expires`.
pub const POLL: Duration = Duration::from_secs(1);
/// Most escrows read per look (oldest first: ids are time-ordered).
const SCAN: usize = 1000;

/// Starts the look-out when rules are configured (only a rule's hold has an `expires`).
pub fn spawn(plane: Arc<Plane>) {
    if plane.config.rules.is_none() {
        return;
    }
    let Some(enf) = plane.enforcement.clone() else {
        return;
    };
    let looks = metrics::counter!(crate::telemetry::HOLD_EXPIRY_LOOKS);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Ok(escrows) = enf.store.escrows(SCAN).await else {
                continue;
            };
            looks.increment(1);
            let now = enf.clock.now_ms();
            for rec in escrows {
                if rec.state == EscrowState::Held
                    && rec.hold_expires_at_ms.is_some_and(|e| e <= now)
                {
                    expire(&plane, &enf, rec).await;
                }
            }
        }
    });
}

/// The refusal of a write held past its rule's `expires`.
pub fn ran_out(rec: &EscrowRecord, now_ms: i64) -> Option<Refusal> {
    let until = rec.hold_expires_at_ms.filter(|e| *e <= now_ms)?;
    Some(Refusal::new(
        ErrorCode::PolicyDenied,
        format!(
            "the operator's rule held this write until {} and it was not decided by then",
            palisade_policy::lease::format_rfc3339_ms(until)
        ),
    ))
}

async fn expire(plane: &Plane, enf: &Enforcement, rec: EscrowRecord) {
    let Some(refusal) = ran_out(&rec, enf.clock.now_ms()) else {
        return;
    };
    let body = ReceiptBody {
        outcome: Some("expired".into()),
        code: Some(refusal.code.as_str().to_owned()),
        rule: rec.rule.clone(),
        rules_digest: plane.rules.load_full().map(|r| r.digest_text().to_owned()),
        escrow_id: Some(rec.escrow_id.clone()),
        lease_id: Some(rec.lease_id.clone()),
        method: rec.request.as_ref().map(|r| r.method.clone()),
        operation: rec.operation_key.clone(),
        request_digest: rec.request_digest.clone(),
        trace_id: Some(rec.trace_id.clone()),
        caller: rec.caller.clone(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Rejection,
            enf.now_rfc3339(),
        )
    };
    let rejected = EscrowRecord {
        state: EscrowState::Rejected,
        rejected_at: Some(enf.now_rfc3339()),
        code: Some(refusal.code.as_str().to_owned()),
        ..rec.decided()
    };
    let attach = Attachments {
        escrow: Some(EscrowUpdate {
            id: rec.escrow_id.clone(),
            expect: Some(EscrowState::Held),
            record: rejected,
            expires_at_ms: None,
        }),
        ..Attachments::default()
    };
    match enf.seal(body, attach).await {
        Ok(Some(_)) => {}
        // Another replica (or an operator) decided it first.
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, escrow_id = %rec.escrow_id, "an expired hold could not be rejected; the next look tries again");
            return;
        }
    }
    plane.metrics.refusal(refusal.code);
    if let Some(mut event) = DriftEvent::for_refusal(
        &refusal,
        EventContext {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: enf.now_rfc3339(),
            trace_id: rec.trace_id.clone(),
            observed_identifier: rec.operation_key.clone().or(Some(rec.operation.clone())),
            expected_digest: rec.contract_digest.clone(),
            caller: rec.caller.clone(),
            ..EventContext::default()
        },
    ) {
        if let Some(rule) = &rec.rule {
            event.diagnostics.insert("rule".into(), rule.clone().into());
        }
        enf.drift.emit(&event);
    }
}
