//! The composition of one invocation (`invoke`): its steps run one after another as
//! enforced writes under leases the sidecar grants the caller, and, when one fails, the
//! completed ones compensated, last first.

mod undo;

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderValue};
use palisade_policy::lease::RecoveryMode;
use palisade_policy::receipt::Attribution;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::rcns::compose::{self, StepRequest, ToolRequest};
use palisade_rich::rcns::recipes::Recipe;
use palisade_rich::rcns::SynthesizedContract;
use palisade_rich::SideEffect;
use serde_json::{json, Value};

use super::answer::json;
use crate::context::{AppState, Enforcement, Outcome, WriteContext};
use crate::enforce::facts::InProcessGrant;
use crate::enforce::receipts::Refused;
use crate::enforce::write::WriteRequest;
use crate::enforce::written::Written;
use crate::net::body::{self};
use crate::net::conn::ConnInfo;
use crate::net::headers;

type Answer = crate::enforce::own::Staged;

/// Headers of the invocation that do not travel to its steps: RCNS's own, the PTCL ones
/// (each step gets the sidecar's lease), and what describes the invocation's body.
const NOT_COPIED: &[&str] = &[
    "allow-rcns",
    "contract-synthesized",
    "session-id",
    "authority-scope",
    "idempotency-key",
    "content-length",
    "content-type",
    "agent-compensation-lease",
    "agent-compensation-inverse",
    "agent-fence-token",
    "agent-commit-receipt",
    "agent-dry-run",
];

/// One invocation's composition.
pub(super) struct Run {
    /// Per step: what admission granted it (`None`: its binding does not require admission).
    pub(super) admitted: Vec<Option<crate::admission::Admission>>,
    pub(super) state: Arc<AppState>,
    pub(super) enf: Arc<Enforcement>,
    pub(super) conn: Arc<ConnInfo>,
    /// The invocation: its identity and headers go to every step and every compensation.
    pub(super) parts: http::request::Parts,
    pub(super) cx: WriteContext,
    pub(super) recipe: Recipe,
    pub(super) bundle: Option<Arc<palisade_rich::Bundle>>,
    pub(super) invocation: String,
}

