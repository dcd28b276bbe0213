//! The connector artifact (RICH §9.1): a content-addressed JSON document in the bundle's
//! contracts directory, naming the exact source and target contract digests it maps between,
//! its class (T0–T4), its transform, and pre/postconditions.
//!
//! ```json
//! {"id": "urn:example:connectors:allocate-v2-to-v1", "class": "T1",
//!  "sourceDigest": "sha-256:…", "targetDigest": "sha-256:…",
//!  "purpose": "structural-adaptation",
//!  "transform": {"lang": "jmespath", "expr": "{sku: item, quantity: qty}"},
//!  "preconditions": {}, "postconditions": {"required": ["sku"]},
//!  "qualification": "https://registry.example/qualifications/7"}
//! ```
//!
//! `preconditions` and `postconditions` are JSON Schemas (2020-12) over the connector's input
//! and output, checked on top of the source and target contracts (`{}` checks nothing more).
//! Only T0 (no `transform`, or `{"lang": "identity"}`) and T1/T2 with the restricted JMESPath
//! profile ([`super::t1`]) compile: T3 is arbitrary code and T4 a live model, neither of which
//! an enforced binding may run (§9.2, §11.1).

use serde_json::{Map, Value};

use super::t1::{Limits, T1Error, T1};
use crate::schema::{Schema, Violation};
use crate::Problem;
use palisade_policy::digest::Spelling;

/// Profile URI of T0 pass-through, as a lockfile's `connectorProfile` names it.
pub const PROFILE_T0: &str = "urn:palisade:connector-profile:t0-pass-through:1";
/// Profile URI of the restricted T1 JMESPath profile.
pub const PROFILE_T1: &str = "urn:palisade:connector-profile:t1-jmespath:1";

/// Transformation class (§9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    T0,
    T1,
    T2,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::T0 => "T0",
            Class::T1 => "T1",
            Class::T2 => "T2",
        }
    }
}

#[derive(Debug)]
enum Transform {
    PassThrough,
    Jmespath(T1),
}

/// A compiled connector.
#[derive(Debug)]
pub struct Connector {
    /// `sha-256:<hex>` of its JCS form (the file is named by it).
    pub digest: String,
    pub id: String,
    pub class: Class,
    /// The profile its transform runs under ([`PROFILE_T0`] or [`PROFILE_T1`]).
    pub profile: &'static str,
    pub source_digest: String,
    pub target_digest: String,
    transform: Transform,
    preconditions: Option<Schema>,
    postconditions: Option<Schema>,
}

/// Why a connector did not produce a target payload. The messages name locations, never
/// values: they end up in problem responses and drift events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorError {
    /// The input failed the connector's preconditions.
    Precondition(Violation),
    /// The transform refused or failed.
    Transform(String),
    /// The output failed the connector's postconditions.
    Postcondition(Violation),
}

impl std::fmt::Display for ConnectorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectorError::Precondition(v) => write!(
                f,
                "the connector's preconditions fail at {} (schema keyword {})",
                v.instance_location, v.schema_location
            ),
            ConnectorError::Transform(why) => write!(f, "the connector's transform: {why}"),
            ConnectorError::Postcondition(v) => write!(
                f,
                "the connector's postconditions fail at {} (schema keyword {})",
                v.instance_location, v.schema_location
            ),
        }
    }
}

impl From<ConnectorError> for palisade_policy::Refusal {
    /// A precondition or transform that fails is `ERR_CONNECTOR_FAILED`, a postcondition
    /// `ERR_CONNECTOR_POSTCONDITION`; each at the location it names.
    fn from(e: ConnectorError) -> Self {
        use palisade_policy::{ErrorCode, Refusal};
        let detail = e.to_string();
        match e {
            ConnectorError::Precondition(v) => {
                Refusal::new(ErrorCode::ConnectorFailed, detail).with_location(v.instance_location)
            }
            ConnectorError::Transform(_) => Refusal::new(ErrorCode::ConnectorFailed, detail),
            ConnectorError::Postcondition(v) => {
                Refusal::new(ErrorCode::ConnectorPostcondition, detail)
                    .with_location(v.instance_location)
            }
        }
    }
}

