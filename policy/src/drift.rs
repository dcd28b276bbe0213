//! Drift events (SPEC §8, RICH §14.1): what every refusal and every contract or identity
//! violation reports to the operator.
//!
//! An event names what was expected and where the violation is, and carries the digest of the
//! offending payload (`evidenceDigest`), never the payload or any value from it: events leave
//! the sidecar (files, webhooks) and must not become a data leak.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::codes::{DriftCategory, Refusal};
use crate::digest::{Sha256Digest, Spelling};

/// What Palisade did about the violation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Blocked,
    Notify,
    Quarantined,
    Fallback,
}

/// One drift event, serialised with RICH's camelCase member names.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftEvent {
    /// UUID v7 (time-ordered), made by the caller.
    pub event_id: String,
    /// RFC 3339.
    pub timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binding_id: Option<String>,
    pub trace_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_digest: Option<String>,
    /// What was observed: an operation (`PUT /api/v2/items/{id}`), a tool name, a key id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub observed_identifier: Option<String>,
    /// A JSON pointer into the schema or payload, e.g. `/properties/qty`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation_location: Option<String>,
    pub category: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence_digest: Option<String>,
    pub action_taken: Action,
    /// The refusal's code; left out of an event that reports what a rule would have done
    /// other than deny (SPEC §15: a hold or an allow has no code).
    #[serde(skip_serializing_if = "str::is_empty")]
    pub code: &'static str,
    /// Who acted, as admission knows them (`sub:sha256:…`), when it does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    /// Rule names and sub-reasons only, never values.
    pub diagnostics: Map<String, Value>,
}

/// The identifiers and context a refusal's event needs from the caller.
#[derive(Debug, Clone, Default)]
pub struct EventContext {
    pub event_id: String,
    pub timestamp: String,
    pub trace_id: String,
    pub binding_id: Option<String>,
    pub observed_identifier: Option<String>,
    pub expected_digest: Option<String>,
    /// The offending payload (request body, lease, response): only its digest is kept.
    pub evidence: Option<Vec<u8>>,
    /// Who acted (`sub:sha256:…`), when admission verified a token.
    pub caller: Option<String>,
}

impl DriftEvent {
    /// The event for a refusal, or `None` for codes that are not drift (an upstream outage).
    pub fn for_refusal(refusal: &Refusal, cx: EventContext) -> Option<DriftEvent> {
        let category: DriftCategory = refusal.code.category()?;
        let mut diagnostics = Map::new();
        diagnostics.insert("rule".into(), Value::String(refusal.detail.to_string()));
        if let Some(reason) = refusal.reason {
            diagnostics.insert("reason".into(), Value::String(reason.into()));
        }
        Some(DriftEvent {
            event_id: cx.event_id,
            timestamp: cx.timestamp,
            binding_id: cx.binding_id,
            trace_id: cx.trace_id,
            expected_digest: cx.expected_digest,
            observed_identifier: cx.observed_identifier,
            violation_location: refusal.location.clone(),
            category: category.as_str(),
            evidence_digest: cx
                .evidence
                .map(|e| Sha256Digest::of(&e).spelled(Spelling::ShaDash256)),
            action_taken: Action::Blocked,
            code: refusal.code.as_str(),
            diagnostics,
            caller: cx.caller,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codes::ErrorCode;

    #[test]
    fn a_refusal_becomes_an_event_without_its_payload() {
        let secret = b"{\"card\":\"4111111111111111\"}".to_vec();
        let r = Refusal::new(ErrorCode::StaleFenceEpoch, "state changed")
            .with_reason("pre-image-mismatch");
        let ev = DriftEvent::for_refusal(
            &r,
            EventContext {
                event_id: "0190f0c8-0000-7000-8000-000000000000".into(),
                timestamp: "2026-12-02T12:00:00.000Z".into(),
                trace_id: "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                observed_identifier: Some("PUT /api/v2/items/1".into()),
                evidence: Some(secret.clone()),
                ..Default::default()
            },
        )
        .unwrap();
        let text = serde_json::to_string(&ev).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["category"], "fence");
        assert_eq!(v["actionTaken"], "blocked");
        assert_eq!(v["code"], "ERR_STALE_FENCE_EPOCH");
        assert_eq!(v["diagnostics"]["reason"], "pre-image-mismatch");
        assert_eq!(
            v["evidenceDigest"],
            Sha256Digest::of(&secret).spelled(Spelling::ShaDash256)
        );
        assert_eq!(v["traceId"], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(
            !text.contains("4111"),
            "no payload value in the event: {text}"
        );
    }

    #[test]
    fn failures_that_are_not_drift_make_no_event() {
        let r = Refusal::new(ErrorCode::UpstreamUnavailable, "down");
        assert!(DriftEvent::for_refusal(&r, EventContext::default()).is_none());
    }
}
