//! A tool call's answer on its way back (SPEC §7, RICH §3.2), JSON or SSE alike.
//!
//! The answer to the call is the one JSON-RPC response with the call's id; everything before
//! it in an SSE stream (progress, log and list_changed notifications) passes on as it comes.
//!
//! - An interim outcome (`result.resultType` other than `"complete"`, e.g. `input_required`)
//!   is passed on unchecked, and a write tool's receipt for it is of kind `interim`: the call
//!   was sent, but it is not a commit, and its lease has nothing to compensate.
//! - An error result (`isError: true`) or a JSON-RPC error belongs to the error domain: passed
//!   on unchecked, as HTTP error answers are; for a write tool it is the outcome committed.
//! - A complete result of a tool whose contract has `structural.output` must carry
//!   `structuredContent` that validates. If not: a `structural` drift event (the location, the
//!   digest of the offending content), and by the binding's `onDrift`: `notify` passes it on;
//!   `quarantine` writes it (0600, named by its digest) and, like `fail-closed`, replaces the
//!   message with a JSON-RPC error `ERR_CONTRACT_OUTPUT` carrying a rejection receipt;
//!   `qualified-fallback` sends a read tool's call again to the binding's fallback deployment
//!   and passes on its answer (a write tool's call is never sent twice: it is refused).
//!
//! A write tool's commit waits for its answer: the receipt (kind `commit`, `interim` or
//! `dry-run`) is stored when the answer arrives, and travels in the answer's
//! `result._meta.commitReceipt` (and, for a JSON reply, in `Agent-Commit-Receipt`). An SSE
//! answer is relayed by a task of its own, so a client that hangs up cannot keep the receipt
//! from being stored; a stream that ends or stalls past the call's timeout without an answer
//! is committed with `outcome: "uncertain"` and answered with a JSON-RPC error.

use std::sync::Arc;

use bytes::Bytes;
use http::{Response, StatusCode};
use palisade_policy::drift::Action;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::{Contract, DriftPolicy};
use serde_json::{json, Value};

use super::connect::{map_result, Back, MappedResult};
use crate::context::Enforcement;
use crate::context::Plane;
use crate::context::WriteContext;
use crate::enforce::delivery::Keep;
use crate::enforce::own::Own;
use crate::enforce::permit::Permit;
use crate::enforce::receipts;
use crate::enforce::send;
use crate::enforce::written::Settled;
use crate::net::body::{self, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::jsonrpc::with_receipt;
use crate::net::problem::Failure;

/// Whether `result` is an interim outcome rather than a complete result.
pub fn is_interim(result: &Value) -> bool {
    result
        .get("resultType")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "complete")
}

/// Whether `msg` is a JSON-RPC error or a result with `isError: true`: the error domain.
fn is_error(msg: &Value) -> bool {
    msg.get("result")
        .is_none_or(|r| r.get("isError") == Some(&Value::Bool(true)))
}

/// The output contract a tool's answers are held to, and what its violation does.
#[derive(Clone)]
pub(crate) struct OutputRule {
    pub contract: Arc<Contract>,
    pub on_drift: DriftPolicy,
    /// `qualified-fallback` of a read tool: where and what to send again.
    pub fallback: Option<Arc<Fallback>>,
    /// A connected call's (issue 37): the result mapped back to the agent-facing tool's.
    pub back: Option<Arc<Back>>,
}

/// A read tool's call, kept to be sent to the binding's fallback deployment.
pub(crate) struct Fallback {
    pub base: String,
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub conn: ConnInfo,
}

impl OutputRule {
    /// The rule of `cap`, if its contract has an output schema.
    pub fn of(cap: Option<&palisade_rich::Capability>) -> Option<Self> {
        cap.filter(|c| c.contract.output.is_some()).map(|c| Self {
            contract: c.contract.clone(),
            on_drift: c.runtime.on_drift,
            fallback: None,
            back: None,
        })
    }

