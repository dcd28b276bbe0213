//! The PROPOSE body (seed 000 §3.4), both forms:
//!
//! - wrapped: `{"method": "PROPOSE", "task_id": …, "parameters": {"endpoint": {method, path,
//!   description, semantic, input_schema, output_schema}, "persistent": false}}`;
//! - flat: `{"method": "PROPOSE", "task_id": …, "parameters": {"name", "method", "path",
//!   "semantic", …}}`.
//!
//! The two are mutually exclusive: a body with `parameters.endpoint` and a flat
//! `parameters.method` or `parameters.path` is refused, not read one way or the other.
//! Parsing checks the shape only; the meaning (method catalog, path grammar, semantic block,
//! schemas) is [`super::evaluate`]'s, in the seed's order.

use serde_json::Value;

use palisade_policy::{ErrorCode, Refusal};

/// Nesting a proposal may have (its schemas included).
pub const MAX_DEPTH: usize = 64;

/// A PROPOSE request, as read.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposal {
    pub task_id: Option<String>,
    /// The flat form's `name`.
    pub name: Option<String>,
    pub method: String,
    pub path: String,
    pub description: Option<String>,
    pub semantic: Option<Value>,
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
    pub persistent: bool,
    /// Which form it came in (`"endpoint"` or `"flat"`), for the attempt record.
    pub form: &'static str,
}

fn malformed(detail: &'static str, at: &'static str) -> Refusal {
    Refusal::new(ErrorCode::RcnsProposal, detail)
        .with_reason("proposal-malformed")
        .with_location(at)
}

impl Proposal {
    /// Reads a PROPOSE body (I-JSON, at most [`MAX_DEPTH`] deep).
    pub fn parse(body: &[u8]) -> Result<Proposal, Refusal> {
        let doc = palisade_policy::json::parse(body, MAX_DEPTH).map_err(|_| {
            malformed(
                "the PROPOSE body is not an I-JSON document within the nesting limit",
                "",
            )
        })?;
        let Value::Object(doc) = doc else {
            return Err(malformed("the PROPOSE body must be a JSON object", ""));
        };
        match doc.get("method") {
            None => {}
            Some(Value::String(m)) if m == "PROPOSE" => {}
            Some(_) => return Err(malformed("`method` must be \"PROPOSE\"", "/method")),
        }
        let task_id = match doc.get("task_id") {
            None => None,
            Some(Value::String(t)) if (1..=128).contains(&t.len()) => Some(t.clone()),
            Some(_) => {
                return Err(malformed(
                    "`task_id` must be a string of 1 to 128 characters",
                    "/task_id",
                ))
            }
        };
        let Some(Value::Object(params)) = doc.get("parameters") else {
            return Err(malformed("`parameters` must be an object", "/parameters"));
        };
        let persistent = match params.get("persistent") {
            None => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(malformed(
                    "`persistent` must be a boolean",
                    "/parameters/persistent",
                ))
            }
        };
        let (endpoint, form) = match params.get("endpoint") {
            Some(Value::Object(e)) => {
                if params.contains_key("method") || params.contains_key("path") {
                    return Err(malformed(
                        "the wrapped and the flat form are mutually exclusive (seed 000 §3.4)",
                        "/parameters",
                    ));
                }
                (e, "endpoint")
            }
            Some(_) => {
                return Err(malformed(
                    "`endpoint` must be an object",
                    "/parameters/endpoint",
                ))
            }
            None => (params, "flat"),
        };
        let name = match endpoint.get("name") {
            Some(Value::String(n)) if form == "flat" && (1..=128).contains(&n.len()) => {
                Some(n.clone())
            }
            None => None,
            Some(_) if form == "flat" => {
                return Err(malformed(
                    "`name` must be a string of 1 to 128 characters",
                    "/parameters/name",
                ))
            }
            Some(_) => None,
        };
        let string = |key: &str| -> Option<String> {
            endpoint.get(key).and_then(Value::as_str).map(str::to_owned)
        };
        let (Some(method), Some(path)) = (string("method"), string("path")) else {
            return Err(malformed(
                "the endpoint needs `method` and `path` strings",
                match form {
                    "endpoint" => "/parameters/endpoint",
                    _ => "/parameters",
                },
            ));
        };
        let description = string("description");
        let member = |key: &str| endpoint.get(key).cloned();
        Ok(Proposal {
            task_id,
            name,
            method,
            path,
            description,
            semantic: member("semantic"),
            input_schema: member("input_schema"),
            output_schema: member("output_schema"),
            persistent,
            form,
        })
    }

    /// Where the endpoint definition sits in the body, for pointers.
    pub fn endpoint_pointer(&self) -> &'static str {
        match self.form {
            "endpoint" => "/parameters/endpoint",
            _ => "/parameters",
        }
    }
}

pub use crate::recipes::semantic_problem;
