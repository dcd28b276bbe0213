//! A permitted write on its way: sent to the SoR (a dry run to the shadow, or nowhere), then
//! settled: the commit receipt and what must be stored with it, in one durable transaction.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderValue, Response};
use palisade_policy::ErrorCode;
use serde_json::Value;
use tokio::time::Instant;

use crate::context::Enforcement;
use crate::context::Outcome;
use crate::context::Plane;
use crate::context::WriteContext;
use crate::enforce::delivery::{Delivery, Keep};
use crate::enforce::identity;
use crate::enforce::own::Own;
use crate::enforce::permit::Permit;
use crate::enforce::receipts;
use crate::enforce::receipts::Refused;
use crate::enforce::written::Written;
use crate::net::body::{self, CollectError, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::problem::{Failure, Fault, Purpose};
use crate::net::rewrite::build_upstream_request;
use crate::net::upstream::UpstreamError;
use crate::store::{Attachments, EscrowRecord, EscrowState, EscrowUpdate};
use palisade_rich::Capability;

/// A permitted write as it came back from its upstream leg.
pub(crate) struct Sent {
    /// The upstream's answer, or the sidecar's own (the leg failed), typed.
    pub answer: Result<Response<ProxyBody>, Own>,
    pub outcome: Outcome,
    /// What the commit receipt must say that its status cannot (`outcome`, SPEC §5.5).
    pub note: Option<&'static str>,
}

impl Sent {
    /// A request sent as it is (no permit): the answer, or the sidecar's problem if the leg
    /// failed.
    pub fn passed(answer: Result<Response<ProxyBody>, Own>) -> Self {
        let outcome = answer
            .as_ref()
            .map_or_else(Own::outcome, |_| Outcome::Forwarded);
        Self {
            answer,
            outcome,
            note: None,
        }
    }
}

/// What a permitted write's commit stores: its permit, what is kept with the receipt, and
/// what the receipt must say that the answer's status cannot.
pub(crate) struct Settle<'n> {
    pub permit: Permit,
    pub keep: Keep,
    pub note: Option<&'n str>,
}