    /// The rule of `cap`, a connected call's target, whose result `back` maps: a rule even
    /// when the target's contract has no output schema, since the mapping still runs.
    pub fn of_call(
        cap: Option<&palisade_rich::Capability>,
        back: Option<Arc<Back>>,
    ) -> Option<Self> {
        let Some(back) = back else {
            return Self::of(cap);
        };
        cap.map(|c| Self {
            contract: c.contract.clone(),
            on_drift: c.runtime.on_drift,
            fallback: None,
            back: Some(back),
        })
    }

    /// This rule with the call kept for its fallback deployment, when the binding names one
    /// under `qualified-fallback` (a read tool's only: a write is never sent twice).
    pub fn with_fallback(
        mut self,
        cap: &palisade_rich::Capability,
        parts: &http::request::Parts,
        body: &Bytes,
        conn: &ConnInfo,
    ) -> Self {
        if let (DriftPolicy::QualifiedFallback, Some(base), Some(parts)) = (
            cap.runtime.on_drift,
            &cap.runtime.fallback,
            crate::enforce::output::copy_head(parts),
        ) {
            self.fallback = Some(Arc::new(Fallback {
                base: base.clone(),
                parts,
                body: body.clone(),
                conn: conn.clone(),
            }));
        }
        self
    }
}

/// A permitted tool call of a write tool, committed when its answer is known.
pub(crate) struct Commit {
    pub enf: Arc<Enforcement>,
    pub permit: Permit,
    pub keep: Keep,
    /// Told what the commit came to, typed, when it is made (issue 55: the MCP leg returns its
    /// receipt; an RCNS tool step reads it here, not out of the JSON-RPC answer).
    pub told: Option<tokio::sync::oneshot::Sender<Settled>>,
}

impl Commit {
    /// Commits with `resp` as the answer (`send::settle`), and tells whoever waits.
    pub(super) async fn settle(
        self,
        plane: &Plane,
        cx: &WriteContext,
        note: Option<&str>,
        code: Option<ErrorCode>,
        answer: Result<Response<ProxyBody>, Own>,
    ) -> (Response<ProxyBody>, Option<Value>) {
        let Commit {
            enf,
            permit,
            keep,
            told,
        } = self;
        let interim = note == Some(receipts::INTERIM);
        let keep = if interim { Keep::Nothing } else { keep };
        let what = send::Settle { permit, keep, note };
        let committed = send::settle(plane, &enf, cx, what, answer).await;
        if let Some(tx) = told {
            // Nobody waiting (an agent's own call) is fine: the answer carries it too.
            let _ = tx.send(Settled {
                receipt: committed.receipt.clone(),
                code: committed.failed.or(code),
                interim,
            });
        }
        (committed.resp, committed.receipt)
    }
}

/// What the answer to the call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Complete,
    Interim,
    /// Replaced by the sidecar's problem with this code (its output contract refused it).
    Replaced(ErrorCode),
    /// Never came (the timeout, or the stream ended first): the call may or may not have run.
    Unanswered(ErrorCode),
}

impl Verdict {
    /// The commit receipt's `outcome` for it.
    pub(super) fn note(self) -> Option<&'static str> {
        match self {
            Self::Interim => Some(receipts::INTERIM),
            Self::Unanswered(_) => Some("uncertain"),
            Self::Complete | Self::Replaced(_) => None,
        }
    }

    /// The sidecar's problem that replaced the answer, if one did.
    pub(super) fn code(self) -> Option<ErrorCode> {
        match self {
            Self::Replaced(code) | Self::Unanswered(code) => Some(code),
            Self::Complete | Self::Interim => None,
        }
    }
}

/// What a complete result that breaks its output contract gets.
pub(super) enum Breach {
    /// Replaced by the refusal.
    Refused(Refusal),
    /// Replaced by the fallback deployment's answer (the refusal if it gives none).
    Fallback(Arc<Fallback>, Refusal),
}

