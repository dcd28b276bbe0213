//! Invoking a synthesized endpoint (seed 000 §3.7): `<METHOD> <path>` with
//! `Contract-Synthesized: <synthesis_id>` (and the contract's `Session-Id`, when it is
//! session-scoped). The contract's captured recipe runs step by step, every step an
//! ordinary enforced write:
//!
//! ```text
//! contract: live, the caller's, not revoked, this session, this method and path (464 / 404)
//!   → authority again: every captured scope granted and claimed (455 / 262)
//!   → the captured recipe compiled against the bundle in force (464 synthesis-error)
//!   → input against the endpoint's input schema (422)
//!   → [own task] for each step: its request from the mappings → a SNAPSHOT_RESTORE lease
//!     granted by the sidecar's lease authority for the caller → enforce::write (checks 1–12,
//!     fence, pre-image kept, receipt with the contract's attribution)
//!   → a step that fails: the completed ones compensated, last first (their snapshots put
//!     back) → 4xx/502 ERR_RCNS_STEP_FAILED naming the step, its receipts and the
//!     compensations
//!   → all done: the answer from the output mapping, checked against the output schema
//! ```
//! The composition runs in a task of its own, so a client that hangs up cannot leave it
//! half done without its compensations.

use std::sync::Arc;

use hyper::body::Incoming;
use palisade_policy::receipt::Attribution;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::rcns::invocation::Invoking;
use palisade_rich::rcns::recipes::compile_recipe;
use palisade_rich::rcns::SynthesizedContract;
use serde_json::json;

use super::answer::refused;
use super::identity::Who;
use super::inventory::{store_down, unidentified};
use crate::context::{Call, Enforcement, WriteContext};
use crate::enforce::own::Own;
use crate::net::body::{self, CollectError};
use crate::net::problem::{Failure, Unfinished};
use crate::store::RcnsKind;

type Answer = crate::enforce::own::Staged;

/// Which contract a request invokes (`Contract-Synthesized`), who invokes it, and the
/// credential admission took off the request.
pub struct Invocation<'a> {
    pub id: String,
    pub who: &'a Who,
    pub presented: Option<&'a crate::admission::Presented>,
}

pub async fn handle(
    call: Call<'_>,
    enf: &Arc<Enforcement>,
    req: http::Request<Incoming>,
    inv: Invocation<'_>,
) -> Answer {
    let Call {
        state,
        conn,
        mut cx,
    } = call;
    let (parts, body) = req.into_parts();
    let Invocation { id, who, presented } = inv;
    let refuse = |r: Refusal| Refusal::with_reason(r, "synthesis-error");
    if !state.rcns.as_ref().is_some_and(|r| r.config.enabled) {
        let r = Refusal::new(
            ErrorCode::RcnsRefused,
            "contract negotiation is disabled on this server",
        )
        .with_reason("rcns-disabled");
        return refused(state.recorder(), &cx, r, vec![("lock", json!(1))]).await;
    }
    let Some(caller) = who.caller() else {
        return Err(unidentified(state.recorder(), who, &cx).await);
    };
    // Our ids are `syn_` and 32 hex; anything much longer names nothing worth a lookup.
    let looked_up = if id.len() <= 128 {
        enf.store.rcns_get(RcnsKind::Contract, &id).await
    } else {
        Ok(None)
    };
    let contract = match looked_up {
        Ok(Some(r)) => SynthesizedContract::from_record(&r.body),
        Ok(None) => {
            let r = Refusal::new(
                ErrorCode::NotFound,
                "no live contract with this synthesis_id (it never was, or it expired)",
            );
            return refused(state.recorder(), &cx, r, Vec::new()).await;
        }
        Err(e) => return Err(store_down(state.recorder(), &cx, &e).await),
    };
    let Some(contract) = contract else {
        let r = Refusal::new(ErrorCode::Internal, "the stored contract cannot be read");
        return refused(state.recorder(), &cx, r, Vec::new()).await;
    };
    // Every receipt from here names the contract, refusals included.
    cx.attribution = Some(Attribution {
        synthesis_id: contract.synthesis_id.clone(),
        contract_hash: contract.contract_hash(),
        negotiation_origin: contract.negotiation_origin.to_owned(),
        step: None,
    });
    let session = parts
        .headers
        .get(super::headers::SESSION)
        .and_then(|v| v.to_str().ok());
    let invoking = Invoking {
        agent_id: &caller.agent_id,
        session,
        method: parts.method.as_str(),
        path: parts.uri.path(),
        granted: &caller.scopes,
        claimed: &who.claim,
    };
    if let Err(no) = palisade_rich::rcns::invocation::check(&contract, &invoking) {
        let extra = if no.missing_scopes.is_empty() {
            Vec::new()
        } else {
            vec![("required_scopes", json!(no.missing_scopes))]
        };
        return refused(state.recorder(), &cx, no.refusal, extra).await;
    }
    // A use moves a session-scoped contract's idle timeout (never past its expires_at).
    let touch = crate::store::RcnsRecord {
        kind: RcnsKind::Contract,
        key: contract.synthesis_id.clone(),
        owner: contract.originating_agent_id.clone(),
        body: serde_json::Value::Null,
        expires_ms: contract.idle_expiry(enf.clock.now_ms()),
    };
    if contract.idle_timeout_ms.is_some() {
        match enf
            .store
            .rcns_put(touch, crate::store::RcnsPutMode::Touch)
            .await
        {
            Ok(crate::store::RcnsPut::Stored) => {}
            Ok(_) => {
                let r = Refusal::new(ErrorCode::NotFound, "the contract expired meanwhile");
                return refused(state.recorder(), &cx, r, Vec::new()).await;
            }
            Err(e) => return Err(store_down(state.recorder(), &cx, &e).await),
        }
    }
    let bundle = state.bundle.load_full();
    let caps = bundle
        .as_deref()
        .map(|b| b.capabilities.as_slice())
        .unwrap_or_default();
    let recipe = compile_recipe(&contract.recipe, "contract", caps, None, &mut Vec::new());
    let Some(recipe) = recipe else {
        let r = refuse(Refusal::new(ErrorCode::RcnsRefused, "the contract's recipe no longer runs against the bundle in force (a step's capability is gone)"));
        return refused(state.recorder(), &cx, r, Vec::new()).await;
    };
    let input = match input_of(&state.config.limits, body, &recipe).await {
        Ok(v) => v,
        Err(r) => return refused(state.recorder(), &cx, r, Vec::new()).await,
    };
    let admitted = match admit_steps(state.gate(), &recipe, bundle.as_deref(), presented, &cx).await
    {
        Ok(a) => a,
        Err(refused) => return Err(refused.into()),
    };
    let trace_id = cx.trace_id.clone();
    let run = super::steps::Run {
        admitted,
        state: state.clone(),
        enf: enf.clone(),
        conn: conn.clone(),
        parts,
        cx,
        recipe,
        bundle,
        invocation: uuid::Uuid::now_v7().simple().to_string(),
    };
    // Its own task: a composition is never left half done because the client went away.
    match tokio::spawn(run.run(input, contract)).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!(error = %e, "composition task failed");
            Err(Own::failed(
                Failure::Internal(Unfinished::Composition),
                &trace_id,
            ))
        }
    }
}

