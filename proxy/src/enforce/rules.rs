//! The operator's rules in the write engine (SPEC §15), at one place: after checks 1–9 (the
//! lease verified, the input contract held, so `body` is valid) and before the resource is
//! locked, its epoch advanced or a budget spent. An HTTP write, a tool call, an RCNS step and
//! an escrow's release all pass here.
//!
//! - `deny`: the write is refused (403 `ERR_POLICY_DENIED`, the problem's `rule`), with its
//!   rejection receipt naming the rule and a drift event of category `policy`;
//! - `hold`: the write is held as a `HUMAN_ESCROW` one is, whatever its lease asked, with the
//!   rule's approvals and expiry; on its release the rules run again and a hold is what the
//!   approvals answered (a `deny` still stops it);
//! - `allow`: the write goes on, and the rules after it are not read;
//! - a rule in report mode: the write goes on; the engine emits a `policy` drift event
//!   (`notify`, `{"rule","would"}`) and its receipt carries `rules_report`.

use palisade_policy::drift::{Action as Taken, DriftEvent};
use palisade_policy::receipt::RuleReport;
use palisade_policy::{DriftCategory, ErrorCode, Refusal};
use palisade_rules::{Action, Facts, LeaseFacts, Matched, Mode, RuleSet, ToolFacts};

use crate::config::Config;
use crate::context::{Binding, Enforcement, WriteContext};
use crate::enforce::facts::{Requester, WriteFacts};
use crate::enforce::permit::{Denied, RuleHold, Ruled};
use crate::enforce::stop::Keys;
use crate::telemetry::RULE_DECISIONS;

/// The write as the rules see it, beside its checks' facts.
pub(crate) struct Judged<'a> {
    pub facts: &'a WriteFacts<'a>,
    pub who: &'a Requester,
    pub keys: &'a Keys,
    pub binding: &'a Binding<'a>,
    pub lease: LeaseFacts<'a>,
    pub now_ms: i64,
    /// An escrow's release: a hold is what its approvals answered.
    pub releasing: bool,
    /// An RCNS step: it cannot wait for people, so a hold refuses it.
    pub composed: bool,
}

/// The rules on one write; nothing without `[rules]`.
pub(crate) fn judge(
    rules: Option<&RuleSet>,
    config: &Config,
    j: Judged<'_>,
) -> Result<Ruled, Box<Denied>> {
    let Some(rules) = rules else {
        return Ok(Ruled::default());
    };
    let expose = config
        .rules
        .as_ref()
        .map_or(&[][..], |r| r.expose_headers.as_slice());
    let (path, query) = match j.facts.path.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (j.facts.path, None),
    };
    let parsed;
    let body = match j.facts.parsed {
        Some(v) => Some(v),
        None if j.facts.input.is_empty() => None,
        // Only when no stage parsed it (an HTTP body nothing else reads as JSON): the bound is
        // the one every body is held to.
        None => {
            parsed = palisade_policy::json::parse(j.facts.input, config.limits.max_json_depth).ok();
            parsed.as_ref()
        }
    };
    let tool = match j.facts.undoes {
        palisade_policy::inverse::Undoes::Tool { name, .. } => Some(ToolFacts {
            name,
            annotations: j
                .binding
                .capability()
                .and_then(|c| c.tool_annotations.as_ref()),
        }),
        palisade_policy::inverse::Undoes::Http { .. } => None,
    };
    let headers = match j.facts.headers {
        Some(h) => expose
            .iter()
            .filter_map(|name| {
                let v = h.get(name.as_str())?.to_str().ok()?;
                Some((name.as_str(), v))
            })
            .collect(),
        None => Vec::new(),
    };
    let facts = Facts {
        caller: j.who.caller.as_deref(),
        operation: &j.keys.operation,
        also: j.keys.also.as_deref(),
        resource: &j.keys.resource,
        // A tool call travels as a POST of its JSON-RPC message.
        method: j.facts.http_method().unwrap_or("POST"),
        path,
        query,
        body,
        lease: Some(j.lease),
        tool,
        headers,
        now_ms: j.now_ms,
    };
    let decision = rules.decide(&facts);
    for (rule, why) in &decision.failed {
        tracing::warn!(rule = %rule, error = %why, "an operator rule could not be evaluated; it counts as matched for deny and hold, not for allow");
    }
    let mut ruled = Ruled::default();
    for m in &decision.reported {
        count(m);
        ruled.report.push(RuleReport {
            rule: m.rule.to_string(),
            would: m.action.as_str().to_owned(),
        });
    }
    let Some(m) = decision.decided else {
        return Ok(ruled);
    };
    // A release answering a rule's hold is that hold's end, not a second decision.
    if !(m.action == Action::Hold && j.releasing) {
        count(&m);
    }
    match m.action {
        Action::Allow => Ok(ruled),
        Action::Hold if j.releasing => Ok(ruled),
        Action::Hold if j.composed => Err(denied(
            &m,
            "a composed step cannot wait for people: an operator's rule holds this write",
        )),
        Action::Hold => {
            ruled.hold = Some(RuleHold {
                rule: m.rule.clone(),
                approvals: m.approvals,
                expires_ms: m.expires_ms,
                reason: m.reason.clone(),
            });
            Ok(ruled)
        }
        Action::Deny => Err(denied(&m, "an operator's rule denies this write")),
    }
}

