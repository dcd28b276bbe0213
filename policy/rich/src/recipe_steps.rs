//! A recipe step's expressions, and steps whose capability is an MCP tool (issue 37).
//!
//! ```json
//! {"capability": "set_level", "arguments": "{sku: input.sku, qty: input.qty}",
//!  "inverse": {"tool": "set_level", "arguments": "{sku: arguments.sku, qty: `0`}"}}
//! ```
//!
//! - `arguments` builds the call's arguments over `{"input", "steps"}` (absent: `{}`).
//! - A tool that writes is compensated by its `inverse` tool call, built before the call is
//!   sent over `{"input", "steps", "arguments"}` (the call's own arguments) and staged with
//!   its lease, as an agent's inverse would be (PTCL COMPENSATING_ACTION). The inverse tool
//!   must be an MCP capability of the lockfile too: compensation sends nothing unpinned.
//! - A tool whose contract reads has nothing to undo: an `inverse` there is refused.
//! - `path` and `body` are an HTTP step's; on a tool step they are refused.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::capability::{Capability, Protocol};
use super::connector::t1::{Limits, T1};
use super::contract::SideEffect;
use super::Problem;

/// A step's call of an MCP tool.
#[derive(Debug)]
pub struct ToolStep {
    /// The tool's name (its capability's `operation`).
    pub name: String,
    /// The arguments' expression; `None` sends `{}`.
    pub arguments: Option<T1>,
    /// The compensating call: the inverse tool's name and its arguments' expression.
    pub inverse: Option<(String, T1)>,
}

/// Compiles the MCP part of step `s` on `cap` (an MCP capability).
pub(super) fn compile_tool_step(
    s: &Value,
    at: &str,
    cap: &Capability,
    capabilities: &[Capability],
    problems: &mut Vec<Problem>,
) -> Option<ToolStep> {
    let before = problems.len();
    for key in ["path", "body"] {
        if s.get(key).is_some() {
            problems.push(Problem::new(
                format!("{at}/{key}"),
                "is an HTTP step's: a tool step has `arguments` (and `inverse`)",
            ));
        }
    }
    let arguments = expression(s.get("arguments"), &format!("{at}/arguments"), problems);
    let reads = cap.contract.side_effect == SideEffect::Read;
    let inverse = match (s.get("inverse"), reads) {
        (None, true) => None,
        (Some(_), true) => {
            problems.push(Problem::new(
                format!("{at}/inverse"),
                "the tool's contract reads: it has nothing to compensate",
            ));
            None
        }
        (None, false) => {
            problems.push(Problem::new(
                format!("{at}/inverse"),
                "is required: a tool that writes is compensated by its inverse tool call",
            ));
            None
        }
        (Some(inv), false) => inverse(inv, &format!("{at}/inverse"), capabilities, problems),
    };
    (problems.len() == before).then(|| ToolStep {
        name: cap.operation.clone(),
        arguments,
        inverse,
    })
}

fn inverse(
    v: &Value,
    at: &str,
    capabilities: &[Capability],
    problems: &mut Vec<Problem>,
) -> Option<(String, T1)> {
    let tool = v.get("tool").and_then(Value::as_str);
    let bound = tool.and_then(|t| {
        capabilities
            .iter()
            .find(|c| c.protocol == Protocol::Mcp && c.operation == t)
    });
    let Some(bound) = bound else {
        problems.push(Problem::new(
            format!("{at}/tool"),
            "must name an MCP tool bound in the lockfile",
        ));
        return None;
    };
    let here = format!("{at}/arguments");
    let Some(args) = v.get("arguments") else {
        problems.push(Problem::new(
            here,
            "is required: the inverse call's arguments",
        ));
        return None;
    };
    Some((
        bound.operation.clone(),
        expression(Some(args), &here, problems)?,
    ))
}

/// A T1 JMESPath expression at `at`, if `v` is one (absent: `None`, no problem).
pub(super) fn expression(v: Option<&Value>, at: &str, problems: &mut Vec<Problem>) -> Option<T1> {
    match v? {
        Value::String(text) => match T1::compile(text, Limits::default()) {
            Ok(e) => Some(e),
            Err(e) => {
                problems.push(Problem::new(
                    at,
                    format!("not a T1 JMESPath expression: {e}"),
                ));
                None
            }
        },
        _ => {
            problems.push(Problem::new(at, "must be a JMESPath expression (a string)"));
            None
        }
    }
}

/// One step of a composition.
#[derive(Debug)]
pub struct Step {
    /// The index of its capability in the bundle.
    pub capability: usize,
    /// The capability's `operation` (`PUT /api/v2/items/{id}`).
    pub operation: String,
    /// The template's `{name}` → the expression that fills it.
    pub path: BTreeMap<String, T1>,
    /// The request body's expression; `None` sends no body.
    pub body: Option<T1>,
    /// A step on an MCP tool: its call (then `path` is empty and `body` `None`).
    pub tool: Option<ToolStep>,
}

/// One step as the recipe writes it: its capability, and its path and body expressions
/// (a tool step: its call).
pub(super) fn compile_step(
    s: &Value,
    at: &str,
    capabilities: &[Capability],
    problems: &mut Vec<Problem>,
) -> Option<Step> {
    let name = s.get("capability").and_then(Value::as_str);
    let Some(index) = name.and_then(|n| capabilities.iter().position(|c| c.name == n)) else {
        problems.push(Problem::new(
            format!("{at}/capability"),
            "must name a capability of the lockfile",
        ));
        return None;
    };
    let cap = &capabilities[index];
    if cap.protocol == Protocol::Mcp {
        let tool = compile_tool_step(s, at, cap, capabilities, problems)?;
        return Some(Step {
            capability: index,
            operation: cap.operation.clone(),
            path: BTreeMap::new(),
            body: None,
            tool: Some(tool),
        });
    }
    let template = cap.operation.split_once(' ').map_or("", |(_, t)| t);
    let params: BTreeSet<&str> = template
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .collect();
    let mut path = BTreeMap::new();
    let given = s.get("path").and_then(Value::as_object);
    for p in &params {
        let expr = given.and_then(|g| g.get(*p));
        match expression(expr, &format!("{at}/path/{p}"), problems) {
            Some(e) => {
                path.insert((*p).to_owned(), e);
            }
            None if expr.is_none() => problems.push(Problem::new(
                format!("{at}/path/{p}"),
                "is required: the capability's template has this parameter",
            )),
            None => {}
        }
    }
    for extra in given.into_iter().flat_map(|g| g.keys()) {
        if !params.contains(extra.as_str()) {
            problems.push(Problem::new(
                format!("{at}/path/{}", pointer_escape(extra)),
                "is not a parameter of the capability's template",
            ));
        }
    }
    let body = expression(s.get("body"), &format!("{at}/body"), problems);
    Some(Step {
        capability: index,
        operation: cap.operation.clone(),
        path,
        body,
        tool: None,
    })
}

/// A JSON Pointer reference token for `s` (RFC 6901: `~` and `/` escaped).
pub(super) fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}
