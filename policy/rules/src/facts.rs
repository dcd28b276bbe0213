//! What a rule can see of one write (SPEC §15's variables), and how it becomes CEL values.

use std::collections::HashMap;
use std::sync::Arc;

use cel::objects::{Key, Value};
use cel::Context;

/// One write, as the rules see it. Values are the sidecar's canonical ones: the fence key,
/// the canonical path, the parsed body (a tool call's `arguments`).
#[derive(Debug, Clone, Default)]
pub struct Facts<'a> {
    /// The caller (a token's subject, an SVID's SPIFFE ID, a certificate's digest): `""`
    /// when the write has none.
    pub caller: Option<&'a str>,
    /// The budgets' key form: `POST /api/v2/orders/{id}` (the binding's template) or
    /// `mcp:tool/create_order`.
    pub operation: &'a str,
    /// The agent-facing name of a connected operation, which `on` also matches.
    pub also: Option<&'a str>,
    /// The fence key.
    pub resource: &'a str,
    pub method: &'a str,
    /// The canonical path, without its query.
    pub path: &'a str,
    /// The raw query (without `?`), read into a map of string → list of strings.
    pub query: Option<&'a str>,
    /// The parsed body; `None` reads as `null`.
    pub body: Option<&'a serde_json::Value>,
    pub lease: Option<LeaseFacts<'a>>,
    pub tool: Option<ToolFacts<'a>>,
    /// Only the headers `rules.expose_headers` names, lower-case names.
    pub headers: Vec<(&'a str, &'a str)>,
    /// Unix milliseconds: `now`.
    pub now_ms: i64,
}

/// `lease`: what the write's lease says about its recovery.
#[derive(Debug, Clone, Copy)]
pub struct LeaseFacts<'a> {
    pub recovery_mode: &'a str,
    pub t_granted_ms: u64,
    pub agent_id: Option<&'a str>,
    /// The key that signed it (`kid`); the sidecar's own for a lease it granted.
    pub issuer: Option<&'a str>,
}

/// `tool`: a tool call's name and the `annotations` of its pinned definition.
#[derive(Debug, Clone, Copy)]
pub struct ToolFacts<'a> {
    pub name: &'a str,
    pub annotations: Option<&'a serde_json::Value>,
}

impl Facts<'_> {
    /// The CEL context: the built-in functions and SPEC §15's variables.
    pub(crate) fn context(&self) -> Context<'static, 'static> {
        let mut cx = Context::default();
        let s = |v: &str| Value::String(Arc::new(v.to_owned()));
        cx.add_variable_from_value("caller", s(self.caller.unwrap_or("")));
        cx.add_variable_from_value("operation", s(self.operation));
        cx.add_variable_from_value("resource", s(self.resource));
        cx.add_variable_from_value("method", s(self.method));
        cx.add_variable_from_value("path", s(self.path));
        cx.add_variable_from_value("query", query(self.query.unwrap_or("")));
        cx.add_variable_from_value("body", self.body.map_or(Value::Null, json));
        let lease = match &self.lease {
            None => Value::Null,
            Some(l) => map([
                ("recovery_mode", s(l.recovery_mode)),
                (
                    "t_granted_ms",
                    Value::Int(i64::try_from(l.t_granted_ms).unwrap_or(i64::MAX)),
                ),
                ("agent_id", l.agent_id.map_or(Value::Null, s)),
                ("issuer", l.issuer.map_or(Value::Null, s)),
            ]),
        };
        cx.add_variable_from_value("lease", lease);
        let tool = match &self.tool {
            None => Value::Null,
            Some(t) => map([
                ("name", s(t.name)),
                (
                    "annotations",
                    t.annotations.map_or_else(|| map(std::iter::empty()), json),
                ),
            ]),
        };
        cx.add_variable_from_value("tool", tool);
        let mut headers: HashMap<Key, Value> = HashMap::new();
        for (name, value) in &self.headers {
            headers.insert(Key::String(Arc::new(name.to_ascii_lowercase())), s(value));
        }
        cx.add_variable_from_value("headers", Value::from(headers));
        let now = chrono::DateTime::from_timestamp_millis(self.now_ms)
            .unwrap_or_default()
            .fixed_offset();
        cx.add_variable_from_value("now", Value::Timestamp(now));
        cx
    }
}

fn map<'k>(entries: impl IntoIterator<Item = (&'k str, Value)>) -> Value {
    let m: HashMap<Key, Value> = entries
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k.to_owned())), v))
        .collect();
    Value::from(m)
}

/// A JSON value as CEL reads it: integers that fit as `int` (else `uint`, else `double`),
/// other numbers as `double`. The depth is the sidecar's bound on the body.
fn json(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::Null,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::String(Arc::new(s.clone())),
        serde_json::Value::Array(a) => Value::List(Arc::new(a.iter().map(json).collect())),
        serde_json::Value::Object(o) => {
            let m: HashMap<Key, Value> = o
                .iter()
                .map(|(k, v)| (Key::String(Arc::new(k.clone())), json(v)))
                .collect();
            Value::from(m)
        }
    }
}

/// `a=1&a=2&b` → `{"a": ["1", "2"], "b": [""]}`, percent-decoded (`+` is a space, as forms
/// write it).
fn query(q: &str) -> Value {
    let mut m: HashMap<String, Vec<Value>> = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        m.entry(decode(k))
            .or_default()
            .push(Value::String(Arc::new(decode(v))));
    }
    let m: HashMap<Key, Value> = m
        .into_iter()
        .map(|(k, v)| (Key::String(Arc::new(k)), Value::List(Arc::new(v))))
        .collect();
    Value::from(m)
}

fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}
