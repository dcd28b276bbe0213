//! A tool call's answer on its way back: relayed event by event (JSON whole, SSE streamed),
//! each complete result judged by its output contract, a write committed when its answer
//! arrives, given up on (uncertain) when none comes in time.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use serde_json::Value;

use super::sse;
use crate::context::Plane;
use crate::context::WriteContext;
use crate::enforce::own::Own;
use crate::enforce::send;
use crate::net::body::{self, BoxError, ProxyBody};
use crate::net::headers;
use crate::net::problem::{Failure, Purpose, Silence};

use super::results::{
    copy_receipt_headers, judge, replaced, settle, settled_reply, Commit, OutputRule,
};

/// `resp`, the server's reply to tool call `id`, on its way to the client: checked against
/// `rule`, and committed by `commit` when it answers a write (see the module doc). `sent`
/// says what the upstream leg made of it.
pub(crate) async fn relay(
    plane: &Arc<Plane>,
    cx: &WriteContext,
    rule: Option<OutputRule>,
    id: Value,
    sent: send::Sent,
    commit: Option<Commit>,
) -> Response<ProxyBody> {
    let send::Sent { answer, note, .. } = sent;
    let resp = match answer {
        Ok(resp) => resp,
        // The leg failed: the sidecar's problem is the answer, final, its code typed.
        Err(own) => {
            return match commit {
                Some(c) => c.settle(plane, cx, note, None, Err(own)).await.0,
                None => own.into_response(),
            };
        }
    };
    let sse = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().starts_with("text/event-stream"));
    // An HTTP error from the server: the answer is final as it is.
    if !resp.status().is_success() || note.is_some() || (rule.is_none() && commit.is_none()) {
        return match commit {
            Some(c) => c.settle(plane, cx, note, None, Ok(resp)).await.0,
            None => resp,
        };
    }
    if sse {
        return relay_stream(plane, cx, rule, id, resp, commit);
    }
    let (mut parts, rbody) = resp.into_parts();
    let bytes = match body::collect_proxy(rbody, plane.config.limits.max_response).await {
        Ok(b) => b,
        Err(_) => {
            let own = Own::failed(Failure::ResponseTooLarge(Purpose::ToolResult), &cx.trace_id);
            let (msg, verdict) = replaced(own, &id);
            return match commit {
                Some(c) => settled_reply(plane, cx, c, verdict, msg).await,
                None => body::json_response(StatusCode::OK, &msg),
            };
        }
    };
    let judged = match serde_json::from_slice::<Value>(&bytes) {
        Ok(v) => judge(plane, cx, rule.as_ref(), &id, v).await,
        Err(_) => None,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    match (judged, commit) {
        (Some((msg, verdict)), Some(c)) => {
            let (msg, headers) = settle(plane, cx, c, verdict, msg).await;
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
            c.settle(plane, cx, None, None, Ok(resp)).await.0
        }
        (None, None) => Response::from_parts(parts, body::full(bytes)),
    }
}

/// The SSE case of [`relay`]: the head goes out now; a task relays the events.
fn relay_stream(
    plane: &Arc<Plane>,
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
                .insert(headers::DRY_RUN_HEADER, HeaderValue::from_static("1"));
        } else {
            parts
                .headers
                .insert(headers::FENCE_HEADER, HeaderValue::from(c.permit.epoch()));
        }
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, BoxError>>(16);
    let limit = plane.config.limits.max_response as usize;
    // A write holds its resource's lock until it is committed: its wait is bounded.
    let deadline =
        tokio::time::Instant::now() + cx.timeout.unwrap_or(plane.config.upstream.timeout);
    let (plane, cx) = (plane.clone(), cx.clone());
    // The commit on the stream's answer is the request's: its receipt lands on its span.
    tokio::spawn(crate::telemetry::otlp::span::carried(async move {
        let mut events = sse::Events::new(rbody, limit);
        let mut client = Some(tx);
        let mut commit = commit;
        loop {
            let next = if commit.is_some() {
                match tokio::time::timeout_at(deadline, events.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        let silence = Silence::Timeout;
                        give_up(&plane, &cx, commit.take(), &id, silence, client.take()).await;
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
                        let silence = Silence::StreamEnded;
                        give_up(&plane, &cx, commit.take(), &id, silence, client.take()).await;
                    } else if let (Some(Err(e)), Some(tx)) = (ended, client.take()) {
                        let _ = tx.send(Err(e)).await;
                    }
                    return;
                }
            };
            let mut out = event.clone();
            if let Some(msg) = sse::json_data(&event) {
                if let Some((msg, verdict)) = judge(&plane, &cx, rule.as_ref(), &id, msg).await {
                    let msg = match commit.take() {
                        Some(c) => settle(&plane, &cx, c, verdict, msg).await.0,
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
    }));
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    Response::from_parts(parts, body::from_stream(stream))
}

/// A write whose answer never came: committed as uncertain, the client told so.
async fn give_up(
    plane: &Plane,
    cx: &WriteContext,
    commit: Option<Commit>,
    id: &Value,
    silence: Silence,
    client: Option<tokio::sync::mpsc::Sender<Result<Bytes, BoxError>>>,
) {
    let own = Own::failed(Failure::Unanswered(silence), &cx.trace_id);
    let (msg, verdict) = replaced(own, id);
    let msg = match commit {
        Some(c) => settle(plane, cx, c, verdict, msg).await.0,
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
