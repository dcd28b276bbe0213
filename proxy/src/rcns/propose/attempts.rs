//! What a PROPOSE leaves besides its answer: the attempt, kept for `INSPECT
//! target=rcns-attempt` (seed 000), and the count of an agent's rejections of one task, after
//! which it is told to escalate. Both best effort: a store that cannot keep them changes no
//! answer.

use palisade_policy::Refusal;
use palisade_rich::rcns::{Proposal, SynthesizedContract};
use serde_json::json;

use super::{ms, Ask, ATTEMPTS_PER_AGENT};
use crate::store::{RcnsKind, RcnsPutMode, RcnsRecord};

impl Ask<'_> {
    /// Keeps the attempt for INSPECT target=rcns-attempt. Best effort: an attempt that cannot
    /// be kept does not change the answer.
    pub(super) async fn keep_attempt(
        &self,
        p: Option<&Proposal>,
        outcome: Result<&SynthesizedContract, &Refusal>,
    ) {
        let (status, code, reason, synthesis_id) = match outcome {
            Ok(c) => (263, None, None, Some(c.synthesis_id.clone())),
            Err(r) => (r.status(), Some(r.code.as_str()), r.reason, None),
        };
        let valid = p.filter(|p| {
            palisade_rich::rcns::recipes::is_method(&p.method)
                && palisade_rich::rcns::recipes::is_path(&p.path)
        });
        let body = json!({
            "attempt_id": self.attempt_id,
            "agent_id": self.caller.agent_id,
            "task_id": p.and_then(|p| p.task_id.clone()),
            "form": p.map(|p| p.form),
            "method": valid.map(|p| p.method.clone()),
            "path": valid.map(|p| p.path.clone()),
            "status": status,
            "code": code,
            "reason": reason,
            "synthesis_id": synthesis_id,
            "at": self.enf.now_rfc3339(),
        });
        let ttl = ms(self.rcns.config.session_ttl);
        let record = RcnsRecord {
            kind: RcnsKind::Attempt,
            key: self.attempt_id.clone(),
            owner: self.caller.agent_id.clone(),
            body,
            expires_ms: self.enf.clock.now_ms().saturating_add(ttl),
        };
        let mode = RcnsPutMode::Create {
            per_owner: ATTEMPTS_PER_AGENT,
            total: self.rcns.config.max_contracts,
        };
        if let Err(e) = self.enf.store.rcns_put(record, mode).await {
            tracing::warn!(error = %e, "rcns: an attempt could not be kept");
        }
    }

    /// Counts one more rejection of (agent, task); the new count (0 if it cannot be kept).
    pub(super) async fn count_rejection(&self, task: &str) -> u64 {
        let key = format!("{}\n{task}", self.caller.agent_id);
        let store = &self.enf.store;
        let before = match store.rcns_get(RcnsKind::Rejections, &key).await {
            Ok(r) => r.and_then(|r| r.body["count"].as_u64()).unwrap_or(0),
            Err(_) => return 0,
        };
        let n = before + 1;
        let ttl = ms(self.rcns.config.session_ttl);
        let record = RcnsRecord {
            kind: RcnsKind::Rejections,
            key,
            owner: self.caller.agent_id.clone(),
            body: json!({"count": n}),
            expires_ms: self.enf.clock.now_ms().saturating_add(ttl),
        };
        match store.rcns_put(record, RcnsPutMode::Replace).await {
            Ok(_) => n,
            Err(_) => 0,
        }
    }
}