/// Why a step did not succeed, and its write if it was sent anyway.
struct Failed {
    refusal: Refusal,
    extra: Vec<(&'static str, Value)>,
    reached: Option<Done>,
}

/// A completed step: its lease and its commit receipt.
struct Done {
    lease_id: String,
    receipt: Value,
}

impl Run {
    pub(super) async fn run(self, input: Value, contract: SynthesizedContract) -> Answer {
        let mut answers: Vec<Value> = Vec::with_capacity(self.recipe.steps.len());
        let mut done: Vec<Done> = Vec::new();
        for (i, step) in self.recipe.steps.iter().enumerate() {
            let cxv = compose::context(&input, &answers);
            let ran = match &step.tool {
                // A step on an MCP tool (issue 37).
                Some(tool) => match compose::tool_request(i, tool, &cxv) {
                    Ok(req) => self.tool_step(i, step.capability, req).await,
                    Err(r) => return self.fail(i, r, Vec::new(), done).await,
                },
                None => {
                    let req = compose::step_request(i, step, &cxv).and_then(|r| canonical(i, r));
                    match req {
                        Ok(req) => self.step(i, step.capability, req).await,
                        Err(r) => return self.fail(i, r, Vec::new(), done).await,
                    }
                }
            };
            match ran {
                Ok((answer, d)) => {
                    answers.push(answer);
                    done.extend(d);
                }
                Err(f) => {
                    done.extend(f.reached);
                    return self.fail(i, f.refusal, f.extra, done).await;
                }
            }
        }
        let out = compose::output(&self.recipe, &compose::context(&input, &answers));
        let out = match out {
            Ok(o) => o,
            Err(r) => {
                let at = self.recipe.steps.len();
                return self.fail(at, r, Vec::new(), done).await;
            }
        };
        self.invoked("committed", done.len());
        let mut resp = json(200, &out);
        let receipts: Vec<&Value> = done.iter().map(|d| &d.receipt).collect();
        let h = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&contract.synthesis_id) {
            h.insert(super::headers::CONTRACT_SYNTHESIZED, v);
        }
        let encoded = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&receipts).unwrap_or_default());
        if let Ok(v) = HeaderValue::from_str(&encoded) {
            h.insert(super::headers::STEP_RECEIPTS, v);
        }
        Ok((resp, Outcome::Forwarded))
    }

    /// Runs step `i`: grants its lease, sends it through the write path.
    async fn step(
        &self,
        i: usize,
        capability: usize,
        req: StepRequest,
    ) -> Result<(Value, Option<Done>), Failed> {
        let (state, enf, conn) = (&self.state, &self.enf, &self.conn);
        let plain = |refusal: Refusal| Failed {
            refusal,
            extra: Vec::new(),
            reached: None,
        };
        let cap = self
            .bundle
            .as_deref()
            .and_then(|b| b.capabilities.get(capability));
        // A step that only reads (its contract's sideEffect) needs no lease and has nothing to
        // undo; its answer feeds the later steps' mappings.
        let reads = cap.is_some_and(|c| c.contract.side_effect == SideEffect::Read);
        let grant = if reads {
            None
        } else {
            Some(self.grant_for(&req).map_err(plain)?)
        };
        let lease_id = grant.as_ref().map(|g| g.lease_id.clone());
        let mut sp = http::Request::builder()
            .method(req.method.as_str())
            .uri(req.path.as_str())
            .body(())
            .map_err(|_| {
                plain(Refusal::new(
                    ErrorCode::BadRequest,
                    "a step's request cannot be built",
                ))
            })?
            .into_parts()
            .0;
        sp.headers = self.step_headers();
        // The step acts for the invocation's caller: the same one, not worked out again.
        sp.extensions
            .insert(crate::net::conn::Caller(self.cx.caller.clone()));
        let required = cap
            .is_some_and(|c| c.contract.idempotency_key == palisade_rich::IdempotencyKey::Required);
        if required {
            if let Ok(v) = HeaderValue::from_str(&format!("rcns-{}-{i}", self.invocation)) {
                sp.headers.insert("idempotency-key", v);
            }
        }
        let bytes = match &req.body {
            Some(b) => {
                sp.headers.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                Bytes::from(serde_json::to_vec(b).unwrap_or_default())
            }
            None => Bytes::new(),
        };
        let scx = self.step_cx(i, sp.method.clone(), format!("{} {}", req.method, req.path));
        let written = match self.admitted_input(i, req.body.as_ref(), &scx).await {
            Err(refused) => Written::refused(refused),
            Ok(()) => {
                let req = WriteRequest {
                    parts: sp,
                    body: bytes,
                    cx: scx,
                    bundle: self.bundle.clone(),
                    routed: crate::context::Routed::Bound(capability),
                    grant,
                    // Built by the recipe as a value: written once, parsed never.
                    input: req.body.clone(),
                };
                crate::enforce::write::run(&state.plane, enf, conn, req).await
            }
        };
        let status = written.resp.status();
        let code = written.code;
        let receipt = written.receipt;
        let answer =
            body::collect_proxy(written.resp.into_body(), state.config.limits.max_response)
                .await
                .unwrap_or_default();
        let answer: Value = serde_json::from_slice(&answer).unwrap_or(Value::Null);
        if status.is_success() {
            let receipt = receipt.unwrap_or(Value::Null);
            let done = lease_id.map(|lease_id| Done { lease_id, receipt });
            return Ok((answer, done));
        }
        // A refusal or failure of ours names its code and the step's receipt (its rejection,
        // or the commit of a write that was sent); an upstream's error body is the SoR's and
        // stays out of the answer.
        // A commit receipt means the write was sent. The SoR's own 4xx did not apply it; a
        // 5xx, a timeout or an answer the output contract refused may have: that step is
        // compensated with the others.
        let sent = receipt.clone().filter(|r| r["receipt"]["kind"] == "commit");
        let reached = match (sent, lease_id) {
            (Some(receipt), Some(lease_id)) if !status.is_client_error() => {
                Some(Done { lease_id, receipt })
            }
            _ => None,
        };
        let code = code.map(|c| c.as_str().to_owned());
        Err(step_failed(code, status.as_u16(), receipt, reached))
    }

    /// Runs tool step `i`: its lease granted with the recipe's inverse tool call staged, the
    /// call through the write engine (`tool_steps`).
    async fn tool_step(
        &self,
        i: usize,
        capability: usize,
        req: ToolRequest,
    ) -> Result<(Value, Option<Done>), Failed> {
        let headers = self.step_headers();
        let scx = self.step_cx(i, http::Method::POST, format!("tools/call {}", req.name));
        if let Err(refused) = self.admitted_input(i, Some(&req.arguments), &scx).await {
            let (code, status) = (refused.refusal.code.as_str(), refused.refusal.status());
            return Err(step_failed(
                Some(code.into()),
                status,
                refused.receipt,
                None,
            ));
        }
        let Some(bundle) = &self.bundle else {
            return Err(step_failed(Some("ERR_INTERNAL".into()), 500, None, None));
        };
        let step = super::tool_steps::ToolStep {
            state: &self.state,
            enf: &self.enf,
            conn: &self.conn,
            headers,
            cx: scx,
            bundle,
            capability,
            req,
            caller: self.conn.caller(&self.parts),
            window_ms: self.window_ms(),
        };
        let out = step.run().await;
        let done = |lease_id: Option<String>, receipt: Option<Value>| {
            lease_id.map(|lease_id| Done {
                lease_id,
                receipt: receipt.unwrap_or(Value::Null),
            })
        };
        if out.ok {
            return Ok((out.answer, done(out.lease_id, out.receipt)));
        }
        let reached = if out.maybe_applied {
            done(out.lease_id, out.receipt.clone())
        } else {
            None
        };
        Err(step_failed(out.code, out.status, out.receipt, reached))
    }

    /// The lease a write step runs under: SNAPSHOT_RESTORE, granted to the caller in process
    /// when the step is checked, its epoch and pre-image read then, under the resource's lock
    /// (issue 35: no lease signed to be verified a moment later, one pre-image fetch, the
    /// store work of one plain enforced write).
    fn grant_for(&self, req: &StepRequest) -> Result<InProcessGrant, Refusal> {
        let caller = self.conn.caller(&self.parts).ok_or_else(|| {
            Refusal::new(
                ErrorCode::CallerUnidentified,
                "a composed write needs the caller's identity for its leases",
            )
        })?;
        // SNAPSHOT_RESTORE: the pre-image the write replaces is kept and put back on
        // compensation. The inverse names the step's own request, so the lease says what it
        // covers; it is not what compensation sends.
        let nominal = json!({"method": req.method, "path": req.path});
        let inverse = palisade_policy::inverse::parse(nominal.to_string().as_bytes(), 8)?;
        Ok(InProcessGrant {
            lease_id: format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            caller,
            mode: RecoveryMode::SnapshotRestore,
            window_ms: self.window_ms(),
            inverse,
        })
    }

    /// The invocation's headers a step carries (not RCNS's, PTCL's or the body's).
    fn step_headers(&self) -> http::HeaderMap {
        let mut out = http::HeaderMap::new();
        for (name, value) in &self.parts.headers {
            if !NOT_COPIED.contains(&name.as_str()) {
                out.append(name.clone(), value.clone());
            }
        }
        headers::strip_hop_by_hop(&mut out);
        out
    }

    /// Step `i`'s context: the invocation's caller and trace, its attribution with the step.
    fn step_cx(&self, i: usize, method: http::Method, operation: String) -> WriteContext {
        let mut scx = WriteContext::new(method, self.cx.trace_id.clone(), operation);
        scx.caller = self.cx.caller.clone();
        scx.attribution = self
            .cx
            .attribution
            .clone()
            .map(|a| Attribution { step: Some(i), ..a });
        scx
    }

    /// A granted lease's recovery window: `max_grant`, at most five minutes.
    fn window_ms(&self) -> u64 {
        u64::try_from(self.state.config.max_grant.as_millis())
            .unwrap_or(u64::MAX)
            .min(300_000)
    }

    /// Step `i`'s input against the bound its token granted, if admission applies to it.
    async fn admitted_input(
        &self,
        i: usize,
        input: Option<&Value>,
        cx: &WriteContext,
    ) -> Result<(), Refused> {
        let (Some(Some(a)), Some(g), Some(b)) = (
            self.admitted.get(i),
            self.state.gate(),
            self.bundle.as_deref(),
        ) else {
            return Ok(());
        };
        let Some(cap) = self
            .recipe
            .steps
            .get(i)
            .and_then(|s| b.capabilities.get(s.capability))
        else {
            return Ok(());
        };
        let call = palisade_rich::admission::Call {
            binding_id: &b.binding_id,
            operation: &cap.operation,
            contract_digest: &cap.contract.digest,
        };
        let mut cx = cx.clone();
        cx.bind(Some(b), &crate::context::Binding::Bound(cap));
        crate::admission::check_input(g, a, input, &cx, call).await
    }
}

