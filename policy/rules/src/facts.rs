//! What a rule can see of one write (SPEC §15's variables), and how it becomes CEL values.

use std::collections::HashMap;

use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelTimestamp,
    CelUInt,
};
use cel::common::value::Val;
use cel::Context;

use crate::expr::{BodyUse, VARIABLES};

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

impl<'f> Facts<'f> {
    /// SPEC §15's variables that the rules read (`uses`), in a scope under `root` (CEL's
    /// standard library, made once per thread). Values borrow from the facts: a string of the
    /// body is not copied.
    pub(crate) fn context<'r>(
        &self,
        root: &'r Context<'static, 'static>,
        uses: u16,
        body: &BodyUse,
    ) -> Context<'r, 'f>
    where
        'f: 'r,
    {
        let root: &'r Context<'r, 'f> = root;
        let mut cx = root.new_inner_scope();
        for (i, name) in VARIABLES.iter().enumerate() {
            if uses & (1 << i) == 0 {
                continue;
            }
            let value: Box<dyn Val + 'f> = match *name {
                "caller" => s(self.caller.unwrap_or("")),
                "operation" => s(self.operation),
                "resource" => s(self.resource),
                "method" => s(self.method),
                "path" => s(self.path),
                "query" => query(self.query.unwrap_or("")),
                "body" => match self.body {
                    None => null(),
                    // Only the members some rule reads; a body that is not an object is read
                    // as it is (a member of it is an error either way).
                    Some(serde_json::Value::Object(o)) if !body.whole => map(body
                        .members
                        .iter()
                        .filter_map(|m| o.get_key_value(m.as_str()))
                        .map(|(k, v)| (k.as_str(), json(v)))),
                    Some(v) => json(v),
                },
                "lease" => match &self.lease {
                    None => null(),
                    Some(l) => map([
                        ("recovery_mode", s(l.recovery_mode)),
                        (
                            "t_granted_ms",
                            Box::new(CelInt::from(
                                i64::try_from(l.t_granted_ms).unwrap_or(i64::MAX),
                            )),
                        ),
                        ("agent_id", l.agent_id.map_or_else(null, s)),
                        ("issuer", l.issuer.map_or_else(null, s)),
                    ]),
                },
                "tool" => match &self.tool {
                    None => null(),
                    Some(t) => map([
                        ("name", s(t.name)),
                        (
                            "annotations",
                            t.annotations.map_or_else(|| map::<&str>([]), json),
                        ),
                    ]),
                },
                "headers" => map(self
                    .headers
                    .iter()
                    .map(|(name, value)| (name.to_ascii_lowercase(), s(value)))),
                _ => {
                    let now = chrono::DateTime::from_timestamp_millis(self.now_ms)
                        .unwrap_or_default()
                        .fixed_offset();
                    Box::new(CelTimestamp::from(now))
                }
            };
            cx.add_variable_as_val(*name, value);
        }
        cx
    }
}

fn s<'f>(v: &'f str) -> Box<dyn Val + 'f> {
    Box::new(CelString::from(v))
}

fn null<'f>() -> Box<dyn Val + 'f> {
    Box::new(CelNull)
}

fn map<'f, K: Into<CelMapKey<'f>>>(
    entries: impl IntoIterator<Item = (K, Box<dyn Val + 'f>)>,
) -> Box<dyn Val + 'f> {
    let m: HashMap<CelMapKey<'f>, Box<dyn Val + 'f>> =
        entries.into_iter().map(|(k, v)| (k.into(), v)).collect();
    Box::new(CelMap::from(m))
}

/// A JSON value as CEL reads it, borrowing its strings: integers that fit as `int` (else
/// `uint`, else `double`), other numbers as `double`. Its depth is the sidecar's bound on the
/// body.
fn json<'f>(v: &'f serde_json::Value) -> Box<dyn Val + 'f> {
    match v {
        serde_json::Value::Null => null(),
        serde_json::Value::Bool(b) => Box::new(CelBool::from(*b)),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        serde_json::Value::String(x) => s(x),
        serde_json::Value::Array(a) => {
            Box::new(CelList::from(a.iter().map(json).collect::<Vec<_>>()))
        }
        serde_json::Value::Object(o) => map(o.iter().map(|(k, v)| (k.as_str(), json(v)))),
    }
}

/// `a=1&a=2&b` → `{"a": ["1", "2"], "b": [""]}`, percent-decoded (`+` is a space, as forms
/// write it).
fn query<'f>(q: &str) -> Box<dyn Val + 'f> {
    let mut m: Vec<(String, Vec<Box<dyn Val + 'f>>)> = Vec::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode(k), decode(v));
        let value: Box<dyn Val + 'f> = Box::new(CelString::from(v));
        match m.iter_mut().find(|(key, _)| *key == k) {
            Some((_, values)) => values.push(value),
            None => m.push((k, vec![value])),
        }
    }
    map(m
        .into_iter()
        .map(|(k, v)| (k, Box::new(CelList::from(v)) as Box<dyn Val + 'f>)))
}

fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}
