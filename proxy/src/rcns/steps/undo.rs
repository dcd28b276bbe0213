//! A composition that fails part-way (seed 000 §3.1, all or nothing): the steps that reached
//! the SoR are compensated, last first, and the answer says which were and whether the
//! whole was undone; the `rcns_contract_invoked` event and metric either way.

use serde_json::{json, Value};

use super::{Answer, Done, Run};
use crate::net::body;
use crate::rcns::answer::refused;
use palisade_policy::Refusal;

impl Run {
    /// Compensates `done`, last first, and answers with the step's failure.
    pub(super) async fn fail(
        &self,
        at: usize,
        r: Refusal,
        mut extra: Vec<(&'static str, Value)>,
        done: Vec<Done>,
    ) -> Answer {
        let mut compensated = Vec::with_capacity(done.len());
        let mut whole = true;
        for d in done.iter().rev() {
            let c = crate::authority::compensate_lease(
                &self.state,
                &self.enf,
                &self.parts,
                &d.lease_id,
                &self.conn,
            )
            .await;
            let entry = match c {
                Ok(resp) => {
                    let ok = resp.status().is_success();
                    let b = body::collect_proxy(resp.into_body(), 1 << 20)
                        .await
                        .unwrap_or_default();
                    let v: Value = serde_json::from_slice(&b).unwrap_or(Value::Null);
                    whole &= ok;
                    json!({"lease_id": d.lease_id, "upstream_status": v["upstream_status"], "receipt": v["receipt"]})
                }
                Err(refusal) => {
                    whole = false;
                    json!({"lease_id": d.lease_id, "code": refusal.code.as_str()})
                }
            };
            compensated.push(entry);
        }
        let receipts: Vec<Value> = done.iter().map(|d| d.receipt.clone()).collect();
        extra.push(("step", json!(at)));
        extra.push(("receipts", Value::Array(receipts)));
        extra.push(("compensated", Value::Array(compensated)));
        extra.push(("all_or_nothing", json!(whole)));
        let outcome = if done.is_empty() {
            "failed"
        } else if whole {
            "compensated"
        } else {
            "partial"
        };
        self.invoked(outcome, done.len());
        refused(self.state.recorder(), &self.cx, r, extra).await
    }

    /// The `rcns_contract_invoked` event and metric, named by the contract's attribution
    /// (its hash computed once, when the invocation began).
    pub(super) fn invoked(&self, outcome: &'static str, steps: usize) {
        if let Some(a) = &self.cx.attribution {
            self.enf.drift.lifecycle(json!({
                "event": "rcns_contract_invoked",
                "eventId": uuid::Uuid::now_v7().to_string(),
                "timestamp": self.enf.now_rfc3339(),
                "traceId": self.cx.trace_id,
                "synthesis_id": a.synthesis_id,
                "contract_hash": a.contract_hash,
                "outcome": outcome,
                "steps": steps,
            }));
        }
        metrics::counter!("palisade_rcns_invocations_total", "outcome" => outcome).increment(1);
    }
}