/// Sends a permitted write to the SoR (a dry run to the shadow, or nowhere), then commits:
/// the receipt and what `keep` asks to store with it. The upstream's failure is the write's
/// outcome too: its epoch stays advanced (the write may have landed) and its receipt says
/// what the client saw.
pub(crate) async fn forward(
    plane: &Plane,
    enf: &Enforcement,
    d: Delivery,
    cap: Option<&Capability>,
) -> Written {
    let Delivery {
        permit,
        parts,
        body: bytes,
        conn,
        cx,
        keep,
        ..
    } = d;
    let (conn, cx) = (&*conn, &cx);
    let dry_run = permit.is_dry_run();
    let target = match (&plane.shadow, dry_run) {
        (Some(shadow), true) => Some(shadow),
        (None, true) => None,
        _ => Some(&plane.upstream),
    };
    let Sent {
        answer,
        outcome,
        note,
    } = match target {
        // DRY_RUN_SHADOW without a shadow deployment: the sidecar answers (SPEC §5.4).
        None => {
            let mut resp = Response::new(body::full(r#"{"dry_run":true}"#));
            resp.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            Sent {
                answer: Ok(resp),
                outcome: Outcome::Forwarded,
                note: None,
            }
        }
        Some(upstream) => {
            let req = http::Request::from_parts(parts, bytes);
            send(plane, upstream, &permit, req, conn, cx).await
        }
    };
    // The write has happened; an answer that breaks the output contract is still not passed
    // on (no fallback: a write is not sent twice).
    let answer = match (cap, answer) {
        (Some(cap), Ok(resp)) if target.is_some() => {
            crate::enforce::output::check(plane, cap, cx, resp, None).await
        }
        (_, answer) => answer,
    };
    let what = Settle { permit, keep, note };
    let settled = settle(plane, enf, cx, what, answer).await;
    Written {
        code: settled.failed,
        ..Written::with_receipt(settled.resp, outcome, settled.receipt)
    }
}

/// The upstream leg of a permitted write: the fence token on, the binding's identity and
/// timeout applied, a failure turned into the problem the client gets.
pub(crate) async fn send(
    plane: &Plane,
    upstream: &crate::net::upstream::Upstream,
    permit: &Permit,
    req: http::Request<Bytes>,
    conn: &ConnInfo,
    cx: &WriteContext,
) -> Sent {
    let (parts, bytes) = req.into_parts();
    let failed = |own: Own, note| Sent {
        answer: Err(own),
        outcome: Outcome::Error,
        note,
    };
    let bound = conn.bound_for(parts.version);
    let req = match // The fence token travels upstream (inserted last); the client's PTCL headers do not.
    build_upstream_request(upstream, parts, body::full(bytes), conn, Some(permit.epoch())) {
        Ok(mut req) => {
            if let Some(etag) = permit.if_match() {
                req.headers_mut().insert(header::IF_MATCH, etag.clone());
            }
            req
        }
        Err(e) => {
            tracing::warn!(error = %e, "request target not forwardable");
            return failed(Own::failed(Failure::NotForwardable, &cx.trace_id), None);
        }
    };
    let sent_at = Instant::now();
    // The binding's timeout, when it has one, bounds this call (SPEC §7). The shadow is
    // another deployment: the binding's identity is not its own.
    let identity = if permit.is_dry_run() {
        None
    } else {
        cx.identity.as_deref()
    };
    let send = crate::telemetry::otlp::upstream::call(req, |req| {
        crate::net::bound::send_on(upstream, req, identity, bound)
    });
    let result = match cx.timeout {
        Some(limit) => match tokio::time::timeout(limit, send).await {
            Ok(r) => r,
            Err(_) => Err(UpstreamError::Timeout(limit)),
        },
        None => send.await,
    };
    plane
        .metrics
        .upstream_duration
        .record(sent_at.elapsed().as_secs_f64());
    match result {
        // The SoR's own precondition: the resource changed after check 12 read it. Nothing
        // was written; the epoch stays advanced.
        Ok(resp)
            if resp.status() == http::StatusCode::PRECONDITION_FAILED
                && permit.if_match().is_some() =>
        {
            let refusal = stale_upstream(plane, cx, permit);
            let mut refused = Refused::answered(refusal, &cx.trace_id);
            refused.current_epoch = Some(permit.epoch());
            Sent {
                answer: Err(Own::from(refused)),
                outcome: Outcome::Refused,
                note: Some(receipts::PRECONDITION_FAILED),
            }
        }
        Ok(resp) => Sent {
            answer: Ok(crate::net::upstream::downstream(resp)),
            outcome: Outcome::Forwarded,
            note: None,
        },
        Err(UpstreamError::Identity(m)) => {
            // The handshake failed: nothing of the write left the sidecar. The epoch has
            // moved; the commit receipt says the write was not sent.
            tracing::warn!(error = %m, trace_id = %cx.trace_id, "upstream identity refused");
            let refusal = identity::report(plane, cx, &m);
            let own = Own::from(Refused::answered(refusal, &cx.trace_id));
            failed(own, Some("not-sent"))
        }
        Err(e) => {
            // The full error goes to the log; the client learns only the code.
            tracing::warn!(error = %e, trace_id = %cx.trace_id, "upstream failure");
            let failure = Failure::upstream(&e);
            // Sent but unanswered: the write may or may not have happened.
            let note = failure.uncertain().then_some("uncertain");
            failed(Own::failed(failure, &cx.trace_id), note)
        }
    }
}

/// Reports the SoR's 412: the `fence` drift event (the ETag sent as the observed identifier)
/// and the refusals counter. The refusal for the answer.
fn stale_upstream(plane: &Plane, cx: &WriteContext, permit: &Permit) -> palisade_policy::Refusal {
    let refusal = palisade_policy::Refusal::new(
        ErrorCode::StalePreImageUpstream,
        "the SoR refused the write's If-Match (412): the resource changed after the sidecar read its pre-image; read it again and lease the next epoch",
    );
    let etag = permit
        .if_match()
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    crate::enforce::output::report(
        plane,
        &refusal,
        cx,
        palisade_policy::drift::Action::Blocked,
        crate::enforce::output::Observed {
            identifier: Some(etag),
            expected: None,
            evidence: Vec::new(),
            diagnostics: vec![
                ("operation", cx.operation.clone()),
                ("upstreamStatus", "412".into()),
            ],
        },
    );
    refusal
}

/// What a commit came to: the answer as the client gets it, its receipt (none if it could not
/// be stored), and the code of the sidecar's problem if that is the answer.
pub(crate) struct Committed {
    pub resp: Response<ProxyBody>,
    pub receipt: Option<Value>,
    pub failed: Option<ErrorCode>,
}

/// The commit of a forwarded write whose answer is final: the answer buffered when `keep`
/// stores it, then the receipt with what `keep` asks for, in one durable transaction.
pub(crate) async fn settle(
    plane: &Plane,
    enf: &Enforcement,
    cx: &WriteContext,
    what: Settle<'_>,
    answer: Result<Response<ProxyBody>, Own>,
) -> Committed {
    let Settle { permit, keep, note } = what;
    let keeps = !matches!(keep, Keep::Nothing);
    // What `keep` stores is the answer whole: the upstream's, read to its end here.
    let mut buffered = Bytes::new();
    let answer = match answer {
        Ok(resp) if keeps => {
            let (rparts, rbody) = resp.into_parts();
            match body::collect_proxy(rbody, plane.config.limits.max_response).await {
                Ok(b) => {
                    buffered = b.clone();
                    Ok(Response::from_parts(rparts, body::full(b)))
                }
                Err(CollectError::TooLarge(_)) => Err(Failure::ResponseTooLarge(Purpose::Stored)),
                Err(CollectError::Read(_)) => Err(Failure::Upstream(Fault::Broken)),
            }
            .map_err(|f| Own::failed(f, &cx.trace_id))
        }
        answer => answer,
    };
    // A sent write's answer on the HTTP wire: the sidecar's own problem rendered here, once,
    // its code kept typed; the problem is what the client gets and what a key replays.
    let failed = answer.as_ref().err().map(Own::code);
    let mut resp = match answer {
        Ok(resp) => resp,
        Err(own) => {
            let resp = own.into_response();
            if keeps {
                let (pparts, pbody) = resp.into_parts();
                // A problem's body is whole already: this cannot fail.
                buffered = body::collect_proxy(pbody, u64::MAX)
                    .await
                    .unwrap_or_default();
                Response::from_parts(pparts, body::full(buffered.clone()))
            } else {
                resp
            }
        }
    };
    let attach = |r: &Response<ProxyBody>| match &keep {
        Keep::Nothing => Attachments::default(),
        Keep::Key(pending) => Attachments {
            idempotency: Some(pending.record(r, &buffered)),
            freeze: None,
            escrow: None,
        },
        Keep::Escrow { id, record } => {
            let record = EscrowRecord {
                state: EscrowState::Released,
                upstream_status: Some(r.status().as_u16()),
                content_type: r
                    .headers()
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned),
                body_b64: Some(STANDARD.encode(&buffered)),
                ..(**record).clone()
            };
            Attachments {
                idempotency: None,
                freeze: None,
                escrow: Some(EscrowUpdate {
                    id: id.clone(),
                    expect: Some(EscrowState::Releasing),
                    record,
                    expires_at_ms: None,
                }),
            }
        }
    };
    let sealed = receipts::commit(enf, permit, cx, note, &mut resp, attach).await;
    // Released only now: the key's outcome is durable, so a retry finds it.
    drop(keep);
    Committed {
        resp,
        receipt: sealed.map(|r| r.value),
        failed,
    }
}