/// Decisions per (rule, action, mode) since the process started, for the console's rules
/// page; bounded (rule names come from the operator's files, but a file can be swapped often).
static DECISIONS: std::sync::Mutex<
    std::collections::BTreeMap<(String, &'static str, &'static str), u64>,
> = std::sync::Mutex::new(std::collections::BTreeMap::new());
const MAX_COUNTED: usize = 4096;

/// What [`DECISIONS`] holds: `(rule, action, mode, count)`.
pub fn decisions() -> Vec<(String, &'static str, &'static str, u64)> {
    DECISIONS
        .lock()
        .map(|d| {
            d.iter()
                .map(|((r, a, m), n)| (r.clone(), *a, *m, *n))
                .collect()
        })
        .unwrap_or_default()
}

fn count(m: &Matched) {
    if let Ok(mut d) = DECISIONS.lock() {
        let key = (m.rule.to_string(), m.action.as_str(), m.mode.as_str());
        if let Some(n) = d.get_mut(&key) {
            *n += 1;
        } else if d.len() < MAX_COUNTED {
            d.insert(key, 1);
        }
    }
    metrics::counter!(
        RULE_DECISIONS,
        "rule" => m.rule.to_string(),
        "action" => m.action.as_str(),
        "mode" => m.mode.as_str()
    )
    .increment(1);
}

/// 403 `ERR_POLICY_DENIED`: the detail is the rule's `reason` when it has one (the operator's
/// words), and the problem names the rule.
fn denied(m: &Matched, otherwise: &'static str) -> Box<Denied> {
    debug_assert_eq!(m.mode, Mode::Enforce);
    let detail = m.reason.clone().unwrap_or_else(|| otherwise.to_owned());
    let mut d = Denied::from(Refusal::new(ErrorCode::PolicyDenied, detail));
    d.extra.push(("rule".to_owned(), m.rule.to_string().into()));
    Box::new(d)
}

/// The drift events of the report-mode rules that matched a write that goes on (category
/// `policy`, `notify`, diagnostics `{"rule", "would"}`); its receipt carries them too.
pub(crate) fn report(enf: &Enforcement, cx: &WriteContext, report: &[RuleReport]) {
    for r in report {
        let mut diagnostics = serde_json::Map::new();
        diagnostics.insert("rule".into(), r.rule.clone().into());
        diagnostics.insert("would".into(), r.would.clone().into());
        enf.drift.emit(&DriftEvent {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: enf.now_rfc3339(),
            binding_id: cx.binding_id.clone(),
            trace_id: cx.trace_id.to_string(),
            expected_digest: cx.rules_digest.clone(),
            observed_identifier: Some(
                cx.operation_key
                    .clone()
                    .unwrap_or_else(|| cx.operation.clone()),
            ),
            violation_location: None,
            category: DriftCategory::Policy.as_str(),
            evidence_digest: None,
            action_taken: Taken::Notify,
            code: if r.would == "deny" {
                ErrorCode::PolicyDenied.as_str()
            } else {
                ""
            },
            caller: cx.caller.clone(),
            diagnostics,
        });
    }
}