/// A step that did not succeed: its status, the sidecar's code and the step's receipt as
/// members of the answer; the composition's status is the step's 4xx, else 502.
fn step_failed(
    code: Option<String>,
    status: u16,
    receipt: Option<Value>,
    reached: Option<Done>,
) -> Failed {
    let mut extra = vec![("step_status", json!(status))];
    if let Some(code) = code {
        extra.push(("step_code", json!(code)));
    }
    if let Some(r) = receipt {
        extra.push(("step_receipt", r));
    }
    let status = if (400..500).contains(&status) {
        status
    } else {
        502
    };
    let refusal = Refusal::new(
        ErrorCode::RcnsStepFailed,
        "a step of the composition did not succeed; every step that reached the SoR was compensated",
    )
    .with_status(status)
    .with_reason("step-failed");
    Failed {
        refusal,
        extra,
        reached,
    }
}

/// A step's path must already be in the one form the sidecar decides on.
fn canonical(i: usize, r: StepRequest) -> Result<StepRequest, Refusal> {
    match palisade_policy::path::canonical_path(&r.path) {
        Ok(p) if p == r.path => Ok(r),
        _ => Err(Refusal::new(
            ErrorCode::RcnsStepFailed,
            "a step's path has no canonical form",
        )
        .with_status(422)
        .with_reason("step-mapping-failed")
        .with_location(format!("/steps/{i}"))),
    }
}
