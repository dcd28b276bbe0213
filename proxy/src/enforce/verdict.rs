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
    /// A write known only by its receipt (audit export): never its body, query, headers or
    /// lease, so neither input contracts nor parameters are judged, and a rule that reads
    /// what a receipt lacks leaves the write [`Verdict::Unjudged`].
    Receipt {
        method: &'a str,
        /// The path of its `sor_target_uri`, when the receipt names one.
        path: Option<&'a str>,
        /// Its `operation` (the budgets' key form), when the receipt names one.
        operation: Option<&'a str>,
        caller: Option<&'a str>,
    },
}

/// What a receipt never holds: the rules' variables a write read back from one lacks.
const NOT_IN_RECEIPTS: [&str; 4] = ["body", "query", "headers", "lease"];

/// What the contracts and rules decide.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Verdict {
    Allowed,
    /// Held by this rule.
    Held(String),
    /// Refused with this code, or by this rule (`rule:<name>`).
    Refused(String),
    /// Not decided: this rule applies and reads what the write's record lacks.
    Unjudged(String),
}

impl Verdict {
    /// `allowed`, `held:<rule>`, `refused:<code>`, `refused:rule:<rule>`.
    pub fn label(&self) -> String {
        match self {
            Verdict::Allowed => "allowed".into(),
            Verdict::Held(r) => format!("held:{r}"),
            Verdict::Refused(w) => format!("refused:{w}"),
            Verdict::Unjudged(r) => format!("unjudged:{r}"),
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

/// A write's shape as the judges read it, made once however many judges read it: the path
/// and query apart, the body parsed (a tool call's arguments as they are), the lease's fields.
pub struct Read<'a> {
    shape: &'a Shape<'a>,
    method: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    /// `Err(())`: a body that is not I-JSON (refused by a contract that has an input schema).
    body: Result<Option<std::borrow::Cow<'a, Value>>, ()>,
    lease: Option<Value>,
}

impl<'a> Read<'a> {
    pub fn of(shape: &'a Shape<'a>, depth: usize) -> Read<'a> {
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
                let parsed = if body.is_empty() {
                    Ok(None)
                } else {
                    palisade_policy::json::parse(body, depth)
                        .map(|v| Some(std::borrow::Cow::Owned(v)))
                        .map_err(|_| ())
                };
                // The lease the write carries, read without judging its signature.
                let lease = headers
                    .get(crate::net::headers::LEASE_HEADER)
                    .and_then(|v| palisade_policy::lease::decode_header(v.as_bytes()).ok())
                    .and_then(|b| serde_json::from_slice(&b).ok());
                Read {
                    shape,
                    method,
                    path,
                    query,
                    body: parsed,
                    lease,
                }
            }
            Shape::Tool { arguments, .. } => Read {
                shape,
                method: "POST",
                path: "",
                query: None,
                body: Ok(Some(std::borrow::Cow::Borrowed(*arguments))),
                lease: None,
            },
            Shape::Receipt { method, path, .. } => Read {
                shape,
                method,
                path: path.unwrap_or(""),
                query: None,
                body: Ok(None),
                lease: None,
            },
        }
    }
}

/// The write's operation (the budgets' key form) and its verdict.
pub fn of(j: Judges<'_>, shape: &Shape<'_>) -> (String, Verdict) {
    judge(j, &Read::of(shape, j.depth))
}

