//! One write engine (issue 35): the skeleton every enforced write runs, whatever surface
//! carried it (an HTTP write, an MCP tool call, an RCNS step, an escrow release of either).
//!
//! ```text
//! run:      the contract's idempotencyKey: required → Idempotency-Key (replay / 409 / 422 /
//!           reserve) → checks::check → [own task] hold in escrow | the leg delivers
//! release:  checks::check (releasing) → the leg delivers, its answer kept in the escrow
//! ```
//! What differs by surface is a [`Leg`]: which binding a write names, where the checks read its
//! lease, inverse and target, what its idempotency key is judged by, how a refusal and a
//! replay are rendered, how a held write is answered, how a permitted one is sent and
//! committed. The decisions, the store work and the receipts are the engine's, in one place:
//! what the next rules (budgets, freezes, the receipt log) change, they change here.
//!
//! Once a permit exists the write's epoch may already be durable, so the rest runs in a task
//! of its own: a client that hangs up cannot cut the write between forwarding and its
//! receipt, and an idempotency key's outcome is stored whatever the client does.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Response};
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::{Bundle, IdempotencyKey};
use serde_json::Value;

use crate::context::{Binding, Enforcement, Plane, Recorder, Routed, WriteContext};
use crate::enforce::checks;
use crate::enforce::delivery::{Delivery, Keep};
use crate::enforce::escrow;
use crate::enforce::facts::{InProcessGrant, Requester, WriteFacts};
use crate::enforce::idempotency::{self, Begin};
use crate::enforce::own::Own;
use crate::enforce::permit::{Denied, Disposition};
use crate::enforce::shadow;
use crate::enforce::stop;
use crate::enforce::verdict::Shape;
use crate::enforce::written::Written;
use crate::net::body::ProxyBody;
use crate::net::conn::ConnInfo;
use crate::net::problem::{Failure, Unfinished};

/// What an idempotency key is read from (`headers`) and what the request is judged by.
pub(crate) struct KeyRequest<'a> {
    pub headers: Cow<'a, HeaderMap>,
    pub method: Method,
    pub target: Cow<'a, str>,
    pub body: Cow<'a, [u8]>,
}

/// How one surface carries a write and answers it.
pub(crate) trait Leg: Send + Sync + Sized + 'static {
    /// Where the write was routed in the bundle that decides it: once, by the surface that
    /// made the leg.
    fn routed(&self) -> Routed;

    /// The facts checks 1–12 read.
    fn facts<'a>(
        &'a self,
        parts: &'a http::request::Parts,
        body: &'a [u8],
        binding: &Binding<'_>,
        who: &Requester,
    ) -> WriteFacts<'a>;

    /// The write as a bundle's contracts and rules judge its shape (the candidate's shadow).
    fn shape<'a>(&'a self, parts: &'a http::request::Parts, body: &'a [u8]) -> Shape<'a>;

    /// The write's operation, as freezes and budgets name it (SPEC §14).
    fn operation_key(&self, parts: &http::request::Parts, binding: &Binding<'_>) -> String;

    /// What the write's idempotency key is read from and judged by.
    fn key<'a>(&'a self, parts: &'a http::request::Parts, body: &'a [u8]) -> KeyRequest<'a>;

    /// A refusal, recorded, as this surface answers it.
    fn refuse(
        &self,
        rec: Recorder<'_>,
        denied: Denied,
        cx: &WriteContext,
        parts: &http::request::Parts,
        body: &[u8],
    ) -> impl Future<Output = Written> + Send;

    /// A stored outcome, replayed as this surface answers it.
    fn replay(
        &self,
        resp: Response<ProxyBody>,
        receipt: Option<Value>,
    ) -> impl Future<Output = Written> + Send;

    /// How a held write is answered.
    fn hold_answer(&self) -> escrow::Answer;

    /// Sends a permitted write and commits it.
    fn deliver(
        self,
        plane: Arc<Plane>,
        enf: Arc<Enforcement>,
        d: Delivery,
    ) -> impl Future<Output = Written> + Send;
}

/// A write as the engine takes it.
pub(crate) struct Write<L> {
    /// The request as the SoR will receive it (before the leg strips what is the sidecar's).
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub cx: WriteContext,
    /// The bundle version that decides this write from start to end.
    pub bundle: Option<Arc<Bundle>>,
    /// A lease the sidecar grants the write itself (an RCNS step).
    pub grant: Option<InProcessGrant>,
    pub leg: L,
}

