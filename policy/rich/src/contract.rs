//! A contract document (RICH §5), compiled: its six domains read, its schemas compiled, its
//! operational promises (side effect, reversibility, idempotency key, timeout) typed.

use serde_json::{Map, Value};

use super::duration;
use super::schema::Schema;
use super::Problem;
use palisade_policy::digest::Spelling;
use palisade_policy::lease::Reversibility;

/// Nesting allowed in lockfile and contract documents (schemas inside are limited to 64 by
/// [`super::schema`]; the documents wrap them a few levels deeper).
pub(super) const MAX_DOC_DEPTH: usize = 96;

/// `operational.sideEffect`; `"unknown"` is treated as `write` (SPEC §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideEffect {
    Read,
    Idempotent,
    Write,
}

/// `operational.idempotencyKey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdempotencyKey {
    Required,
    Optional,
    None,
}

/// A contract document, compiled.
#[derive(Debug)]
pub struct Contract {
    /// `sha-256:<hex>` of its JCS form.
    pub digest: String,
    /// `structural.input`; `None` when the domain is `"unknown"` or has no input schema.
    pub input: Option<Schema>,
    pub output: Option<Schema>,
    /// `structural.parameters`: path and query parameters, checked on the data plane.
    pub parameters: Option<super::parameters::Parameters>,
    /// What `input` admits at most, in the decidable fragment (RICH §12.2).
    pub worst_case_bound: super::WorstCaseBound,
    pub side_effect: SideEffect,
    pub reversibility: Reversibility,
    pub idempotency_key: IdempotencyKey,
    pub timeout_ms: Option<u64>,
    /// `state.handle`: the argument of a tool call that names the resource it changes (RICH
    /// §5.2.5 handle parameters), so the fence is per handle value (SPEC §11).
    pub state_handle: Option<String>,
    /// `operational.inverseTool`: the tool whose call undoes this one (a Palisade extension,
    /// SPEC §5.4), besides a call of the same tool.
    pub inverse_tool: Option<String>,
}

/// Reads `obj[key]` as one of `choices`, recording a problem otherwise.
pub(super) fn choice<T: Copy>(
    obj: &Map<String, Value>,
    key: &str,
    at: &str,
    choices: &[(&str, T)],
    default: Option<T>,
    problems: &mut Vec<Problem>,
) -> Option<T> {
    match obj.get(key) {
        None => {
            if default.is_none() {
                problems.push(Problem::new(format!("{at}/{key}"), "is required"));
            }
            default
        }
        Some(Value::String(s)) => match choices.iter().find(|(name, _)| name == s) {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<&str> = choices.iter().map(|(n, _)| *n).collect();
                problems.push(Problem::new(
                    format!("{at}/{key}"),
                    format!("must be one of {}", names.join(", ")),
                ));
                default
            }
        },
        Some(_) => {
            problems.push(Problem::new(format!("{at}/{key}"), "must be a string"));
            default
        }
    }
}

