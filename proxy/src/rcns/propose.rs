//! PROPOSE (seed 000 §3.2–§3.8), and an unregistered pair addressed directly (§3.1's two
//! delivery modes).
//!
//! ```text
//! gate locks 1–3 (464) → rate per agent (429) → body (413, 400) → evaluate (seed order, lock 4)
//!   → refused: attempt kept, (agent, task) rejections counted (escalate after 3)
//!   → accepted: contract stored (Idempotency-Key: its id derives from the key) → 263
//! ```

mod attempts;

use http::{header, HeaderValue, Response};
use hyper::body::Incoming;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::rcns::contract::{ORIGIN_GATE, ORIGIN_PROPOSE};
use palisade_rich::rcns::evaluate::{self, Refused};
use palisade_rich::rcns::{Caller, Matched, Proposal, SynthesizedContract};
use serde_json::{json, Value};

use super::answer::{json, refusal, refused};
use super::identity::Who;
use super::inventory::store_down;
use crate::context::{Enforcement, Outcome, Plane, RcnsState, WriteContext};
use crate::enforce::own::Own;
use crate::enforce::receipts;
use crate::net::body::{self, CollectError, ProxyBody};
use crate::net::rate::Admit;
use crate::store::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord};

/// Largest PROPOSE body read (schemas included).
const MAX_PROPOSAL: u64 = 256 * 1024;
/// Rejections of one (agent, task) after which the answer says to escalate (seed 000 §3.3).
const ESCALATE_AFTER: u64 = 3;
/// Attempts kept per agent (older ones expire with the session TTL).
const ATTEMPTS_PER_AGENT: u64 = 1000;

type Answer = crate::enforce::own::Staged;

/// What negotiation works with: the data plane's handles, the store and clock, and
/// `[rcns]` (the callers file and the PROPOSE rate) when configured.
#[derive(Clone, Copy)]
pub struct Negotiation<'a> {
    pub plane: &'a Plane,
    pub enf: &'a Enforcement,
    pub rcns: Option<&'a RcnsState>,
}

/// What a PROPOSE or an implicit request is decided with.
struct Ask<'a> {
    plane: &'a Plane,
    enf: &'a Enforcement,
    rcns: &'a RcnsState,
    caller: Caller,
    cx: WriteContext,
    attempt_id: String,
}

pub async fn handle(
    n: Negotiation<'_>,
    parts: &http::request::Parts,
    body: Incoming,
    who: &Who,
    cx: WriteContext,
) -> Answer {
    let mut ask = match open(n, parts, who, cx).await {
        Ok(a) => a,
        Err(own) => return Err(own),
    };
    let limit = MAX_PROPOSAL.min(n.plane.config.limits.max_body);
    let bytes = match body::read_request_body(body, limit).await {
        Ok(b) => b,
        Err(CollectError::TooLarge(_)) => {
            let r = Refusal::new(
                ErrorCode::BodyTooLarge,
                "a PROPOSE body is limited to 256 KiB",
            );
            return refused(n.plane.recorder(), &ask.cx, r, Vec::new()).await;
        }
        Err(CollectError::Read(_)) => {
            let r = Refusal::new(ErrorCode::BadRequest, "request body could not be read");
            return refused(n.plane.recorder(), &ask.cx, r, Vec::new()).await;
        }
    };
    let proposal = match Proposal::parse(&bytes) {
        Ok(p) => p,
        Err(r) => return ask.refuse(None, Refused::Plain(r)).await,
    };
    let key = match super::headers::idempotency_key(parts) {
        Ok(k) => k,
        Err(r) => return ask.refuse(Some(&proposal), Refused::Plain(r)).await,
    };
    let session = match super::headers::session_of(parts) {
        Ok(s) => s,
        Err(r) => return ask.refuse(Some(&proposal), Refused::Plain(r)).await,
    };
    let made = Made {
        origin: ORIGIN_PROPOSE,
        fingerprint: key.as_ref().map(|_| Sha256Digest::of(&bytes).to_hex()),
        key,
        session,
    };
    ask.decide(&proposal, who, made).await
}