/// Runs a write: its key rule and idempotency key, checks 1–12, then hold or delivery.
pub(crate) async fn run<L: Leg>(
    plane: &Arc<Plane>,
    enf: &Arc<Enforcement>,
    conn: &Arc<ConnInfo>,
    w: Write<L>,
) -> Written {
    let Write {
        parts,
        body,
        mut cx,
        bundle,
        grant,
        leg,
    } = w;
    let binding = leg.routed().binding(bundle.as_deref());
    cx.bind(bundle.as_deref(), &binding);
    // One version of the operator's rules decides this write, as one of the bundle does.
    let rules = plane.rules.load_full();
    cx.rules_digest = rules.as_ref().map(|r| r.digest_text().to_owned());
    if let Some(c) = plane.candidate.load().as_deref() {
        let now = shadow::InForce {
            bundle: bundle.as_deref(),
            rules: rules.as_deref(),
        };
        shadow::compare(plane, &cx, c, now, &leg.shape(&parts, &body));
    }
    let who = Requester::of(&plane.config, &parts, conn);
    let facts = WriteFacts {
        granted: grant,
        ..leg.facts(&parts, &body, &binding, &who)
    };
    // SPEC §14: an operator's freeze, before check 1 (and before a key is reserved).
    let mut keys = stop::Keys::of(leg.operation_key(&parts, &binding), &facts, &who);
    keys.also = cx.facing.clone();
    cx.operation_key = Some(keys.operation.clone());
    cx.resource_key = Some(keys.resource.clone());
    if let Some(denied) = stop::frozen(enf, &keys) {
        return leg
            .refuse(plane.recorder(), denied, &cx, &parts, &body)
            .await;
    }
    let keep = {
        let key = leg.key(&parts, &body);
        let required = binding
            .capability()
            .is_some_and(|c| c.contract.idempotency_key == IdempotencyKey::Required);
        if required && !key.headers.contains_key(idempotency::KEY_HEADER) {
            let refusal = Refusal::new(
                ErrorCode::IdempotencyKeyRequired,
                "the operation's contract requires an idempotency key",
            );
            return leg
                .refuse(plane.recorder(), refusal.into(), &cx, &parts, &body)
                .await;
        }
        let request = idempotency::Request {
            headers: &key.headers,
            method: &key.method,
            target: &key.target,
            body: &key.body,
            caller: who.caller.as_deref(),
        };
        let times = idempotency::KeyTimes::from_config(&plane.config);
        match idempotency::begin(enf, &request, times).await {
            Ok(None) => Keep::Nothing,
            Ok(Some(Begin::Fresh(pending))) => Keep::Key(pending),
            Ok(Some(Begin::Replay { resp, receipt })) => return leg.replay(resp, receipt).await,
            Err(refusal) => {
                return leg
                    .refuse(plane.recorder(), refusal.into(), &cx, &parts, &body)
                    .await
            }
        }
    };
    let checked = checks::check(
        checks::Handles {
            config: &plane.config,
            enf,
            upstream: &plane.upstream,
            rules: rules.as_deref(),
        },
        facts,
        &who,
        binding,
        checks::Stage {
            releasing: false,
            keys: &keys,
        },
    );
    let permit = match checked.await {
        Ok(p) => p,
        Err(denied) => {
            keep.release().await;
            return leg
                .refuse(plane.recorder(), denied, &cx, &parts, &body)
                .await;
        }
    };
    crate::enforce::rules::report(enf, &cx, &permit.ruled().report);
    let answer = leg.hold_answer();
    // A failed task is answered in the form its surface speaks.
    let rpc_id = match &answer {
        escrow::Answer::Http => None,
        escrow::Answer::Mcp { id, .. } => Some(id.clone()),
    };
    let trace_id = cx.trace_id.clone();
    let task = {
        let (plane, enf, conn) = (plane.clone(), enf.clone(), conn.clone());
        tokio::spawn(crate::telemetry::otlp::span::carried(async move {
            let hold = permit.disposition() == Disposition::Hold;
            let d = Delivery {
                permit,
                parts,
                body,
                conn,
                cx,
                keep,
                bundle,
            };
            if hold {
                return escrow::hold(&plane, &enf, d, &who, answer).await;
            }
            leg.deliver(plane, enf, d).await
        }))
    };
    match task.await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(error = %e, "write task failed");
            let own = Own::failed(Failure::Internal(Unfinished::Write), &trace_id);
            match rpc_id {
                None => Written::own(own),
                Some(id) => Written::own_rpc(own, id),
            }
        }
    }
}

/// Releases a held write (SPEC §5.4): every check again under the bundle in force now, then
/// the leg delivers it and `keep` (the escrow's final record) is stored with its receipt. A
/// refusal comes back as a [`Written`] with its code and rejection receipt.
pub(crate) async fn release<L: Leg>(
    plane: &Arc<Plane>,
    enf: &Arc<Enforcement>,
    conn: Arc<ConnInfo>,
    w: Write<L>,
    who: &Requester,
    keep: Keep,
) -> Written {
    let Write {
        parts,
        body,
        mut cx,
        bundle,
        leg,
        ..
    } = w;
    let binding = leg.routed().binding(bundle.as_deref());
    cx.bind(bundle.as_deref(), &binding);
    // The rules in force now decide the release, as the bundle in force now does.
    let rules = plane.rules.load_full();
    cx.rules_digest = rules.as_ref().map(|r| r.digest_text().to_owned());
    let facts = leg.facts(&parts, &body, &binding, who);
    // A freeze made while the write was held stops its release too (SPEC §14).
    let mut keys = stop::Keys::of(leg.operation_key(&parts, &binding), &facts, who);
    keys.also = cx.facing.clone();
    cx.operation_key = Some(keys.operation.clone());
    if let Some(denied) = stop::frozen(enf, &keys) {
        return leg
            .refuse(plane.recorder(), denied, &cx, &parts, &body)
            .await;
    }
    let checked = checks::check(
        checks::Handles {
            config: &plane.config,
            enf,
            upstream: &plane.upstream,
            rules: rules.as_deref(),
        },
        facts,
        who,
        binding,
        checks::Stage {
            releasing: true,
            keys: &keys,
        },
    );
    match checked.await {
        Ok(permit) => {
            crate::enforce::rules::report(enf, &cx, &permit.ruled().report);
            let d = Delivery {
                permit,
                parts,
                body,
                conn,
                cx,
                keep,
                bundle,
            };
            leg.deliver(plane.clone(), enf.clone(), d).await
        }
        Err(denied) => {
            leg.refuse(plane.recorder(), denied, &cx, &parts, &body)
                .await
        }
    }
}
