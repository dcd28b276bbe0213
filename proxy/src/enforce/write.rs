//! The enforced write path, once the body is read (SPEC §5):
//!
//! ```text
//! Idempotency-Key (5.6): replay / 409 / 422, or reserve the key
//!   → checks 1–12 (checks::check) → Permit
//!   → [own task from here] forward | dry-run (shadow or nowhere) | hold in escrow
//!   → commit: receipt + the key's outcome (+ escrow state) in one durable transaction
//! ```
//! Once a permit exists the write's epoch may already be durable, so the rest runs in a task
//! of its own: a client that hangs up cannot cut the write between forwarding and its
//! receipt, and an idempotency key's outcome is stored whatever the client does.

use std::sync::Arc;

use bytes::Bytes;

use palisade_policy::ErrorCode;

use crate::context::AppState;
use crate::context::Binding;
use crate::context::Enforcement;
use crate::context::Outcome;
use crate::context::WriteContext;
use crate::enforce::checks;
use crate::enforce::escrow;
use crate::enforce::facts::WriteFacts;
use crate::enforce::facts::{InProcessGrant, Requester};
use crate::enforce::forward::forward_plain;
use crate::enforce::idempotency::{self, Begin};
use crate::enforce::permit::Disposition;
use crate::enforce::receipts;
use crate::enforce::send::{forward, Keep};
use crate::enforce::written::Written;
use crate::net::body;
use crate::net::conn::ConnInfo;
use crate::net::problem::Problem;
use palisade_policy::rich::{IdempotencyKey, SideEffect};

/// An enforced HTTP write whose body has been read.
pub(crate) struct WriteRequest {
    /// The request in its canonical form: what is checked and what the SoR receives.
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub cx: WriteContext,
    /// The bundle version the pipeline loaded: it decides this request from admission to end.
    pub bundle: Option<Arc<palisade_policy::rich::Bundle>>,
    /// A lease the sidecar grants the write itself (an RCNS step); `None`: the write carries
    /// its own in `Agent-Compensation-Lease`.
    pub grant: Option<InProcessGrant>,
}

/// An enforced write whose body has been read: what it came to ([`Written`]).
pub(crate) async fn run(
    state: &Arc<AppState>,
    enf: &Arc<Enforcement>,
    conn: &Arc<ConnInfo>,
    req: WriteRequest,
) -> Written {
    let WriteRequest {
        parts,
        body: bytes,
        mut cx,
        bundle,
        grant,
    } = req;
    let binding = Binding::of(bundle.as_deref(), &parts.method, parts.uri.path());
    cx.bind(bundle.as_deref(), &binding);
    if let Some(cap) = binding.capability() {
        // A bound operation that only reads needs no lease (its sideEffect says so); its
        // input contract still holds.
        if cap.contract.side_effect == SideEffect::Read {
            let checked = palisade_policy::rich::check_input(
                &cap.contract,
                &bytes,
                state.config.max_json_depth,
            )
            .and_then(|()| {
                palisade_policy::rich::check_parameters(cap, parts.uri.path(), parts.uri.query())
            });
            if let Err(refusal) = checked {
                return refuse(state, &parts, refusal.into(), &cx, &bytes).await;
            }
            let (resp, outcome) =
                forward_plain(state, parts, body::full(bytes), conn, &cx, None).await;
            return Written::plain(resp, outcome);
        }
        if cap.contract.idempotency_key == IdempotencyKey::Required
            && !parts.headers.contains_key(idempotency::KEY_HEADER)
        {
            let refusal = palisade_policy::Refusal::new(
                ErrorCode::IdempotencyKeyRequired,
                "the operation's contract requires an Idempotency-Key",
            );
            return refuse(state, &parts, refusal.into(), &cx, &bytes).await;
        }
    }
    let who = Requester::of(&state.config, &parts, conn);
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    let key = idempotency::Request {
        headers: &parts.headers,
        method: &parts.method,
        target: &target,
        body: &bytes,
        caller: who.caller.as_deref(),
    };
    let times = idempotency::KeyTimes::from_config(&state.config);
    let keep = match idempotency::begin(enf, &key, times).await {
        Ok(None) => Keep::Nothing,
        Ok(Some(Begin::Fresh(pending))) => Keep::Key(pending),
        Ok(Some(Begin::Replay { resp, receipt })) => {
            return Written::with_receipt(resp, Outcome::Replayed, receipt)
        }
        Err(refusal) => return refuse(state, &parts, refusal.into(), &cx, &bytes).await,
    };
    let facts = WriteFacts {
        granted: grant,
        ..WriteFacts::http(&parts, &bytes, &who)
    };
    let permit = match checks::check(
        &state.config,
        enf,
        &state.upstream,
        facts,
        &who,
        binding,
        false,
    )
    .await
    {
        Ok(p) => p,
        Err(denied) => {
            keep.release().await;
            return refuse(state, &parts, denied, &cx, &bytes).await;
        }
    };
    let trace_id = cx.trace_id.clone();
    let task = {
        let (state, enf, conn) = (state.clone(), enf.clone(), conn.clone());
        tokio::spawn(async move {
            let cap = Binding::of(bundle.as_deref(), &parts.method, parts.uri.path()).capability();
            match permit.disposition() {
                Disposition::Hold => {
                    let pending = match keep {
                        Keep::Key(p) => Some(p),
                        _ => None,
                    };
                    let answer = escrow::Answer::Http;
                    escrow::hold(
                        &state, &enf, permit, parts, bytes, &conn, &who, &cx, pending, answer,
                    )
                    .await
                }
                _ => forward(&state, &enf, permit, parts, bytes, &conn, &cx, keep, cap).await,
            }
        })
    };
    match task.await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!(error = %e, "write task failed");
            let resp = Problem::new(
                ErrorCode::Internal,
                "the write could not be completed",
                &uuid::Uuid::new_v4().to_string(),
                &trace_id,
            )
            .into_response();
            Written::plain(resp, Outcome::Error)
        }
    }
}

/// A refused HTTP write, recorded, as its client gets it: problem+json.
async fn refuse(
    state: &AppState,
    parts: &http::request::Parts,
    denied: crate::enforce::permit::Denied,
    cx: &WriteContext,
    body: &[u8],
) -> Written {
    Written::refused(receipts::refuse_write(state, parts, denied, cx, body).await)
}
