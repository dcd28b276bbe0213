//! A synthesized contract (seed 000 §3.1, §3.4, §4.2): what a 263 answers, what DISCOVER
//! /contracts and INSPECT show, and what an invocation runs.
//!
//! `contract_hash` is the SHA-256 (hex) of the JCS form of the canonical contract: every
//! member below except `contract_hash` itself and the mutable state (`revoked`). The
//! canonical contract includes `recipe_digest`, the digest of the captured recipe, so the hash
//! names what the contract executes, not only the recipe's name and version.

use serde_json::{json, Map, Value};

use palisade_policy::digest::{Sha256Digest, Spelling};

/// How the contract came to be (the Attribution-Record's `negotiation_origin`).
pub const ORIGIN_PROPOSE: &str = "propose";
/// Synthesized when the agent addressed the pair directly (optimistic delivery).
pub const ORIGIN_GATE: &str = "rcns-gate";

/// A contract, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthesizedContract {
    pub synthesis_id: String,
    pub method: String,
    pub path: String,
    pub endpoint: Value,
    pub recipe_name: String,
    pub recipe_version: String,
    /// The recipe as it was when the contract was made (seed 000 §3.5).
    pub recipe: Value,
    pub originating_agent_id: String,
    pub negotiation_origin: &'static str,
    pub task_id: Option<String>,
    pub persistent: bool,
    /// The session it is scoped to; `None` when persistent.
    pub session: Option<String>,
    pub issued_at_ms: i64,
    /// The latest it lives to (a session-scoped one goes sooner when unused for
    /// `idle_timeout_ms`).
    pub expires_at_ms: i64,
    /// A session-scoped contract's idle timeout; `None` when persistent.
    pub idle_timeout_ms: Option<i64>,
    pub revoked: bool,
    /// Every Authority-Scope an invocation needs: the recipe's and its steps' (captured).
    pub required_scopes: Vec<String>,
    /// SHA-256 of the PROPOSE body made under an `Idempotency-Key`, so the same key with
    /// another body is told apart (`None` without a key).
    pub fingerprint: Option<String>,
}

impl SynthesizedContract {
    /// The canonical contract (everything `contract_hash` covers).
    pub fn canonical(&self) -> Value {
        json!({
            "synthesis_id": self.synthesis_id,
            "method": self.method,
            "path": self.path,
            "endpoint": self.endpoint,
            "recipe_lineage": {
                "recipe_name": self.recipe_name,
                "recipe_version": self.recipe_version,
            },
            "recipe_digest": Sha256Digest::of_json(&self.recipe).spelled(Spelling::ShaDash256),
            "originating_agent_id": self.originating_agent_id,
            "negotiation_origin": self.negotiation_origin,
            "required_scopes": self.required_scopes,
            "persistent": self.persistent,
            "session": self.session,
            "issued_at": rfc3339(self.issued_at_ms),
            "expires_at": rfc3339(self.expires_at_ms),
            "idle_timeout_s": self.idle_timeout_ms.map(|ms| ms / 1000),
        })
    }

    /// When the contract is gone if it is not used again after `now` (Unix ms): its idle
    /// timeout from now, never past `expires_at`.
    pub fn idle_expiry(&self, now: i64) -> i64 {
        match self.idle_timeout_ms {
            Some(idle) => now.saturating_add(idle).min(self.expires_at_ms),
            None => self.expires_at_ms,
        }
    }

    /// `contract_hash`: 64 hex.
    pub fn contract_hash(&self) -> String {
        Sha256Digest::of_json(&self.canonical()).to_hex()
    }

    /// The public view: the canonical contract with `contract_hash` (and `revoked` when it
    /// is). The captured recipe itself stays the operator's.
    pub fn view(&self) -> Value {
        let mut v = self.canonical();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("contract_hash".into(), self.contract_hash().into());
            if self.revoked {
                obj.insert("revoked".into(), true.into());
            }
        }
        v
    }

    /// The stored record: the view plus the captured recipe and the raw times.
    pub fn to_record(&self) -> Value {
        let mut v = self.view();
        if let Some(obj) = v.as_object_mut() {
            obj.insert("recipe".into(), self.recipe.clone());
            obj.insert("task_id".into(), json!(self.task_id));
            obj.insert("issued_at_ms".into(), self.issued_at_ms.into());
            obj.insert("expires_at_ms".into(), self.expires_at_ms.into());
            obj.insert("revoked".into(), self.revoked.into());
            obj.insert("fingerprint".into(), json!(self.fingerprint));
        }
        v
    }

    /// Reads a stored record back; `None` if it is not one.
    pub fn from_record(v: &Value) -> Option<SynthesizedContract> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        let lineage = v.get("recipe_lineage")?;
        let origin = match v.get("negotiation_origin")?.as_str()? {
            ORIGIN_PROPOSE => ORIGIN_PROPOSE,
            ORIGIN_GATE => ORIGIN_GATE,
            _ => return None,
        };
        Some(SynthesizedContract {
            synthesis_id: s("synthesis_id")?,
            method: s("method")?,
            path: s("path")?,
            endpoint: v.get("endpoint")?.clone(),
            recipe_name: lineage.get("recipe_name")?.as_str()?.to_owned(),
            recipe_version: lineage.get("recipe_version")?.as_str()?.to_owned(),
            recipe: v.get("recipe")?.clone(),
            originating_agent_id: s("originating_agent_id")?,
            negotiation_origin: origin,
            task_id: s("task_id"),
            persistent: v.get("persistent")?.as_bool()?,
            session: s("session"),
            issued_at_ms: v.get("issued_at_ms")?.as_i64()?,
            expires_at_ms: v.get("expires_at_ms")?.as_i64()?,
            idle_timeout_ms: v
                .get("idle_timeout_s")
                .and_then(Value::as_i64)
                .map(|s| s * 1000),
            revoked: v.get("revoked").and_then(Value::as_bool).unwrap_or(false),
            required_scopes: v
                .get("required_scopes")?
                .as_array()?
                .iter()
                .map(|s| s.as_str().map(str::to_owned))
                .collect::<Option<_>>()?,
            fingerprint: s("fingerprint"),
        })
    }

    /// The 263 body (seed 000 §3.1, §3.4).
    pub fn approved(&self, persistent_refused: bool) -> Value {
        let mut v = self.view();
        if let Some(obj) = v.as_object_mut() {
            let mut head = Map::new();
            head.insert("status".into(), 263.into());
            head.append(obj);
            if persistent_refused {
                head.insert("persistent_refused".into(), true.into());
            }
            return Value::Object(head);
        }
        v
    }
}

/// RFC 3339 in UTC with milliseconds (`2026-12-05T06:00:00.000Z`).
pub fn rfc3339(ms: i64) -> String {
    palisade_policy::lease::format_rfc3339_ms(ms)
}
