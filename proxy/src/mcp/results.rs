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
use http::{header, HeaderValue, Response, StatusCode};
use palisade_policy::drift::Action;
use palisade_policy::rich::{Contract, DriftPolicy};
use palisade_policy::{ErrorCode, Refusal};
use serde_json::{json, Value};

use super::sse;
use crate::body::{self, BoxError, ProxyBody};
use crate::enforce::{self, Enforcement, Permit, WriteContext};
use crate::pipeline::{AppState, ConnInfo};
use crate::problem::Problem;
use crate::write::{self, Keep};

/// Where a result carries its receipt.
pub const RECEIPT_META: &str = "commitReceipt";

/// Whether `result` is an interim outcome rather than a complete result.
pub fn is_interim(result: &Value) -> bool {
    result
        .get("resultType")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "complete")
}

/// The output contract a tool's answers are held to, and what its violation does.
#[derive(Clone)]
pub(crate) struct OutputRule {
    pub contract: Arc<Contract>,
    pub on_drift: DriftPolicy,
    /// `qualified-fallback` of a read tool: where and what to send again.
    pub fallback: Option<Arc<Fallback>>,
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
    pub fn of(cap: Option<&palisade_policy::rich::Capability>) -> Option<Self> {
        cap.filter(|c| c.contract.output.is_some()).map(|c| Self {
            contract: c.contract.clone(),
            on_drift: c.runtime.on_drift,
            fallback: None,
        })
    }

    /// This rule with the call kept for its fallback deployment, when the binding names one
    /// under `qualified-fallback` (a read tool's only: a write is never sent twice).
    pub fn with_fallback(
        mut self,
        cap: &palisade_policy::rich::Capability,
        parts: &http::request::Parts,
        body: &Bytes,
        conn: &ConnInfo,
    ) -> Self {
        if let (DriftPolicy::QualifiedFallback, Some(base), Some(parts)) = (
            cap.runtime.on_drift,
            &cap.runtime.fallback,
            crate::output::copy_head(parts),
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
}

/// What the answer to the call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Complete,
    Interim,
}

impl Verdict {
    /// The commit receipt's `outcome` for it.
    fn note(self) -> Option<&'static str> {
        (self == Self::Interim).then_some(enforce::INTERIM)
    }
}

/// What a complete result that breaks its output contract gets.
enum Breach {
    /// Replaced by the refusal.
    Refused(Refusal),
    /// Replaced by the fallback deployment's answer (the refusal if it gives none).
    Fallback(Arc<Fallback>, Refusal),
}

/// The output-contract breach of `msg`, if it answers `id` with a complete result that
/// breaks `rule` (reported: drift event, quarantine). `None`: pass it on.
fn violation(
    state: &AppState,
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
    crate::output::report(
        state,
        &refusal,
        cx,
        action,
        crate::output::Observed::payload(&evidence),
    );
    match (action, &rule.fallback) {
        (Action::Notify, _) => None,
        (Action::Fallback, Some(f)) => Some(Breach::Fallback(f.clone(), refusal)),
        (Action::Quarantined, _) => {
            crate::output::quarantine(state, &evidence);
            Some(Breach::Refused(refusal))
        }
        _ => Some(Breach::Refused(refusal)),
    }
}

/// The answer to `id` from the fallback deployment, if it gives one.
async fn fallback_answer(
    state: &AppState,
    cx: &WriteContext,
    f: &Fallback,
    id: &Value,
) -> Option<Value> {
    let retry = crate::output::Retry {
        parts: crate::output::copy_head(&f.parts)?,
        body: f.body.clone(),
        conn: &f.conn,
    };
    let resp = crate::output::fallback(state, &f.base, retry, cx).await;
    if !resp.status().is_success() {
        return None;
    }
    let bytes = body::collect_proxy(resp.into_body(), state.config.max_response)
        .await
        .ok()?;
    super::messages_in(&bytes).into_iter().find(|m| {
        m.get("id") == Some(id) && (m.get("result").is_some() || m.get("error").is_some())
    })
}

/// The answer to request `id` as the client is to get it, and what it was; `None` when `msg`
/// is not that answer.
async fn judge(
    state: &AppState,
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
    let refusal = match rule.and_then(|r| violation(state, cx, r, &msg)) {
        None => return Some((msg, Verdict::Complete)),
        Some(Breach::Refused(refusal)) => refusal,
        Some(Breach::Fallback(f, refusal)) => match fallback_answer(state, cx, &f, id).await {
            Some(answer) => return Some((answer, Verdict::Complete)),
            None => refusal,
        },
    };
    let p = crate::output::blocked_problem(state, &refusal, cx).await;
    Some((super::error_doc(id.clone(), p.to_json()), Verdict::Complete))
}

