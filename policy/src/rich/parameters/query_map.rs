//! A read's query as a connector maps it (RICH §9 on a read connection, issue 37): the
//! source's query as a JSON object for the request connector, and the connector's object
//! written back as the target's query.
//!
//! ```text
//! ?sku=B&qty=5&tag=a&tag=b  (qty declared integer, tag an array)
//!   → {"sku": "B", "qty": 5, "tag": ["a", "b"]}   → connector →  {"ItemCode": "B", "n": 5}
//!   → ItemCode=B&n=5
//! ```
//!
//! A declared name is read as its schema's type (as the check reads it); an undeclared one is
//! a string, or an array of strings when it repeats. The connector's output must be an object
//! of scalars or arrays of scalars (`null` leaves a name out): a query has nothing else.

use serde_json::{Map, Value};

use super::{query_pairs, Parameters};
use crate::{ErrorCode, Refusal};

impl Parameters {
    /// The query (raw, without `?`) as the object a read connection's request connector maps.
    pub fn query_object(&self, query: Option<&str>) -> Result<Value, Refusal> {
        let pairs = query_pairs(query.unwrap_or(""))?;
        let mut out = Map::new();
        for (name, _) in &pairs {
            if out.contains_key(name) {
                continue;
            }
            let values: Vec<&str> = pairs
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect();
            let value = match self.query.iter().find(|p| &p.name == name) {
                Some(p) => p.typed(&values, "query")?,
                None if values.len() == 1 => Some(Value::String(values[0].to_owned())),
                None => Some(values.iter().map(|v| Value::from(*v)).collect()),
            };
            if let Some(v) = value {
                out.insert(name.clone(), v);
            }
        }
        Ok(Value::Object(out))
    }
}

/// The query an unparameterised read's connector gets: every name a string, or an array of
/// strings when it repeats.
pub fn plain_query_object(query: Option<&str>) -> Result<Value, Refusal> {
    Parameters::default().query_object(query)
}

/// A connector's output written as a query (`application/x-www-form-urlencoded`, arrays as
/// repeated names, the names in code-point order as JSON objects keep them); `None` for an
/// empty object.
pub fn query_string(v: &Value) -> Result<Option<String>, Refusal> {
    let refuse = |at: &str, why: &str| {
        Refusal::new(
            ErrorCode::ConnectorPostcondition,
            format!("the connector's output is the target's query, and {why}"),
        )
        .with_location(at.to_owned())
    };
    let Value::Object(members) = v else {
        return Err(refuse("", "it is not an object"));
    };
    let mut out = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in members {
        let at = format!("/{}", name.replace('~', "~0").replace('/', "~1"));
        let items: Vec<&Value> = match value {
            Value::Null => continue,
            Value::Array(items) => items.iter().collect(),
            one => vec![one],
        };
        for item in items {
            let text = match item {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                Value::Bool(b) => b.to_string(),
                _ => return Err(refuse(&at, "a query value is text, a number or a boolean")),
            };
            out.append_pair(name, &text);
        }
    }
    let q = out.finish();
    Ok((!q.is_empty()).then_some(q))
}