/// [`of`] on a shape read once (the shadow reads each write for two judges).
pub fn judge(j: Judges<'_>, read: &Read<'_>) -> (String, Verdict) {
    let (operation, cap) = match contracts(j, read) {
        Ok(c) => c,
        Err(done) => return done,
    };
    let Some(rules) = j.rules else {
        return (operation, Verdict::Allowed);
    };
    let tool = match read.shape {
        Shape::Tool { name, .. } => Some(ToolFacts {
            name,
            annotations: cap.and_then(|c| c.tool_annotations.as_ref()),
        }),
        Shape::Http { .. } | Shape::Receipt { .. } => None,
    };
    let caller = match read.shape {
        Shape::Receipt { caller, .. } => *caller,
        _ => None,
    };
    let facts = Facts {
        caller,
        operation: &operation,
        also: None,
        resource: read.path,
        method: read.method,
        path: read.path,
        query: read.query,
        body: read.body.as_ref().ok().and_then(|b| b.as_deref()),
        lease: read.lease.as_ref().map(|l| LeaseFacts {
            recovery_mode: l["recovery_mode"].as_str().unwrap_or(""),
            t_granted_ms: l["t_granted_ms"].as_u64().unwrap_or(0),
            agent_id: l["agent_id"].as_str(),
            issuer: l["kid"].as_str(),
        }),
        tool,
        headers: Vec::new(),
        now_ms: j.now_ms,
    };
    let decided = match read.shape {
        Shape::Receipt { .. } => match rules.decide_knowing(&facts, &NOT_IN_RECEIPTS) {
            Ok(d) => d.decided,
            Err(rule) => return (operation, Verdict::Unjudged(rule.to_string())),
        },
        _ => rules.decide(&facts).decided,
    };
    let verdict = match decided {
        Some(m) if m.action == Action::Hold => Verdict::Held(m.rule.to_string()),
        Some(m) if m.action == Action::Deny => Verdict::Refused(format!("rule:{}", m.rule)),
        _ => Verdict::Allowed,
    };
    (operation, verdict)
}

/// The bundle's part: the operation and its capability, or the verdict when the contracts
/// (or an unbound write's refusal) decide it.
fn contracts<'j>(
    j: Judges<'j>,
    read: &Read<'_>,
) -> Result<(String, Option<&'j Capability>), (String, Verdict)> {
    let cap = match read.shape {
        Shape::Http { method, .. } => j.bundle.and_then(|b| b.route(method, read.path)),
        Shape::Tool { name, .. } => j.bundle.and_then(|b| b.tool(name)),
        Shape::Receipt {
            method,
            path,
            operation,
            ..
        } => j.bundle.and_then(|b| match (path, operation) {
            (Some(p), _) => b.route(method, p),
            (None, Some(op)) => match op.strip_prefix("mcp:tool/") {
                Some(tool) => b.tool(tool),
                None => b.capabilities.iter().find(|c| c.operation == *op),
            },
            (None, None) => None,
        }),
    };
    let Some(cap) = cap else {
        let op = match read.shape {
            Shape::Http { method, .. } => format!("{method} {}", read.path),
            Shape::Tool { name, .. } => format!("mcp:tool/{name}"),
            Shape::Receipt {
                method,
                path,
                operation,
                ..
            } => operation
                .map(str::to_owned)
                .unwrap_or_else(|| format!("{method} {}", path.unwrap_or("?"))),
        };
        return match unbound(j) {
            Some(refused) => Err((op, refused)),
            None => Ok((op, None)),
        };
    };
    let op = match read.shape {
        Shape::Http { .. } => cap.operation.clone(),
        Shape::Tool { name, .. } => format!("mcp:tool/{name}"),
        Shape::Receipt { operation, .. } => match operation {
            Some(o) if o.starts_with("mcp:tool/") => (*o).to_owned(),
            _ => cap.operation.clone(),
        },
    };
    // What a receipt does not hold (a body, a query, headers) is not judged.
    if matches!(read.shape, Shape::Receipt { .. }) {
        return Ok((op, Some(cap)));
    }
    let refused =
        |r: palisade_policy::Refusal| Err((op.clone(), Verdict::Refused(r.code.as_str().into())));
    if let Shape::Http { headers, .. } = read.shape {
        let shown = crate::net::headers::values(headers);
        if let Err(r) = palisade_rich::check_parameters(cap, read.path, read.query, &shown) {
            return refused(r);
        }
    }
    // Check 9 on the body read once: the same verdicts `check_input` gives on the bytes.
    if cap.contract.input.is_some() {
        let checked = match &read.body {
            Ok(Some(v)) => palisade_rich::check_input_value(&cap.contract, v),
            Ok(None) | Err(()) => Err(palisade_policy::Refusal::new(
                ErrorCode::ContractInput,
                "the request body is not I-JSON, and the operation's input contract needs it",
            )),
        };
        if let Err(r) = checked {
            return refused(r);
        }
    }
    Ok((op, Some(cap)))
}

fn unbound(j: Judges<'_>) -> Option<Verdict> {
    j.unbound_denied
        .then(|| Verdict::Refused(ErrorCode::UnboundOperation.as_str().into()))
}