/// A transform error as a client may read it: the profile's own words, never a payload value
/// (the JMESPath evaluator's messages can quote one, so they are replaced).
fn disclosure_safe(e: &T1Error) -> String {
    match e {
        T1Error::Eval(_) => "the expression failed on this payload".into(),
        other => other.to_string(),
    }
}

impl Connector {
    /// Compiles the connector file `name` (`<64-hex>.json`).
    pub fn compile(name: &str, bytes: &[u8]) -> Result<Connector, Vec<Problem>> {
        let at = format!("contracts/{name}#");
        let doc = palisade_policy::json::parse(bytes, 64)
            .map_err(|e| vec![Problem::new(&at, format!("not I-JSON: {e}"))])?;
        let (digest, misnamed) = crate::content_named(name, &doc);
        let mut problems: Vec<Problem> = misnamed.into_iter().collect();
        let Value::Object(doc) = doc else {
            return Err(vec![Problem::new(at, "a connector must be a JSON object")]);
        };
        let text = |key: &str, problems: &mut Vec<Problem>| -> String {
            match doc.get(key) {
                Some(Value::String(s)) if !s.is_empty() => s.clone(),
                _ => {
                    problems.push(Problem::new(
                        format!("{at}/{key}"),
                        "is required (a non-empty string, RICH §9.1)",
                    ));
                    String::new()
                }
            }
        };
        let id = text("id", &mut problems);
        let _purpose = text("purpose", &mut problems);
        let _qualification = text("qualification", &mut problems);
        let source_digest = pinned(&doc, "sourceDigest", &at, &mut problems);
        let target_digest = pinned(&doc, "targetDigest", &at, &mut problems);
        let class = match doc.get("class").and_then(Value::as_str) {
            Some("T0") => Some(Class::T0),
            Some("T1") => Some(Class::T1),
            Some("T2") => Some(Class::T2),
            Some(c @ ("T3" | "T4")) => {
                problems.push(Problem::new(
                    format!("{at}/class"),
                    format!(
                        "{c} connectors cannot be enforced: {} (RICH §9.2)",
                        if c == "T3" {
                            "arbitrary code is not run in the data plane"
                        } else {
                            "a live model is not deterministic"
                        }
                    ),
                ));
                None
            }
            _ => {
                problems.push(Problem::new(
                    format!("{at}/class"),
                    "must be one of T0, T1, T2 (T3 and T4 cannot be enforced)",
                ));
                None
            }
        };
        let transform = match (class, doc.get("transform")) {
            (Some(Class::T0), None) => Some(Transform::PassThrough),
            (Some(Class::T0), Some(t))
                if t.get("lang").and_then(Value::as_str) == Some("identity") =>
            {
                Some(Transform::PassThrough)
            }
            (Some(Class::T0), Some(_)) => {
                problems.push(Problem::new(
                    format!("{at}/transform"),
                    "a T0 connector passes its input through: no transform, or {\"lang\": \"identity\"}",
                ));
                None
            }
            (Some(_), Some(t)) => jmespath(t, &at, &mut problems),
            (Some(_), None) => {
                problems.push(Problem::new(
                    format!("{at}/transform"),
                    "is required: {\"lang\": \"jmespath\", \"expr\": \"…\"}",
                ));
                None
            }
            (None, _) => None,
        };
        let preconditions = condition(&doc, "preconditions", &at, &mut problems);
        let postconditions = condition(&doc, "postconditions", &at, &mut problems);
        match (class, transform) {
            (Some(class), Some(transform)) if problems.is_empty() => Ok(Connector {
                digest: digest.spelled(Spelling::ShaDash256),
                id,
                class,
                profile: match transform {
                    Transform::PassThrough => PROFILE_T0,
                    Transform::Jmespath(_) => PROFILE_T1,
                },
                source_digest,
                target_digest,
                transform,
                preconditions,
                postconditions,
            }),
            _ => Err(problems),
        }
    }

    /// Runs the connector: preconditions, transform, postconditions. Pure and bounded by the
    /// profile's limits.
    pub fn run(&self, input: &Value) -> Result<Value, ConnectorError> {
        if let Some(pre) = &self.preconditions {
            pre.check(input).map_err(ConnectorError::Precondition)?;
        }
        let out = match &self.transform {
            Transform::PassThrough => input.clone(),
            Transform::Jmespath(t1) => t1
                .apply(input)
                .map_err(|e| ConnectorError::Transform(disclosure_safe(&e)))?,
        };
        if let Some(post) = &self.postconditions {
            post.check(&out).map_err(ConnectorError::Postcondition)?;
        }
        Ok(out)
    }
}