/// An unregistered pair a recipe matches, addressed with `Allow-RCNS: true`: 461 under
/// confirm-first; under optimistic, the contract is made at once (263) and the agent sends
/// its request again under it. The request's body is not run either way.
pub async fn implicit(
    n: Negotiation<'_>,
    parts: &http::request::Parts,
    who: &Who,
    cx: WriteContext,
) -> Answer {
    let mut ask = match open(n, parts, who, cx).await {
        Ok(a) => a,
        Err(own) => return Err(own),
    };
    let bundle = n.plane.bundle.load_full();
    let recipes = bundle.as_deref().and_then(|b| b.recipes.as_deref());
    let (method, path) = (parts.method.as_str(), parts.uri.path());
    let Some(recipe) = recipes.and_then(|r| r.find(method, path)) else {
        // The bundle was swapped since routing: nothing matches any more.
        let r = Refusal::new(
            ErrorCode::NotFound,
            "no recipe matches this method and path",
        );
        return refused(n.plane.recorder(), &ask.cx, r, Vec::new()).await;
    };
    if ask.rcns.config.delivery == crate::config::Delivery::ConfirmFirst {
        let r = Refusal::new(
            ErrorCode::RcnsProposeFirst,
            "this endpoint is not registered; PROPOSE it first (confirm-first delivery)",
        );
        let extra = vec![
            ("patterns", Value::Array(vec![recipe.pattern()])),
            (
                "propose",
                json!(format!("{}propose", super::headers::WELL_KNOWN)),
            ),
        ];
        return refused(n.plane.recorder(), &ask.cx, r, extra).await;
    }
    let semantic = recipe.source.get("semantic").cloned().unwrap_or_else(
        || json!({"intent": recipe.description.clone().unwrap_or_else(|| recipe.name.clone())}),
    );
    let proposal = Proposal {
        task_id: None,
        name: None,
        method: method.to_owned(),
        path: path.to_owned(),
        description: None,
        semantic: Some(semantic),
        input_schema: None,
        output_schema: None,
        persistent: false,
        form: "implicit",
    };
    let session = match super::headers::session_of(parts) {
        Ok(s) => s,
        Err(r) => return ask.refuse(Some(&proposal), Refused::Plain(r)).await,
    };
    let made = Made {
        origin: ORIGIN_GATE,
        key: None,
        fingerprint: None,
        session,
    };
    ask.decide(&proposal, who, made).await
}

/// Locks 1–3 of the gate and the per-agent rate.
async fn open<'a>(
    n: Negotiation<'a>,
    parts: &http::request::Parts,
    who: &Who,
    cx: WriteContext,
) -> Result<Ask<'a>, Own> {
    let enabled = n.rcns.is_some_and(|r| r.config.enabled);
    let allow = super::headers::allowed(parts.headers.get(super::headers::ALLOW_RCNS));
    if let Err(g) = evaluate::gate(enabled, allow, who.caller(), &who.claim) {
        let extra = vec![("lock", json!(g.lock))];
        return Err(refusal(n.plane.recorder(), &cx, g.refusal, extra).await);
    }
    let (Some(rcns), Some(caller)) = (n.rcns, who.caller()) else {
        // The gate opened only with both; kept as a refusal rather than a panic.
        let r = Refusal::new(ErrorCode::Internal, "negotiation state missing");
        return Err(refusal(n.plane.recorder(), &cx, r, Vec::new()).await);
    };
    if let Admit::No {
        retry_after,
        receipt,
    } = rcns
        .rate
        .check(caller.agent_id.clone(), n.enf.clock.now_ms())
    {
        let r = Refusal::new(
            ErrorCode::RateLimited,
            "too many PROPOSE requests from this agent (rcns.rate_limit)",
        );
        let refused = if receipt {
            receipts::record(n.plane.recorder(), r, &cx, receipts::Evidence::default()).await
        } else {
            // Past the first refusal of the window: counted, not receipted (a flood of
            // PROPOSEs must not become a flood of durable writes).
            receipts::counted(n.plane.recorder(), r, &cx)
        };
        let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
        let retry = HeaderValue::from(secs.max(1));
        return Err(refused.with_header(header::RETRY_AFTER, retry).into());
    }
    Ok(Ask {
        plane: n.plane,
        enf: n.enf,
        rcns,
        caller: caller.clone(),
        cx,
        attempt_id: format!("att_{}", uuid::Uuid::now_v7().simple()),
    })
}