pub(super) fn compile_contract(
    name: &str,
    bytes: &[u8],
    problems: &mut Vec<Problem>,
) -> Option<Contract> {
    let at = format!("contracts/{name}#");
    let doc = match palisade_policy::json::parse(bytes, MAX_DOC_DEPTH) {
        Ok(v) => v,
        Err(e) => {
            problems.push(Problem::new(at, format!("not I-JSON: {e}")));
            return None;
        }
    };
    let (digest, misnamed) = super::content_named(name, &doc);
    problems.extend(misnamed);
    let Value::Object(doc) = doc else {
        problems.push(Problem::new(at, "a contract must be a JSON object"));
        return None;
    };
    for domain in [
        "structural",
        "representation",
        "semantic",
        "error",
        "state",
        "operational",
    ] {
        match doc.get(domain) {
            Some(Value::Object(_)) => {}
            Some(Value::String(s)) if s == "unknown" => {}
            Some(Value::String(s)) if domain == "state" && s == "not-applicable" => {}
            _ => problems.push(Problem::new(
                format!("{at}/{domain}"),
                "each of the six domains must be an object or \"unknown\" (RICH §5.2)",
            )),
        }
    }
    // `structural.formats`: "annotate" (2020-12's default) or "assert".
    let assert_formats = match doc.get("structural").and_then(|s| s.get("formats")) {
        None => false,
        Some(Value::String(f)) if f == "annotate" => false,
        Some(Value::String(f)) if f == "assert" => true,
        Some(_) => {
            problems.push(Problem::new(
                format!("{at}/structural/formats"),
                "must be \"annotate\" or \"assert\"",
            ));
            false
        }
    };
    let schema_of = |key: &str, problems: &mut Vec<Problem>| -> Option<Schema> {
        let s = doc.get("structural")?.as_object()?.get(key)?;
        if s == "unknown" {
            return None;
        }
        match Schema::compile_with(s, &format!("{at}/structural/{key}"), assert_formats) {
            Ok(s) => Some(s),
            Err(ps) => {
                problems.extend(ps);
                None
            }
        }
    };
    let input = schema_of("input", problems);
    let output = schema_of("output", problems);
    let parameters = doc
        .get("structural")
        .and_then(|s| s.get("parameters"))
        .and_then(|p| {
            let at = format!("{at}/structural/parameters");
            super::parameters::Parameters::compile(p, &at, assert_formats, problems)
        });
    let raw_input = doc
        .get("structural")
        .and_then(Value::as_object)
        .and_then(|s| s.get("input"));
    let worst_case_bound = super::WorstCaseBound::of(raw_input);
    let empty = Map::new();
    let op = doc
        .get("operational")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let op_at = format!("{at}/operational");
    let side_effect = choice(
        op,
        "sideEffect",
        &op_at,
        &[
            ("read", SideEffect::Read),
            ("idempotent", SideEffect::Idempotent),
            ("write", SideEffect::Write),
            ("unknown", SideEffect::Write),
        ],
        Some(SideEffect::Write),
        problems,
    )
    .unwrap_or(SideEffect::Write);
    let reversibility = choice(
        op,
        "reversibility",
        &op_at,
        &[
            ("reversible", Reversibility::Reversible),
            ("compensable", Reversibility::Compensable),
            ("irreversible", Reversibility::Irreversible),
            ("unknown", Reversibility::Unknown),
        ],
        Some(Reversibility::Unknown),
        problems,
    )
    .unwrap_or(Reversibility::Unknown);
    let idempotency_key = choice(
        op,
        "idempotencyKey",
        &op_at,
        &[
            ("required", IdempotencyKey::Required),
            ("optional", IdempotencyKey::Optional),
            ("none", IdempotencyKey::None),
        ],
        Some(IdempotencyKey::Optional),
        problems,
    )
    .unwrap_or(IdempotencyKey::Optional);
    let timeout_ms = duration_at(op, "timeout", &op_at, problems);
    let state_handle = match doc.get("state").and_then(|s| s.get("handle")) {
        None => None,
        Some(Value::String(h)) if !h.is_empty() => Some(h.clone()),
        Some(_) => {
            problems.push(Problem::new(
                format!("{at}/state/handle"),
                "must be the name of an argument (a non-empty string)",
            ));
            None
        }
    };
    let inverse_tool = match op.get("inverseTool") {
        None => None,
        Some(Value::String(t)) if !t.is_empty() && t.len() <= 256 => Some(t.clone()),
        Some(_) => {
            problems.push(Problem::new(
                format!("{op_at}/inverseTool"),
                "must be the name of a tool (1 to 256 bytes)",
            ));
            None
        }
    };
    Some(Contract {
        digest: digest.spelled(Spelling::ShaDash256),
        input,
        output,
        parameters,
        worst_case_bound,
        side_effect,
        reversibility,
        idempotency_key,
        timeout_ms,
        state_handle,
        inverse_tool,
    })
}

pub(super) fn duration_at(
    obj: &Map<String, Value>,
    key: &str,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<u64> {
    let v = obj.get(key)?;
    match v.as_str().and_then(duration::parse_ms) {
        Some(ms) => Some(ms),
        None if v == "unknown" => None,
        None => {
            problems.push(Problem::new(
                format!("{at}/{key}"),
                "must be an ISO 8601 duration such as \"PT10S\"",
            ));
            None
        }
    }
}
