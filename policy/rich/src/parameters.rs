//! Path, query and header parameters of a contract (`structural.parameters`, as `lock import-openapi`
//! records them from OpenAPI): each a JSON Schema, checked on the data plane before the
//! request goes anywhere.
//!
//! ```json
//! "parameters": {"path": {"projectId": {"required": true, "schema": {…}}},
//!                "query": {"pageSize": {"required": false, "schema": {"type": "integer"}}}}
//! ```
//!
//! A parameter arrives as text. It is read as the type its schema names (`integer`,
//! `number`, `boolean`; an `array` from every occurrence of a query name, OpenAPI's default
//! `form`/`explode` style; anything else a string) and the schema checks that value. Text that
//! is not the named type fails as the schema would fail the value. Query names the contract
//! does not declare pass (OpenAPI does not close the query string). Header parameters are
//! matched without regard to case and read in OpenAPI's `simple` style (an array from one
//! comma-separated value, unless `explode` says otherwise); `Accept`, `Content-Type` and
//! `Authorization` are never parameters (OpenAPI ignores them); a value that is not text fails.
//! Cookie parameters are not checked (the importer lists them). Locations in refusals are
//! `/path/<name>`, `/query/<name>` and `/header/<name>` (lower case).
//!
//! The whole query is read or none of it: a query longer than [`MAX_QUERY_BYTES`] is refused
//! 414 `ERR_QUERY_TOO_LONG`, one of more than [`MAX_QUERY_PAIRS`] pairs 400
//! `ERR_QUERY_TOO_MANY_PAIRS`. A check that read only a prefix would pass a value the
//! upstream's parser reads after it (issue 44: `?limit=5&<1,024 fillers>&limit=500`).

use serde_json::{Map, Value};

use super::schema::Schema;
use super::Problem;
use palisade_policy::{ErrorCode, Refusal};

/// Most declared parameters per contract.
const MAX_PARAMETERS: usize = 256;

/// Most `&`-separated pairs in a query a contract's parameters are checked against.
pub const MAX_QUERY_PAIRS: usize = 1024;

/// Longest query (raw, without `?`) a contract's parameters are checked against.
pub const MAX_QUERY_BYTES: usize = 16 * 1024;

#[derive(Debug)]
struct Parameter {
    name: String,
    required: bool,
    /// OpenAPI `explode` (query only; default true): `false` reads an array from one
    /// comma-separated value.
    explode: bool,
    /// The `type` text is read as.
    kind: Kind,
    schema: Option<Schema>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    String,
    Integer,
    Number,
    Boolean,
    /// Every occurrence, each item read as the inner kind.
    Array(Scalar),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scalar {
    String,
    Integer,
    Number,
    Boolean,
}

/// A contract's compiled parameters.
#[derive(Debug, Default)]
pub struct Parameters {
    path: Vec<Parameter>,
    query: Vec<Parameter>,
    header: Vec<Parameter>,
}

/// Header names OpenAPI says are never parameters.
const NOT_PARAMETERS: [&str; 3] = ["accept", "content-type", "authorization"];

/// A request's header values by (lower-case) name, `None` for a value that is not text.
pub type Headers<'a, 'h> = &'a dyn Fn(&str) -> Vec<Option<&'h str>>;

fn scalar(schema: &Value) -> Scalar {
    match schema.get("type").and_then(Value::as_str) {
        Some("integer") => Scalar::Integer,
        Some("number") => Scalar::Number,
        Some("boolean") => Scalar::Boolean,
        _ => Scalar::String,
    }
}

fn kind(schema: &Value) -> Kind {
    match schema.get("type").and_then(Value::as_str) {
        Some("array") => Kind::Array(schema.get("items").map_or(Scalar::String, scalar)),
        _ => match scalar(schema) {
            Scalar::String => Kind::String,
            Scalar::Integer => Kind::Integer,
            Scalar::Number => Kind::Number,
            Scalar::Boolean => Kind::Boolean,
        },
    }
}

impl Parameters {
    /// Compiles `structural.parameters`; `at` is the pointer of that member.
    pub fn compile(
        doc: &Value,
        at: &str,
        assert_formats: bool,
        problems: &mut Vec<Problem>,
    ) -> Option<Parameters> {
        let Value::Object(places) = doc else {
            problems.push(Problem::new(
                at,
                "must be an object of places (path, query)",
            ));
            return None;
        };
        let mut out = Parameters::default();
        for (place, params) in places {
            let list = match place.as_str() {
                "path" => &mut out.path,
                "query" => &mut out.query,
                "header" => &mut out.header,
                // Cookies are recorded, not checked (docs/decisions.md).
                "cookie" => continue,
                _ => {
                    problems.push(Problem::new(
                        format!("{at}/{place}"),
                        "a parameter's place is path, query, header or cookie",
                    ));
                    continue;
                }
            };
            let Some(params) = params.as_object() else {
                problems.push(Problem::new(format!("{at}/{place}"), "must be an object"));
                continue;
            };
            for (name, p) in params {
                let name = if place == "header" {
                    let lower = name.to_ascii_lowercase();
                    if NOT_PARAMETERS.contains(&lower.as_str()) {
                        continue;
                    }
                    lower
                } else {
                    name.clone()
                };
                if list.len() >= MAX_PARAMETERS {
                    problems.push(Problem::new(
                        format!("{at}/{place}"),
                        format!("more than {MAX_PARAMETERS} parameters"),
                    ));
                    break;
                }
                let here = format!(
                    "{at}/{place}/{}",
                    name.replace('~', "~0").replace('/', "~1")
                );
                let schema_doc = p.get("schema").filter(|s| !s.is_null());
                let schema = match schema_doc {
                    None => None,
                    Some(s) => {
                        match Schema::compile_with(s, &format!("{here}/schema"), assert_formats) {
                            Ok(s) => Some(s),
                            Err(ps) => {
                                problems.extend(ps);
                                continue;
                            }
                        }
                    }
                };
                list.push(Parameter {
                    name,
                    required: p
                        .get("required")
                        .and_then(Value::as_bool)
                        .unwrap_or(place == "path"),
                    // `form` (query) explodes by default, `simple` (header) does not.
                    explode: p
                        .get("explode")
                        .and_then(Value::as_bool)
                        .unwrap_or(place != "header"),
                    kind: schema_doc.map_or(Kind::String, kind),
                    schema,
                });
            }
        }
        Some(out)
    }

