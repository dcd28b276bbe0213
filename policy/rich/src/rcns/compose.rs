//! Running a recipe's mappings (seed 000 §3.7): each step's request built from the
//! invocation's input and the earlier steps' answers, and the composed answer. The I/O —
//! leases, the writes, compensation — is the proxy's; this is only what the expressions say.
//!
//! The expressions see `{"input": <the invocation's body>, "steps": [<answer of step 0>, …]}`.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{json, Value};

use crate::recipes::{Recipe, Step, ToolStep};
use palisade_policy::{ErrorCode, Refusal};

/// Everything but RFC 3986's unreserved characters is encoded in a path value.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// One step's request.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRequest {
    pub method: String,
    /// Origin-form, canonical.
    pub path: String,
    /// `None`: no body.
    pub body: Option<Value>,
}

/// The context the expressions see.
pub fn context(input: &Value, answers: &[Value]) -> Value {
    json!({"input": input, "steps": answers})
}

fn unmappable(i: usize, what: &'static str) -> Refusal {
    Refusal::new(ErrorCode::RcnsStepFailed, what)
        .with_status(422)
        .with_reason("step-mapping-failed")
        .with_location(format!("/steps/{i}"))
}

/// Step `i`'s request, given the context.
pub fn step_request(i: usize, step: &Step, cx: &Value) -> Result<StepRequest, Refusal> {
    let (method, template) = step.operation.split_once(' ').unwrap_or(("", ""));
    let mut path = String::with_capacity(template.len() + 32);
    for seg in template.split('/').skip(1) {
        path.push('/');
        let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
            path.push_str(seg);
            continue;
        };
        let expr = step
            .path
            .get(name)
            .ok_or_else(|| unmappable(i, "the recipe does not fill a path parameter"))?;
        let value = expr
            .apply(cx)
            .map_err(|_| unmappable(i, "a path expression could not be evaluated"))?;
        let text = match &value {
            Value::String(s) => s.clone(),
            Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
            _ => {
                return Err(unmappable(
                    i,
                    "a path parameter must come out a string or an integer",
                ))
            }
        };
        // A dot segment or an empty one would name another resource than the template's.
        if text.is_empty() || text == "." || text == ".." || text.len() > 1024 {
            return Err(unmappable(
                i,
                "a path parameter came out empty, a dot segment or over 1024 bytes",
            ));
        }
        path.extend(utf8_percent_encode(&text, SEGMENT));
    }
    let body = match &step.body {
        Some(e) => Some(
            e.apply(cx)
                .map_err(|_| unmappable(i, "the body expression could not be evaluated"))?,
        ),
        None => None,
    };
    Ok(StepRequest {
        method: method.to_owned(),
        path,
        body,
    })
}

/// One tool step's call: the tool, its arguments, and the inverse tool call that compensates
/// it (`{"tool", "arguments"}`, the form an agent's inverse takes; `None` for a read tool).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    pub name: String,
    pub arguments: Value,
    pub inverse: Option<Value>,
}

/// Step `i`'s tool call, given the context; its inverse sees the call's `arguments` too.
pub fn tool_request(i: usize, tool: &ToolStep, cx: &Value) -> Result<ToolRequest, Refusal> {
    let arguments = match &tool.arguments {
        Some(e) => e
            .apply(cx)
            .map_err(|_| unmappable(i, "the arguments expression could not be evaluated"))?,
        None => json!({}),
    };
    if !arguments.is_object() {
        return Err(unmappable(
            i,
            "a tool call's arguments must come out an object",
        ));
    }
    let inverse = match &tool.inverse {
        None => None,
        Some((name, e)) => {
            let mut icx = cx.clone();
            icx["arguments"] = arguments.clone();
            let args = e.apply(&icx).map_err(|_| {
                unmappable(
                    i,
                    "the inverse's arguments expression could not be evaluated",
                )
            })?;
            if !args.is_object() {
                return Err(unmappable(
                    i,
                    "the inverse call's arguments must come out an object",
                ));
            }
            Some(json!({"tool": name, "arguments": args}))
        }
    };
    Ok(ToolRequest {
        name: tool.name.clone(),
        arguments,
        inverse,
    })
}

/// The composed answer: the recipe's `output` expression over the context, or the steps'
/// answers when it has none; checked against the recipe's output schema.
pub fn output(recipe: &Recipe, cx: &Value) -> Result<Value, Refusal> {
    let out = match &recipe.output {
        Some(e) => e.apply(cx).map_err(|_| {
            Refusal::new(
                ErrorCode::RcnsStepFailed,
                "the recipe's output expression could not be evaluated",
            )
            .with_reason("output-mapping-failed")
        })?,
        None => cx["steps"].clone(),
    };
    recipe.output_schema.check(&out).map_err(|v| {
        Refusal::new(
            ErrorCode::ContractOutput,
            "the composed answer violates the endpoint's output schema",
        )
        .with_location(v.instance_location)
    })?;
    Ok(out)
}
