//! What a bundle's contracts and an operator's rules decide about one write's shape, alone:
//! no lease, no fence, no store (SPEC §15). `palisade simulate` decides recorded traffic with
//! it, and the candidate bundle's shadow compares the bundle in force with the candidate on
//! every write by it, so both sides of a comparison are judged the same way.

use palisade_policy::ErrorCode;
use palisade_rich::{Bundle, Capability};
use palisade_rules::{Action, Facts, LeaseFacts, RuleSet, ToolFacts};
use serde_json::Value;

/// A write as it is shaped.
pub enum Shape<'a> {
    Http {
        method: &'a str,
        /// Path and query.
        target: &'a str,
        headers: &'a http::HeaderMap,
        body: &'a [u8],
    },
    Tool {
        name: &'a str,
        arguments: &'a Value,
    },
}

/// What the contracts and rules decide.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Allowed,
    /// Held by this rule.
    Held(String),
    /// Refused with this code, or by this rule (`rule:<name>`).
    Refused(String),
}

impl Verdict {
    /// `allowed`, `held:<rule>`, `refused:<code>`, `refused:rule:<rule>`.
    pub fn label(&self) -> String {
        match self {
            Verdict::Allowed => "allowed".into(),
            Verdict::Held(r) => format!("held:{r}"),
            Verdict::Refused(w) => format!("refused:{w}"),
        }
    }
}

/// The judges: a bundle (`None`: every write is unbound), rules, and the JSON depth bodies are
/// held to.
#[derive(Clone, Copy)]
pub struct Judges<'a> {
    pub bundle: Option<&'a Bundle>,
    pub rules: Option<&'a RuleSet>,
    /// `rich.unbound_writes = "deny"`.
    pub unbound_denied: bool,
    pub depth: usize,
    pub now_ms: i64,
}

/// The write's operation (the budgets' key form) and its verdict.
pub fn of(j: Judges<'_>, shape: &Shape<'_>) -> (String, Verdict) {
    let (operation, cap, body) = match contracts(j, shape) {
        Ok(c) => c,
        Err(done) => return done,
    };
    let Some(rules) = j.rules else {
        return (operation, Verdict::Allowed);
    };
    let (method, path, query, headers) = match shape {
        Shape::Http {
            method,
            target,
            headers,
            ..
        } => {
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (*target, None),
            };
            (*method, path, query, Some(*headers))
        }
        Shape::Tool { .. } => ("POST", "", None, None),
    };
    // The lease the write carries, read without judging its signature.
    let lease: Option<Value> = headers
        .and_then(|h| h.get(crate::net::headers::LEASE_HEADER))
        .and_then(|v| palisade_policy::lease::decode_header(v.as_bytes()).ok())
        .and_then(|b| serde_json::from_slice(&b).ok());
    let tool = match shape {
        Shape::Tool { name, .. } => Some(ToolFacts {
            name,
            annotations: cap.and_then(|c| c.tool_annotations.as_ref()),
        }),
        Shape::Http { .. } => None,
    };
    let facts = Facts {
        caller: None,
        operation: &operation,
        also: None,
        resource: path,
        method,
        path,
        query,
        body: body.as_ref(),
        lease: lease.as_ref().map(|l| LeaseFacts {
            recovery_mode: l["recovery_mode"].as_str().unwrap_or(""),
            t_granted_ms: l["t_granted_ms"].as_u64().unwrap_or(0),
            agent_id: l["agent_id"].as_str(),
            issuer: l["kid"].as_str(),
        }),
        tool,
        headers: Vec::new(),
        now_ms: j.now_ms,
    };
    let verdict = match rules.decide(&facts).decided {
        Some(m) if m.action == Action::Hold => Verdict::Held(m.rule.to_string()),
        Some(m) if m.action == Action::Deny => Verdict::Refused(format!("rule:{}", m.rule)),
        _ => Verdict::Allowed,
    };
    (operation, verdict)
}

/// The bundle's part: the operation, its capability and the parsed body, or the verdict when
/// the contracts (or an unbound write's refusal) decide it.
#[allow(clippy::type_complexity)]
fn contracts<'a>(
    j: Judges<'a>,
    shape: &Shape<'_>,
) -> Result<(String, Option<&'a Capability>, Option<Value>), (String, Verdict)> {
    match shape {
        Shape::Http {
            method,
            target,
            headers,
            body,
        } => {
            let (path, query) = match target.split_once('?') {
                Some((p, q)) => (p, Some(q)),
                None => (*target, None),
            };
            let parsed = || {
                (!body.is_empty())
                    .then(|| palisade_policy::json::parse(body, j.depth).ok())
                    .flatten()
            };
            let Some(cap) = j.bundle.and_then(|b| b.route(method, path)) else {
                let op = format!("{method} {path}");
                return match unbound(j) {
                    Some(refused) => Err((op, refused)),
                    None => Ok((op, None, parsed())),
                };
            };
            let refused = |r: palisade_policy::Refusal| {
                Err((
                    cap.operation.clone(),
                    Verdict::Refused(r.code.as_str().into()),
                ))
            };
            let shown = crate::net::headers::values(headers);
            if let Err(r) = palisade_rich::check_parameters(cap, path, query, &shown) {
                return refused(r);
            }
            if let Err(r) = palisade_rich::check_input(&cap.contract, body, j.depth) {
                return refused(r);
            }
            Ok((cap.operation.clone(), Some(cap), parsed()))
        }
        Shape::Tool { name, arguments } => {
            let op = format!("mcp:tool/{name}");
            let Some(cap) = j.bundle.and_then(|b| b.tool(name)) else {
                return match unbound(j) {
                    Some(refused) => Err((op, refused)),
                    None => Ok((op, None, Some((*arguments).clone()))),
                };
            };
            if let Err(r) = palisade_rich::check_input_value(&cap.contract, arguments) {
                return Err((op, Verdict::Refused(r.code.as_str().into())));
            }
            Ok((op, Some(cap), Some((*arguments).clone())))
        }
    }
}

fn unbound(j: Judges<'_>) -> Option<Verdict> {
    j.unbound_denied
        .then(|| Verdict::Refused(ErrorCode::UnboundOperation.as_str().into()))
}