/// `msg` with `receipt` in `result._meta` (a result only: an error's `data` is the server's).
pub(crate) fn with_receipt(mut msg: Value, receipt: Option<Value>) -> Value {
    let Some(r) = receipt else {
        return msg;
    };
    if let Some(result) = msg.get_mut("result").and_then(Value::as_object_mut) {
        let meta = result.entry("_meta").or_insert_with(|| json!({}));
        if let Some(m) = meta.as_object_mut() {
            m.insert(RECEIPT_META.to_owned(), r);
        }
        return msg;
    }
    // One of our own errors (a call given up on) carries it in its problem, unless that
    // already holds a rejection receipt of its own.
    if let Some(error) = msg.get_mut("error").and_then(Value::as_object_mut) {
        if error.get("code") == Some(&json!(super::REFUSED)) {
            if let Some(problem) = error.get_mut("data").and_then(Value::as_object_mut) {
                problem.entry("receipt").or_insert(r);
            }
        }
    }
    msg
}

/// Commits `commit` with `msg` as its answer; gives the message with its receipt, and the
/// receipt headers for a JSON reply. An interim answer (`note` [`enforce::INTERIM`]) does
/// not spend the call's idempotency key: the call is not done.
async fn settle(
    state: &AppState,
    cx: &WriteContext,
    commit: Commit,
    note: Option<&str>,
    msg: Value,
) -> (Value, http::HeaderMap) {
    let Commit { enf, permit, keep } = commit;
    let keep = if note == Some(enforce::INTERIM) {
        Keep::Nothing
    } else {
        keep
    };
    let resp = body::json_response(StatusCode::OK, &msg);
    let (resp, receipt) = write::settle(state, &enf, permit, cx, note, resp, keep).await;
    (with_receipt(msg, receipt), resp.into_parts().0.headers)
}

/// [`settle`], answered as a JSON reply of its own.
async fn settled_reply(
    state: &AppState,
    cx: &WriteContext,
    commit: Commit,
    msg: Value,
) -> Response<ProxyBody> {
    let (msg, headers) = settle(state, cx, commit, None, msg).await;
    let mut resp = body::json_response(StatusCode::OK, &msg);
    copy_receipt_headers(&headers, resp.headers_mut());
    resp
}

/// A problem as the JSON-RPC error that answers `id`.
fn error_msg(cx: &WriteContext, id: &Value, code: ErrorCode, detail: &str) -> Value {
    let p = Problem::new(
        code,
        detail,
        &uuid::Uuid::new_v4().to_string(),
        &cx.trace_id,
    );
    super::error_doc(id.clone(), p.to_json())
}

/// [`error_msg`] for a call whose answer never came: it may or may not have run.
fn unanswered(cx: &WriteContext, id: &Value, code: ErrorCode, detail: &str) -> Value {
    let mut msg = error_msg(cx, id, code, detail);
    msg["error"]["data"]["outcome"] = json!("uncertain");
    msg
}

/// The answer of a dry run with no shadow deployment: checked, not executed (SPEC §5.4).
/// `typed` adds `resultType` (2026-07-28 and later), which earlier revisions do not know.
pub(crate) async fn dry_run(
    state: &AppState,
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
    settled_reply(state, cx, commit, msg).await
}

fn copy_receipt_headers(from: &http::HeaderMap, to: &mut http::HeaderMap) {
    for name in [
        enforce::RECEIPT_HEADER,
        enforce::FENCE_HEADER,
        enforce::DRY_RUN_HEADER,
    ] {
        if let Some(v) = from.get(name) {
            to.insert(name, v.clone());
        }
    }
}

/// `resp`, the server's reply to tool call `id`, on its way to the client: checked against
/// `rule`, and committed by `commit` when it answers a write (see the module doc). `sent`
/// says what the upstream leg made of it.
pub(crate) async fn relay(
    state: &Arc<AppState>,
    cx: &WriteContext,
    rule: Option<OutputRule>,
    id: Value,
    sent: write::Sent,
    commit: Option<Commit>,
) -> Response<ProxyBody> {
    let write::Sent { resp, note, .. } = sent;
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
    // A failed leg, or an HTTP error from the server: the answer is final as it is.
    if !resp.status().is_success() || note.is_some() || (rule.is_none() && commit.is_none()) {
        return match commit {
            Some(Commit { enf, permit, keep }) => {
                write::settle(state, &enf, permit, cx, note, resp, keep)
                    .await
                    .0
            }
            None => resp,
        };
    }
    if sse {
        return relay_stream(state, cx, rule, id, resp, commit);
    }
    let (mut parts, rbody) = resp.into_parts();
    let bytes = match body::collect_proxy(rbody, state.config.max_response).await {
        Ok(b) => b,
        Err(_) => {
            let msg = error_msg(
                cx,
                &id,
                ErrorCode::ResponseTooLarge,
                "the tool result exceeds limits.max_response and cannot be checked",
            );
            return match commit {
                Some(c) => settled_reply(state, cx, c, msg).await,
                None => body::json_response(StatusCode::OK, &msg),
            };
        }
    };
    let judged = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => judge(state, cx, rule.as_ref(), &id, v).await,
        Err(_) => None,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    match (judged, commit) {
        (Some((msg, verdict)), Some(c)) => {
            let (msg, headers) = settle(state, cx, c, verdict.note(), msg).await;
            copy_receipt_headers(&headers, &mut parts.headers);
            let out = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
            Response::from_parts(parts, body::full(out))
        }
        (Some((msg, _)), None) => {
            let out = Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
            Response::from_parts(parts, body::full(out))
        }
        // Not an answer to the call (a reply we cannot read): passed on, and a write is
        // committed as what it is, sent with an answer nobody can judge.
        (None, Some(c)) => {
            let resp = Response::from_parts(parts, body::full(bytes));
            write::settle(state, &c.enf, c.permit, cx, None, resp, c.keep)
                .await
                .0
        }
        (None, None) => Response::from_parts(parts, body::full(bytes)),
    }
}

