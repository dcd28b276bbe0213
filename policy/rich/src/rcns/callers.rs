//! Who may negotiate (`rcns.callers`): the authenticated caller's identity, as the sidecar
//! derives it for every stage (a verified token's `sub:sha256:…`, an mTLS client's SPIFFE ID
//! or `x509:sha256:…`, or `authz:sha256:…` of the `Authorization` header), mapped to the
//! agent id contracts are owned by, the Authority-Scope tokens its identity document grants
//! and its trust tier.
//!
//! ```json
//! {"callers": [{"identity": "authz:sha256:<hex>", "agent_id": "agent-7",
//!               "scopes": ["rcns:negotiate", "erp:stock:reserve"], "trust_tier": 1}]}
//! ```
//! Trust tiers follow AGTP-TRUST's order: 1 is the most trusted (verified), 3 the least
//! (self-asserted); a recipe names the least trusted tier it serves.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use crate::Problem;

const MAX_CALLERS: usize = 10_000;
const MAX_SCOPES: usize = 64;

/// One caller's identity document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// Who contracts belong to (seed 000 §4.2 `originating_agent_id`).
    pub agent_id: String,
    /// The Authority-Scope tokens its identity document grants.
    pub scopes: BTreeSet<String>,
    /// 1 (most trusted) to 3.
    pub trust_tier: u8,
}

/// The callers file, compiled.
#[derive(Debug, Default, Clone)]
pub struct Callers {
    by_identity: HashMap<String, Caller>,
}

impl Callers {
    pub fn parse(bytes: &[u8]) -> Result<Callers, Vec<Problem>> {
        let doc = palisade_policy::json::parse(bytes, 16)
            .map_err(|e| vec![Problem::new("callers#", format!("not I-JSON: {e}"))])?;
        let Some(list) = doc.get("callers").and_then(Value::as_array) else {
            return Err(vec![Problem::new("callers#/callers", "must be an array")]);
        };
        if list.len() > MAX_CALLERS {
            return Err(vec![Problem::new(
                "callers#/callers",
                format!("at most {MAX_CALLERS} callers"),
            )]);
        }
        let mut problems = Vec::new();
        let mut by_identity = HashMap::new();
        let mut agents = BTreeSet::new();
        for (i, entry) in list.iter().enumerate() {
            let at = format!("callers#/callers/{i}");
            let text = |key: &str| entry.get(key).and_then(Value::as_str);
            let identity = match text("identity") {
                Some(s) if is_identity(s) => s.to_owned(),
                _ => {
                    problems.push(Problem::new(
                        format!("{at}/identity"),
                        "expected spiffe://…, or authz:/sub:/x509: followed by sha256:<64 hex>",
                    ));
                    continue;
                }
            };
            let agent_id = match text("agent_id") {
                Some(s) if (1..=128).contains(&s.len()) && s.bytes().all(is_id_byte) => {
                    s.to_owned()
                }
                _ => {
                    problems.push(Problem::new(
                        format!("{at}/agent_id"),
                        "expected 1 to 128 of A-Z a-z 0-9 . _ : -",
                    ));
                    continue;
                }
            };
            if !agents.insert(agent_id.clone()) {
                problems.push(Problem::new(
                    format!("{at}/agent_id"),
                    "names the same agent as an earlier caller: contracts would be shared",
                ));
            }
            let mut scopes = BTreeSet::new();
            match entry.get("scopes").and_then(Value::as_array) {
                Some(list) if list.len() <= MAX_SCOPES => {
                    for s in list {
                        match s.as_str().filter(|s| crate::recipes::is_scope_token(s)) {
                            Some(s) => {
                                scopes.insert(s.to_owned());
                            }
                            None => problems.push(Problem::new(
                                format!("{at}/scopes"),
                                "each scope is a token of visible ASCII, no space or quote",
                            )),
                        }
                    }
                }
                _ => problems.push(Problem::new(
                    format!("{at}/scopes"),
                    format!("must be an array of at most {MAX_SCOPES} scope tokens"),
                )),
            }
            let trust_tier = match entry.get("trust_tier").and_then(Value::as_u64) {
                Some(t @ 1..=3) => t as u8,
                _ => {
                    problems.push(Problem::new(
                        format!("{at}/trust_tier"),
                        "must be 1 (most trusted), 2 or 3",
                    ));
                    continue;
                }
            };
            let caller = Caller {
                agent_id,
                scopes,
                trust_tier,
            };
            if by_identity.insert(identity, caller).is_some() {
                problems.push(Problem::new(
                    format!("{at}/identity"),
                    "appears twice in the file",
                ));
            }
        }
        if problems.is_empty() {
            Ok(Callers { by_identity })
        } else {
            Err(problems)
        }
    }

    /// The identity document of `identity`, if the file names it.
    pub fn get(&self, identity: &str) -> Option<&Caller> {
        self.by_identity.get(identity)
    }

    pub fn len(&self) -> usize {
        self.by_identity.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_identity.is_empty()
    }
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-')
}

fn is_identity(s: &str) -> bool {
    if let Some(rest) = s.strip_prefix("spiffe://") {
        return !rest.is_empty() && s.len() <= 2048 && !s.bytes().any(|b| b <= b' ');
    }
    let digest = ["authz:", "sub:", "x509:"]
        .iter()
        .find_map(|p| s.strip_prefix(p))
        .and_then(|d| d.strip_prefix("sha256:"));
    matches!(digest, Some(h) if h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase()))
}