impl Connector {
    /// §11.1 (5): whether `record` (a qualification record, §8.2) qualifies this connector:
    /// it names the connector (`subjectDigest`, `subjectUri`), its `decision` is
    /// `"qualified"`, and its `expiry` has not passed (`now_ms`; `None` skips that check).
    /// Each failure is (member, why).
    pub fn qualified_by(&self, record: &Value, now_ms: Option<i64>) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let field = |k: &str| record.get(k).and_then(Value::as_str);
        if field("subjectDigest") != Some(self.digest.as_str()) {
            out.push((
                "subjectDigest",
                format!(
                    "the record qualifies another subject, not the connector {}",
                    self.digest
                ),
            ));
        }
        if field("subjectUri") != Some(self.id.as_str()) {
            out.push(("subjectUri", "must be the connector's id".to_owned()));
        }
        if field("decision") != Some("qualified") {
            out.push((
                "decision",
                "the connector is not qualified (decision must be \"qualified\", RICH §8.2)"
                    .to_owned(),
            ));
        }
        let expiry = field("expiry").and_then(|e| {
            time::OffsetDateTime::parse(e, &time::format_description::well_known::Rfc3339).ok()
        });
        match (expiry, now_ms) {
            (None, _) => out.push((
                "expiry",
                "is required: an RFC 3339 time the qualification is valid until".to_owned(),
            )),
            (Some(e), Some(now)) if (e.unix_timestamp_nanos() / 1_000_000) as i64 <= now => {
                out.push(("expiry", "the qualification has expired".to_owned()))
            }
            _ => {}
        }
        out
    }
}

/// `sourceDigest` / `targetDigest`: `sha-256:` and 64 lowercase hex digits.
fn pinned(doc: &Map<String, Value>, key: &str, at: &str, problems: &mut Vec<Problem>) -> String {
    match doc.get(key).and_then(Value::as_str) {
        Some(d) if is_digest(d) => d.to_owned(),
        _ => {
            problems.push(Problem::new(
                format!("{at}/{key}"),
                "is required: sha-256: and 64 lowercase hex digits (a contract's digest)",
            ));
            String::new()
        }
    }
}

/// `sha-256:` and 64 lowercase hex digits.
pub(crate) fn is_digest(d: &str) -> bool {
    d.strip_prefix("sha-256:")
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

fn jmespath(t: &Value, at: &str, problems: &mut Vec<Problem>) -> Option<Transform> {
    let lang = t.get("lang").and_then(Value::as_str);
    let expr = t.get("expr").and_then(Value::as_str);
    match (lang, expr) {
        (Some("jmespath"), Some(expr)) => match T1::compile(expr, Limits::default()) {
            Ok(t1) => Some(Transform::Jmespath(t1)),
            Err(e) => {
                problems.push(Problem::new(format!("{at}/transform/expr"), e.to_string()));
                None
            }
        },
        (Some(other), _) if other != "jmespath" => {
            problems.push(Problem::new(
                format!("{at}/transform/lang"),
                format!("\"{other}\" is not a T1 profile this sidecar runs (only \"jmespath\")"),
            ));
            None
        }
        _ => {
            problems.push(Problem::new(
                format!("{at}/transform"),
                "must be {\"lang\": \"jmespath\", \"expr\": \"…\"}",
            ));
            None
        }
    }
}

fn condition(
    doc: &Map<String, Value>,
    key: &str,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<Schema> {
    let v = doc.get(key)?;
    match v {
        Value::Object(o) if o.is_empty() => None,
        Value::Object(_) | Value::Bool(_) => match Schema::compile(v, &format!("{at}/{key}")) {
            Ok(s) => Some(s),
            Err(ps) => {
                problems.extend(ps);
                None
            }
        },
        _ => {
            problems.push(Problem::new(
                format!("{at}/{key}"),
                "must be a JSON Schema over the connector's payload ({} checks nothing)",
            ));
            None
        }
    }
}

#[cfg(test)]
mod tests;