/// The output-contract breach of `msg`, if it answers `id` with a complete result that
/// breaks `rule` (reported: drift event, quarantine). `None`: pass it on.
pub(super) fn violation(
    plane: &Plane,
    cx: &WriteContext,
    rule: &OutputRule,
    msg: &Value,
) -> Option<Breach> {
    let schema = rule.contract.output.as_ref()?;
    let result = msg.get("result")?;
    if is_interim(result) || result.get("isError") == Some(&Value::Bool(true)) {
        return None;
    }
    let content = result.get("structuredContent");
    let location = match content {
        // An accept-all contract says nothing about the result, absence included (issue 15).
        None if schema.accepts_anything() => return None,
        None => "/structuredContent".to_owned(),
        Some(c) => match schema.check(c) {
            Ok(()) => return None,
            Err(v) => format!("/structuredContent{}", v.instance_location),
        },
    };
    let evidence = content
        .map(palisade_policy::canon::to_vec)
        .unwrap_or_default();
    let action = match rule.on_drift {
        DriftPolicy::Notify => Action::Notify,
        DriftPolicy::Quarantine => Action::Quarantined,
        DriftPolicy::QualifiedFallback if rule.fallback.is_some() => Action::Fallback,
        DriftPolicy::FailClosed | DriftPolicy::QualifiedFallback => Action::Blocked,
    };
    let refusal = Refusal::new(
        ErrorCode::ContractOutput,
        "the tool result's structuredContent violates structural.output",
    )
    .with_location(location);
    crate::enforce::output::report(
        plane,
        &refusal,
        cx,
        action,
        crate::enforce::output::Observed::payload(&evidence),
    );
    match (action, &rule.fallback) {
        (Action::Notify, _) => None,
        (Action::Fallback, Some(f)) => Some(Breach::Fallback(f.clone(), refusal)),
        (Action::Quarantined, _) => {
            crate::enforce::output::quarantine(plane, &evidence);
            Some(Breach::Refused(refusal))
        }
        _ => Some(Breach::Refused(refusal)),
    }
}

/// The answer to `id` from the fallback deployment, if it gives one.
pub(super) async fn fallback_answer(
    plane: &Plane,
    cx: &WriteContext,
    f: &Fallback,
    id: &Value,
) -> Option<Value> {
    let retry = crate::enforce::output::Retry {
        parts: crate::enforce::output::copy_head(&f.parts)?,
        body: f.body.clone(),
        conn: &f.conn,
    };
    let resp = crate::enforce::output::fallback(plane, &f.base, retry, cx)
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let bytes = body::collect_proxy(resp.into_body(), plane.config.limits.max_response)
        .await
        .ok()?;
    super::wire::messages_in(&bytes).into_iter().find(|m| {
        m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
    })
}

/// The answer to request `id` as the client is to get it, and what it was; `None` when `msg`
/// is not that answer.
pub(super) async fn judge(
    plane: &Plane,
    cx: &WriteContext,
    rule: Option<&OutputRule>,
    id: &Value,
    msg: Value,
) -> Option<(Value, Verdict)> {
    if msg.get("id") != Some(id) || (msg.get("result").is_none() && msg.get("error").is_none()) {
        return None;
    }
    if msg.get("result").is_some_and(is_interim) {
        return Some((msg, Verdict::Interim));
    }
    let refusal = match rule.and_then(|r| violation(plane, cx, r, &msg)) {
        None => match rule.and_then(|r| r.back.as_deref()) {
            // A connected call's complete result, the target's contract met: mapped back.
            Some(back) if !is_error(&msg) => match map_result(plane, cx, back, msg) {
                MappedResult::Mapped(m) | MappedResult::Passed(m) => {
                    return Some((m, Verdict::Complete))
                }
                MappedResult::Refused(r) => r,
            },
            _ => return Some((msg, Verdict::Complete)),
        },
        Some(Breach::Refused(refusal)) => refusal,
        Some(Breach::Fallback(f, refusal)) => match fallback_answer(plane, cx, &f, id).await {
            Some(answer) => return Some((answer, Verdict::Complete)),
            None => refusal,
        },
    };
    let own = Own::from(crate::enforce::output::blocked(plane, refusal, cx).await);
    Some(replaced(own, id))
}

