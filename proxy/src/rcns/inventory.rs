//! DISCOVER /patterns, DISCOVER /contracts, INSPECT target=contract and target=rcns-attempt
//! (seed 000 §4.1, §4.2, §1.1).
//!
//! Patterns are public and answered even when RCNS is off (saying so); contracts and attempts
//! are their agent's, and every agent's only under `inspect:all`.

use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::rcns::SynthesizedContract;
use serde_json::{json, Value};

use super::answer::{json, refusal, refused};
use super::identity::Who;
use crate::context::{Enforcement, Outcome, Recorder, WriteContext};
use crate::enforce::own::{Own, Staged};
use crate::store::{RcnsKind, RcnsRecord};

/// Most entries one DISCOVER /contracts lists.
pub const MAX_LISTED: usize = 1000;

pub fn patterns(enabled: bool, bundle: Option<&palisade_rich::Bundle>) -> Staged {
    let patterns: Vec<Value> = bundle
        .and_then(|b| b.recipes.as_deref())
        .map(|set| set.recipes.iter().map(|r| r.pattern()).collect())
        .unwrap_or_default();
    let doc = json!({"rcns_enabled": enabled, "patterns": patterns});
    Ok((json(200, &doc), Outcome::Forwarded))
}

pub async fn contracts(
    rec: Recorder<'_>,
    enf: &Enforcement,
    who: &Who,
    cx: WriteContext,
) -> Staged {
    let Some(agent) = agent(who) else {
        return Err(unidentified(rec, who, &cx).await);
    };
    let owner = (!who.sees_all()).then_some(agent.as_str());
    match enf
        .store
        .rcns_list(RcnsKind::Contract, owner, MAX_LISTED)
        .await
    {
        Ok(records) => {
            let list: Vec<Value> = records
                .iter()
                .filter_map(view_of)
                .filter(|v| v.get("revoked").is_none())
                .collect();
            Ok((json(200, &Value::Array(list)), Outcome::Forwarded))
        }
        Err(e) => Err(store_down(rec, &cx, &e).await),
    }
}

pub async fn contract(
    rec: Recorder<'_>,
    enf: &Enforcement,
    who: &Who,
    id: &str,
    cx: WriteContext,
) -> Staged {
    let found = match find(rec, enf, who, RcnsKind::Contract, id, &cx).await {
        Ok(r) => r,
        Err(own) => return Err(own),
    };
    match view_of(&found) {
        Some(v) => Ok((json(200, &v), Outcome::Forwarded)),
        None => {
            let r = Refusal::new(ErrorCode::Internal, "the stored contract cannot be read");
            refused(rec, &cx, r, Vec::new()).await
        }
    }
}

pub async fn attempt(
    rec: Recorder<'_>,
    enf: &Enforcement,
    who: &Who,
    id: &str,
    cx: WriteContext,
) -> Staged {
    match find(rec, enf, who, RcnsKind::Attempt, id, &cx).await {
        Ok(r) => Ok((json(200, &r.body), Outcome::Forwarded)),
        Err(own) => Err(own),
    }
}

/// A contract's view, with when it goes if unused (`idle_expires_at`, session-scoped ones).
fn view_of(r: &RcnsRecord) -> Option<Value> {
    let c = SynthesizedContract::from_record(&r.body)?;
    let mut v = c.view();
    if let (Some(obj), Some(_)) = (v.as_object_mut(), c.idle_timeout_ms) {
        let at = palisade_rich::rcns::contract::rfc3339(r.expires_ms);
        obj.insert("idle_expires_at".into(), at.into());
    }
    Some(v)
}

/// The record `id` of `kind`, if the caller may see it.
async fn find(
    rec: Recorder<'_>,
    enf: &Enforcement,
    who: &Who,
    kind: RcnsKind,
    id: &str,
    cx: &WriteContext,
) -> Result<RcnsRecord, Own> {
    let Some(agent) = agent(who) else {
        return Err(unidentified(rec, who, cx).await);
    };
    let what = match kind {
        RcnsKind::Contract => "contract",
        _ => "negotiation attempt",
    };
    let record = match enf.store.rcns_get(kind, id).await {
        Ok(Some(r)) => r,
        Ok(None) => {
            let r = Refusal::new(
                ErrorCode::NotFound,
                format!("no live {what} with this id (it never was, or it expired)"),
            );
            return Err(refusal(rec, cx, r, Vec::new()).await);
        }
        Err(e) => return Err(store_down(rec, cx, &e).await),
    };
    if record.owner != agent && !who.sees_all() {
        let r = Refusal::new(
            ErrorCode::RcnsRefused,
            format!("the {what} belongs to another agent"),
        )
        .with_reason("contract-not-yours");
        return Err(refusal(rec, cx, r, Vec::new()).await);
    }
    Ok(record)
}

/// The caller's agent id; `None` when it has no identity document.
pub fn agent(who: &Who) -> Option<String> {
    who.caller().map(|c| c.agent_id.clone())
}

/// No identity, or one the callers file does not name.
pub async fn unidentified(rec: Recorder<'_>, who: &Who, cx: &WriteContext) -> Own {
    let r = match who.identity {
        None => Refusal::new(
            ErrorCode::CallerUnidentified,
            "contracts belong to agents: authenticate (bearer token or client certificate)",
        ),
        Some(_) => Refusal::new(
            ErrorCode::RcnsRefused,
            "the caller is not in rcns.callers: it has no contracts and may not negotiate",
        )
        .with_reason("rcns-disabled"),
    };
    refusal(rec, cx, r, Vec::new()).await
}

pub async fn store_down(rec: Recorder<'_>, cx: &WriteContext, e: &crate::store::StoreError) -> Own {
    tracing::warn!(error = %e, "rcns: the store cannot be used");
    let r = Refusal::new(
        ErrorCode::StoreUnavailable,
        "the state store cannot be used; nothing was changed",
    );
    refusal(rec, cx, r, Vec::new()).await
}