/// How a contract is being made.
struct Made {
    origin: &'static str,
    key: Option<String>,
    fingerprint: Option<String>,
    session: Option<String>,
}

impl Ask<'_> {
    /// Seed 000 §3.6 under the bundle in force, then the refusal or the contract.
    async fn decide(&mut self, p: &Proposal, who: &Who, made: Made) -> Answer {
        let bundle = self.plane.bundle.load_full();
        let recipes = bundle.as_deref().and_then(|b| b.recipes.as_deref());
        let caller = self.caller.clone();
        match evaluate::evaluate(p, &caller, &who.claim, recipes, bundle.as_deref()) {
            Err(why) => self.refuse(Some(p), why).await,
            Ok(m) => self.synthesize(p, &m, made).await,
        }
    }

    async fn refuse(&mut self, p: Option<&Proposal>, why: Refused) -> Answer {
        let mut extra = vec![("rcns_attempt_id", json!(self.attempt_id))];
        match &why {
            Refused::Gate(g) => extra.push(("lock", json!(g.lock))),
            Refused::Scopes(_, scopes) => extra.push(("required_scopes", json!(scopes))),
            Refused::Impossible(_) => {
                let similar = p.map(|p| self.similar(p)).unwrap_or_default();
                extra.push(("similar", Value::Array(similar)));
            }
            Refused::Plain(_) => {}
        }
        let r = why.refusal().clone();
        if r.code == ErrorCode::RcnsRejected {
            if let Some(task) = p.and_then(|p| p.task_id.as_deref()) {
                let n = self.count_rejection(task).await;
                extra.push(("rejections", json!(n)));
                if n >= ESCALATE_AFTER {
                    // Seed 000 §3.3: after three rejections the agent MUST ESCALATE.
                    extra.push(("escalate", json!(true)));
                }
            }
        }
        self.keep_attempt(p, Err(&r)).await;
        refused(self.plane.recorder(), &self.cx, r, extra).await
    }

    /// Patterns with the proposal's method or path (seed 000 §3.3: the answer SHOULD name
    /// entries that satisfy a similar capability).
    fn similar(&self, p: &Proposal) -> Vec<Value> {
        let bundle = self.plane.bundle.load();
        let Some(set) = bundle.as_deref().and_then(|b| b.recipes.as_deref()) else {
            return Vec::new();
        };
        set.recipes
            .iter()
            .filter(|r| r.method == p.method || r.path.matches(&p.path))
            .take(5)
            .map(|r| r.pattern())
            .collect()
    }

    async fn synthesize(&mut self, p: &Proposal, m: &Matched, made: Made) -> Answer {
        let cfg = &self.rcns.config;
        let now = self.enf.clock.now_ms();
        let persistent = p.persistent && cfg.persistent;
        let ttl = if persistent {
            cfg.persistent_ttl
        } else {
            cfg.session_ttl
        };
        let session = (!persistent).then(|| {
            made.session
                .clone()
                .unwrap_or_else(|| format!("ses_{}", uuid::Uuid::new_v4().simple()))
        });
        let agent = self.caller.agent_id.clone();
        let synthesis_id = match &made.key {
            // The same key from the same agent names the same contract, on every replica.
            Some(k) => {
                let d = Sha256Digest::of(format!("{agent}\0{k}").as_bytes()).to_hex();
                format!("syn_{}", &d[..32])
            }
            None => format!("syn_{}", uuid::Uuid::new_v4().simple()),
        };
        let recipe = &m.recipe;
        let contract = SynthesizedContract {
            synthesis_id: synthesis_id.clone(),
            method: p.method.clone(),
            path: p.path.clone(),
            endpoint: recipe.endpoint(&p.method, &p.path),
            recipe_name: recipe.name.clone(),
            recipe_version: recipe.version.clone(),
            recipe: recipe.source.clone(),
            originating_agent_id: agent.clone(),
            negotiation_origin: made.origin,
            task_id: p.task_id.clone(),
            persistent,
            session,
            issued_at_ms: now,
            expires_at_ms: now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
            idle_timeout_ms: (!persistent).then(|| ms(cfg.session_idle)),
            revoked: false,
            required_scopes: recipe.all_scopes.iter().cloned().collect(),
            fingerprint: made.fingerprint.clone(),
        };
        let record = RcnsRecord {
            kind: RcnsKind::Contract,
            key: synthesis_id,
            owner: agent,
            body: contract.to_record(),
            expires_ms: contract.idle_expiry(now),
        };
        let mode = RcnsPutMode::Create {
            per_owner: cfg.max_contracts_per_agent,
            total: cfg.max_contracts,
        };
        let contract = match self.enf.store.rcns_put(record, mode).await {
            Ok(RcnsPut::Stored) => contract,
            Ok(RcnsPut::Exists(old)) => {
                let old = SynthesizedContract::from_record(&old.body);
                match old {
                    Some(old) if old.fingerprint == made.fingerprint => {
                        // The same PROPOSE again: the same synthesis, answered again.
                        return Ok((
                            approved(&old, p.persistent && !old.persistent),
                            Outcome::Forwarded,
                        ));
                    }
                    _ => {
                        let r = Refusal::new(
                            ErrorCode::IdempotencyKeyReused,
                            "this Idempotency-Key was used for another PROPOSE",
                        );
                        return self.refuse(Some(p), Refused::Plain(r)).await;
                    }
                }
            }
            Ok(RcnsPut::OwnerFull | RcnsPut::Full | RcnsPut::Missing) => {
                let r = Refusal::new(
                    ErrorCode::RcnsRejected,
                    "the agent (rcns.max_contracts_per_agent) or the server (rcns.max_contracts) holds as many live contracts as policy allows",
                )
                .with_reason("policy-refused");
                return self.refuse(Some(p), Refused::Plain(r)).await;
            }
            Err(e) => return Err(store_down(self.plane.recorder(), &self.cx, &e).await),
        };
        let hash = contract.contract_hash();
        self.keep_attempt(Some(p), Ok(&contract)).await;
        self.enf.drift.lifecycle(json!({
            "event": "rcns_contract_synthesized",
            "eventId": uuid::Uuid::now_v7().to_string(),
            "timestamp": self.enf.now_rfc3339(),
            "traceId": self.cx.trace_id,
            "synthesis_id": contract.synthesis_id,
            "contract_hash": hash,
            "negotiation_origin": contract.negotiation_origin,
            "originating_agent_id": contract.originating_agent_id,
            "recipe_lineage": {"recipe_name": contract.recipe_name, "recipe_version": contract.recipe_version},
        }));
        metrics::counter!("palisade_rcns_contracts_synthesized_total", "origin" => contract.negotiation_origin).increment(1);
        Ok((
            approved(&contract, p.persistent && !persistent),
            Outcome::Forwarded,
        ))
    }
}

/// The 263 answer, with `Contract-Synthesized` and the session.
fn approved(c: &SynthesizedContract, persistent_refused: bool) -> Response<ProxyBody> {
    let mut resp = json(263, &c.approved(persistent_refused));
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&c.synthesis_id) {
        h.insert(super::headers::CONTRACT_SYNTHESIZED, v);
    }
    if let Some(v) = c
        .session
        .as_deref()
        .and_then(|s| HeaderValue::from_str(s).ok())
    {
        h.insert(super::headers::SESSION, v);
    }
    resp
}

fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