    /// Checks a request's path parameters (`(name, raw segment)`, from the bound template)
    /// and its query string (raw, without `?`).
    pub fn check(
        &self,
        path: &[(&str, &str)],
        query: Option<&str>,
        headers: Headers<'_, '_>,
    ) -> Result<(), Refusal> {
        for p in &self.path {
            let raw = path.iter().find(|(n, _)| *n == p.name).map(|(_, v)| *v);
            let decoded = raw.map(|r| percent_encoding::percent_decode_str(r).decode_utf8_lossy());
            let values: Vec<&str> = decoded.as_deref().into_iter().collect();
            p.check_values(&values, "path")?;
        }
        for p in &self.header {
            let values: Option<Vec<&str>> = headers(&p.name).into_iter().collect();
            let values = values.ok_or_else(|| {
                Refusal::new(ErrorCode::ContractInput, "the header parameter is not text")
                    .with_location(format!("/header/{}", p.name))
            })?;
            p.check_values(&values, "header")?;
        }
        if self.query.is_empty() {
            return Ok(());
        }
        let pairs = query_pairs(query.unwrap_or(""))?;
        for p in &self.query {
            let values: Vec<&str> = pairs
                .iter()
                .filter(|(k, _)| *k == p.name)
                .map(|(_, v)| v.as_str())
                .collect();
            p.check_values(&values, "query")?;
        }
        Ok(())
    }
}

/// Every pair of `query`, decoded as `application/x-www-form-urlencoded` (as the upstream's
/// form parser reads it), or the refusal of a query too large to read whole. Never a prefix.
fn query_pairs(query: &str) -> Result<Vec<(String, String)>, Refusal> {
    if query.len() > MAX_QUERY_BYTES {
        return Err(Refusal::new(
            ErrorCode::QueryTooLong,
            format!("the query string is longer than {MAX_QUERY_BYTES} bytes, the most a contract's parameters are checked on"),
        ));
    }
    // Counted on the raw text first, so a refused query allocates nothing. The parser skips
    // empty pieces (`a=1&&b=2`), so this count is an upper bound of what it yields.
    let pieces = query.split('&').filter(|p| !p.is_empty()).count();
    if pieces > MAX_QUERY_PAIRS {
        return Err(Refusal::new(
            ErrorCode::QueryTooManyPairs,
            format!("the query string has more than {MAX_QUERY_PAIRS} parameters, the most a contract's parameters are checked on"),
        ));
    }
    Ok(url::form_urlencoded::parse(query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect())
}

impl Parameter {
    fn location(&self, place: &str) -> String {
        format!(
            "/{place}/{}",
            self.name.replace('~', "~0").replace('/', "~1")
        )
    }

    fn check_values(&self, values: &[&str], place: &str) -> Result<(), Refusal> {
        let Some(value) = self.typed(values, place)? else {
            return Ok(());
        };
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        schema.check(&value).map_err(|v| {
            Refusal::new(
                ErrorCode::ContractInput,
                format!(
                    "the {place} parameter violates structural.parameters at schema keyword {}",
                    v.schema_location
                ),
            )
            .with_location(self.location(place))
        })
    }

    /// The parameter's text read as its schema's type; `None` when it is absent and may be.
    fn typed(&self, values: &[&str], place: &str) -> Result<Option<Value>, Refusal> {
        let location = self.location(place);
        let refuse = |why: String| {
            Refusal::new(ErrorCode::ContractInput, why).with_location(location.clone())
        };
        if values.is_empty() {
            if self.required {
                return Err(refuse(format!(
                    "the {place} parameter is required by structural.parameters"
                )));
            }
            return Ok(None);
        }
        let split: Vec<&str>;
        let values = match (self.kind, self.explode, values) {
            (Kind::Array(_), false, [one]) => {
                split = one.split(',').collect();
                &split[..]
            }
            _ => values,
        };
        let value = match self.kind {
            Kind::Array(item) => Value::Array(
                values
                    .iter()
                    .map(|v| read(v, item))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        refuse(format!(
                            "a {place} parameter item is not of its schema's type"
                        ))
                    })?,
            ),
            _ if values.len() > 1 => {
                return Err(refuse(format!(
                    "the {place} parameter is given more than once"
                )))
            }
            k => read(
                values[0],
                match k {
                    Kind::Integer => Scalar::Integer,
                    Kind::Number => Scalar::Number,
                    Kind::Boolean => Scalar::Boolean,
                    _ => Scalar::String,
                },
            )
            .ok_or_else(|| refuse(format!("the {place} parameter is not of its schema's type")))?,
        };
        Ok(Some(value))
    }
}