/// Admission (SPEC §13) of an invocation's steps: where a step's binding requires it, the
/// token must admit that step's operation and contract digest, all of them before the first
/// step runs (each step's input is held to its granted bound when it is built). Per step:
/// what was admitted, `None` where admission does not apply.
async fn admit_steps(
    gate: Option<crate::admission::Gate<'_>>,
    recipe: &palisade_rich::rcns::Recipe,
    bundle: Option<&palisade_rich::Bundle>,
    presented: Option<&crate::admission::Presented>,
    cx: &WriteContext,
) -> Result<Vec<Option<crate::admission::Admission>>, crate::enforce::receipts::Refused> {
    let mut admitted = Vec::with_capacity(recipe.steps.len());
    let (Some(g), Some(b)) = (gate, bundle) else {
        return Ok(admitted);
    };
    let none = crate::admission::Presented::None;
    let presented = presented.unwrap_or(&none);
    for step in &recipe.steps {
        let Some(cap) = b.capabilities.get(step.capability) else {
            admitted.push(None);
            continue;
        };
        if !crate::admission::required(g.adm, cap) {
            admitted.push(None);
            continue;
        }
        let mut scx = cx.clone();
        scx.bind(Some(b), &crate::context::Binding::Bound(cap));
        admitted.push(Some(
            crate::admission::gate(g, presented, (b, cap), &scx).await?,
        ));
    }
    Ok(admitted)
}

/// The invocation's body: read (≤ `limits.max_body`), one I-JSON document, valid against the
/// endpoint's input schema.
async fn input_of(
    limits: &crate::config::LimitsSection,
    body: Incoming,
    recipe: &palisade_rich::rcns::Recipe,
) -> Result<serde_json::Value, Refusal> {
    let bytes = match body::read_request_body(body, limits.max_body).await {
        Ok(b) => b,
        Err(CollectError::TooLarge(_)) => {
            return Err(Refusal::new(
                ErrorCode::BodyTooLarge,
                "request body exceeds limits.max_body",
            ))
        }
        Err(CollectError::Read(_)) => {
            return Err(Refusal::new(
                ErrorCode::BadRequest,
                "request body could not be read",
            ))
        }
    };
    let v = palisade_policy::json::parse(&bytes, limits.max_json_depth).map_err(|_| {
        Refusal::new(
            ErrorCode::ContractInput,
            "the body is not an I-JSON document",
        )
    })?;
    recipe.input_schema.check(&v).map_err(|viol| {
        Refusal::new(
            ErrorCode::ContractInput,
            "the body violates the endpoint's input schema",
        )
        .with_location(viol.instance_location)
    })?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt as _;

    /// Issue 55: a failed composition named no instance and no trace id, and was counted as
    /// refused.
    #[tokio::test]
    async fn a_failed_composition_is_an_error_with_its_instance_and_trace_id() {
        // What the spawned composition's failure is answered with (`handle`), rendered as
        // pipeline::handle renders it.
        let trace: Arc<str> = Arc::from("4bf92f3577b34da6a3ce929d0e0e4736");
        let own = Own::failed(Failure::Internal(Unfinished::Composition), &trace);
        let (resp, outcome) = own.answer();
        assert!(matches!(outcome, crate::context::Outcome::Error));
        assert_eq!(resp.status(), http::StatusCode::INTERNAL_SERVER_ERROR);
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        let doc: serde_json::Value = serde_json::from_slice(&bytes).expect("problem JSON");
        assert_eq!(doc["code"], "ERR_INTERNAL");
        assert_eq!(doc["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
        let instance = doc["instance"].as_str().expect("instance");
        assert!(uuid::Uuid::parse_str(instance).is_ok(), "{instance}");
    }
}