/// The JSON-RPC error that replaces the answer to call `id` (its output contract refused it,
/// it was too large to check, or it never came), and the verdict it is committed with.
pub(super) fn replaced(own: Own, id: &Value) -> (Value, Verdict) {
    let code = own.code();
    let verdict = match &own {
        Own::Failed(f) if matches!(f.failure, Failure::Unanswered(_)) => Verdict::Unanswered(code),
        _ => Verdict::Replaced(code),
    };
    (own.rpc_doc(id.clone()), verdict)
}

/// Commits `commit` with `msg` as its answer; gives the message with its receipt, and the
/// receipt headers for a JSON reply. An interim answer (`note` [`receipts::INTERIM`]) does
/// not spend the call's idempotency key: the call is not done.
pub(super) async fn settle(
    plane: &Plane,
    cx: &WriteContext,
    commit: Commit,
    verdict: Verdict,
    msg: Value,
) -> (Value, http::HeaderMap) {
    let resp = body::json_response(StatusCode::OK, &msg);
    let (resp, receipt) = commit
        .settle(plane, cx, verdict.note(), verdict.code(), Ok(resp))
        .await;
    (with_receipt(msg, receipt), resp.into_parts().0.headers)
}

/// [`settle`], answered as a JSON reply of its own.
pub(super) async fn settled_reply(
    plane: &Plane,
    cx: &WriteContext,
    commit: Commit,
    verdict: Verdict,
    msg: Value,
) -> Response<ProxyBody> {
    let (msg, headers) = settle(plane, cx, commit, verdict, msg).await;
    let mut resp = body::json_response(StatusCode::OK, &msg);
    copy_receipt_headers(&headers, resp.headers_mut());
    resp
}

/// The answer of a dry run with no shadow deployment: checked, not executed (SPEC §5.4).
/// `typed` adds `resultType` (2026-07-28 and later), which earlier revisions do not know.
pub(crate) async fn dry_run(
    plane: &Plane,
    cx: &WriteContext,
    id: Value,
    typed: bool,
    commit: Commit,
) -> Response<ProxyBody> {
    let mut msg = json!({"jsonrpc": "2.0", "id": id, "result": {
        "content": [{"type": "text", "text": "dry run: the call was checked and not executed"}],
        "isError": false,
    }});
    if typed {
        msg["result"]["resultType"] = json!("complete");
    }
    settled_reply(plane, cx, commit, Verdict::Complete, msg).await
}

pub(super) fn copy_receipt_headers(from: &http::HeaderMap, to: &mut http::HeaderMap) {
    for name in [
        headers::RECEIPT_HEADER,
        headers::FENCE_HEADER,
        headers::DRY_RUN_HEADER,
    ] {
        if let Some(v) = from.get(name) {
            to.insert(name, v.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interim_outcomes_are_told_apart() {
        assert!(is_interim(&json!({"resultType": "input_required"})));
        assert!(!is_interim(&json!({"resultType": "complete"})));
        // Before 2026-07-28 there is no resultType: every result is complete.
        assert!(!is_interim(&json!({"content": []})));
    }

    #[test]
    fn the_receipt_goes_into_a_result_or_our_own_error() {
        let r = json!({"receipt_id": "urn:uuid:1"});
        let msg = with_receipt(json!({"id": 1, "result": {"content": []}}), Some(r.clone()));
        assert_eq!(msg["result"]["_meta"][crate::net::jsonrpc::RECEIPT_META], r);
        // A server's error is left as it is.
        let err = json!({"id": 1, "error": {"code": 1, "message": "x", "data": {}}});
        assert_eq!(with_receipt(err.clone(), Some(r.clone())), err);
        let ours = json!({"id": 1, "error": {"code": crate::net::jsonrpc::REFUSED, "message": "x",
                                             "data": {"code": "ERR_UPSTREAM_TIMEOUT"}}});
        assert_eq!(
            with_receipt(ours, Some(r.clone()))["error"]["data"]["receipt"],
            r
        );
        // A refusal's own rejection receipt stays.
        let refused = json!({"id": 1, "error": {"code": crate::net::jsonrpc::REFUSED, "message": "x",
                                                "data": {"receipt": {"kind": "rejection"}}}});
        assert_eq!(with_receipt(refused.clone(), Some(r)), refused);
    }
}