/// Text as a scalar of `kind`; `None` when it is not one. Integers beyond ±2^53 are not
/// integers here (I-JSON).
fn read(text: &str, kind: Scalar) -> Option<Value> {
    match kind {
        Scalar::String => Some(Value::String(text.to_owned())),
        Scalar::Integer => {
            let n: i64 = text.parse().ok()?;
            (n.unsigned_abs() < (1 << 53)).then(|| Value::from(n))
        }
        Scalar::Number => {
            let f: f64 = text.parse().ok().filter(|f: &f64| f.is_finite())?;
            serde_json::Number::from_f64(f).map(Value::Number)
        }
        Scalar::Boolean => match text {
            "true" => Some(Value::Bool(true)),
            "false" => Some(Value::Bool(false)),
            _ => None,
        },
    }
}

/// The `(name, raw segment)` pairs of `path` under an operation's template (`METHOD /a/{x}`).
pub fn path_values<'p>(operation: &'p str, path: &'p str) -> Vec<(&'p str, &'p str)> {
    let template = operation.split_once(' ').map_or("", |(_, t)| t);
    template
        .split('/')
        .zip(path.split('/'))
        .filter_map(|(t, v)| Some((t.strip_prefix('{')?.strip_suffix('}')?, v)))
        .collect()
}

// A read's query as a connector maps it (RICH §9 on a read connection, issue 37): the
// source's query as a JSON object for the request connector, and the connector's object
// written back as the target's query:
//
//   ?sku=B&qty=5&tag=a&tag=b  (qty declared integer, tag an array)
//     → {"sku": "B", "qty": 5, "tag": ["a", "b"]}  → connector → {"ItemCode": "B", "n": 5}
//     → ItemCode=B&n=5
//
// A declared name is read as its schema's type (as the check reads it); an undeclared one is
// a string, or an array of strings when it repeats. The connector's output must be an object
// of scalars or arrays of scalars (`null` leaves a name out): a query has nothing else.

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

#[cfg(test)]
mod tests;
