//! The candidate bundle beside the one in force (SPEC §15): each write is judged by both, by
//! the same judge (`verdict`: contracts and rules, no lease or fence), before its checks. The
//! pair is counted; a disagreement is a `shadow` drift event naming both decisions and the
//! candidate's digests. Nothing of it reaches the write's own decision.

use palisade_policy::drift::{Action, DriftEvent};
use palisade_policy::DriftCategory;
use palisade_rich::Bundle;
use palisade_rules::RuleSet;

use crate::config::UnboundWrites;
use crate::context::{Candidate, Plane, WriteContext};
use crate::enforce::verdict::{self, Judges, Shape};
use crate::telemetry::SHADOW_DISAGREEMENTS;

/// The bundle and rules in force for this write.
pub(crate) struct InForce<'a> {
    pub bundle: Option<&'a Bundle>,
    pub rules: Option<&'a RuleSet>,
}

pub(crate) fn compare(
    plane: &Plane,
    cx: &WriteContext,
    c: &Candidate,
    now: InForce<'_>,
    shape: &Shape<'_>,
) {
    let judges = |bundle, rules| Judges {
        bundle,
        rules,
        unbound_denied: plane.config.unbound_writes == UnboundWrites::Deny,
        depth: plane.config.limits.max_json_depth,
        now_ms: plane
            .enforcement
            .as_ref()
            .map_or_else(crate::clock::WallClock::now_ms, |e| e.clock.now_ms()),
    };
    // Read once (the body parsed once) for both judges.
    let read = verdict::Read::of(shape, plane.config.limits.max_json_depth);
    let (operation, in_force) = verdict::judge(judges(now.bundle, now.rules), &read);
    let candidate_rules = c.rules.as_ref().or(now.rules);
    let (_, candidate) = verdict::judge(judges(Some(&c.bundle), candidate_rules), &read);
    let (f, k) = (in_force.label(), candidate.label());
    c.count(&operation, &f, &k);
    if f == k {
        return;
    }
    metrics::counter!(SHADOW_DISAGREEMENTS).increment(1);
    let Some(enf) = plane.enforcement.as_deref() else {
        return;
    };
    let mut diagnostics = serde_json::Map::new();
    diagnostics.insert("inForce".into(), f.into());
    diagnostics.insert("candidate".into(), k.into());
    if let Some(r) = candidate_rules {
        diagnostics.insert("candidateRules".into(), r.digest_text().to_owned().into());
    }
    enf.drift.emit(&DriftEvent {
        event_id: uuid::Uuid::now_v7().to_string(),
        timestamp: enf.now_rfc3339(),
        binding_id: Some(c.bundle.binding_id.clone()),
        trace_id: cx.trace_id.to_string(),
        expected_digest: Some(c.bundle.digest.clone()),
        observed_identifier: Some(operation),
        violation_location: None,
        category: DriftCategory::Shadow.as_str(),
        evidence_digest: None,
        action_taken: Action::Notify,
        code: "",
        caller: cx.caller.clone(),
        diagnostics,
    });
}