/// The SSE case of [`relay`]: the head goes out now; a task relays the events.
fn relay_stream(
    state: &Arc<AppState>,
    cx: &WriteContext,
    rule: Option<OutputRule>,
    id: Value,
    resp: Response<ProxyBody>,
    commit: Option<Commit>,
) -> Response<ProxyBody> {
    let (mut parts, rbody) = resp.into_parts();
    parts.headers.remove(header::CONTENT_LENGTH);
    if let Some(c) = &commit {
        // The receipt comes with the answer; the head says what it can already.
        if c.permit.is_dry_run() {
            parts
                .headers
                .insert(enforce::DRY_RUN_HEADER, HeaderValue::from_static("1"));
        } else {
            parts
                .headers
                .insert(enforce::FENCE_HEADER, HeaderValue::from(c.permit.epoch()));
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, BoxError>>(16);
    let limit = state.config.max_response as usize;
    // A write holds its resource's lock until it is committed: its wait is bounded.
    let deadline =
        tokio::time::Instant::now() + cx.timeout.unwrap_or(state.config.upstream_timeout);
    let (state, cx) = (state.clone(), cx.clone());
    tokio::spawn(async move {
        let mut events = sse::Events::new(rbody, limit);
        let mut client = Some(tx);
        let mut commit = commit;
        loop {
            let next = if commit.is_some() {
                match tokio::time::timeout_at(deadline, events.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        let msg = unanswered(
                            &cx,
                            &id,
                            ErrorCode::UpstreamTimeout,
                            "the tool call was not answered within its timeout",
                        );
                        give_up(&state, &cx, commit.take(), msg, client.take()).await;
                        return;
                    }
                }
            } else {
                events.next().await
            };
            let event = match next {
                Some(Ok(event)) => event,
                ended => {
                    // The stream ended (or broke) before the call was answered.
                    if commit.is_some() {
                        let msg = unanswered(
                            &cx,
                            &id,
                            ErrorCode::UpstreamUnavailable,
                            "the server's stream ended before the tool call was answered",
                        );
                        give_up(&state, &cx, commit.take(), msg, client.take()).await;
                    } else if let (Some(Err(e)), Some(tx)) = (ended, client.take()) {
                        let _ = tx.send(Err(e)).await;
                    }
                    return;
                }
            };
            let mut out = event.clone();
            if let Some(msg) = sse::json_data(&event) {
                if let Some((msg, verdict)) = judge(&state, &cx, rule.as_ref(), &id, msg).await {
                    let msg = match commit.take() {
                        Some(c) => settle(&state, &cx, c, verdict.note(), msg).await.0,
                        None => msg,
                    };
                    out = sse::with_data(&event, &msg);
                }
            }
            let delivered = match &client {
                Some(tx) => tx.send(Ok(out)).await.is_ok(),
                None => false,
            };
            if !delivered {
                // The client left: a write is still read to its answer and committed.
                client = None;
                if commit.is_none() {
                    return;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::from_parts(parts, body::from_stream(stream))
}

/// A write whose answer never came: committed as uncertain, the client told so.
async fn give_up(
    state: &AppState,
    cx: &WriteContext,
    commit: Option<Commit>,
    msg: Value,
    client: Option<tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>>,
) {
    let msg = match commit {
        Some(c) => settle(state, cx, c, Some("uncertain"), msg).await.0,
        None => msg,
    };
    if let Some(tx) = client {
        let event = format!(
            "event: message\ndata: {}\n\n",
            serde_json::to_string(&msg).unwrap_or_default()
        );
        let _ = tx.send(Ok(Bytes::from(event))).await;
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
        assert_eq!(msg["result"]["_meta"][RECEIPT_META], r);
        // A server's error is left as it is.
        let err = json!({"id": 1, "error": {"code": 1, "message": "x", "data": {}}});
        assert_eq!(with_receipt(err.clone(), Some(r.clone())), err);
        let ours = json!({"id": 1, "error": {"code": super::super::REFUSED, "message": "x",
                                             "data": {"code": "ERR_UPSTREAM_TIMEOUT"}}});
        assert_eq!(
            with_receipt(ours, Some(r.clone()))["error"]["data"]["receipt"],
            r
        );
        // A refusal's own rejection receipt stays.
        let refused = json!({"id": 1, "error": {"code": super::super::REFUSED, "message": "x",
                                                "data": {"receipt": {"kind": "rejection"}}}});
        assert_eq!(with_receipt(refused.clone(), Some(r)), refused);
    }
}
