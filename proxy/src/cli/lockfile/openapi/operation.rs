//! One operation's parts, translated to what a contract holds: its path and query
//! parameters, its request body's schema, its success and error responses.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::refs::resolve;
use super::schema;

pub(super) fn pointer_escape(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

/// Path, query and header parameters (the operation's over the path item's), each schema
/// translated as a body's is and checked by the sidecar (`rich::parameters`); cookie
/// parameters are listed as not checked.
pub(super) fn parameters(
    doc: &Value,
    item: &Map<String, Value>,
    op: &Map<String, Value>,
    t: &mut Translate<'_>,
    at: &str,
) -> Value {
    let mut by_place: BTreeMap<String, Map<String, Value>> = BTreeMap::new();
    let lists = [item.get("parameters"), op.get("parameters")];
    for p in lists
        .into_iter()
        .flatten()
        .filter_map(Value::as_array)
        .flatten()
    {
        let p = match resolve(doc, p) {
            Ok(p) => p,
            Err(why) => {
                t.untranslated.push(format!("{at}/parameters: {why}"));
                continue;
            }
        };
        let (Some(name), Some(place)) = (
            p.get("name").and_then(Value::as_str),
            p.get("in").and_then(Value::as_str),
        ) else {
            continue;
        };
        // OpenAPI 3.x: "If `in` is `header` and the `name` field is `Accept`, `Content-Type`
        // or `Authorization`, the parameter definition SHALL be ignored" (the media types and
        // the security schemes say those). Swagger 2.0 documents declare them often, a
        // required `Authorization` among them; checked, it would refuse what the API takes.
        if place == "header"
            && ["accept", "content-type", "authorization"]
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h))
        {
            t.untranslated.push(format!(
                "{at}/parameters/{}: a header the media types or security schemes describe; not checked",
                pointer_escape(name)
            ));
            continue;
        }
        if place == "cookie" {
            t.untranslated.push(format!(
                "{at}/parameters/{}: cookie parameters are not checked",
                pointer_escape(name)
            ));
            continue;
        }
        let schema = match p.get("schema") {
            Some(s) => t.root(s, &format!("{at}/parameters/{}", pointer_escape(name))),
            None => Value::Null,
        };
        let mut param = json!({
            "required": p.get("required").and_then(Value::as_bool).unwrap_or(place == "path"),
            "schema": schema,
        });
        if let Some(explode) = p.get("explode").and_then(Value::as_bool) {
            param["explode"] = explode.into();
        }
        by_place
            .entry(place.to_owned())
            .or_default()
            .insert(name.to_owned(), param);
    }
    Value::Object(
        by_place
            .into_iter()
            .map(|(k, v)| (k, Value::Object(v)))
            .collect(),
    )
}

/// The JSON media type of a content map (`application/json`, else any `…+json`).
pub(super) fn json_media(content: Option<&Value>) -> Option<&Value> {
    let c = content?.as_object()?;
    c.get("application/json").or_else(|| {
        c.iter()
            .find(|(k, _)| {
                let base = k.split(';').next().unwrap_or("").trim();
                base.ends_with("+json")
            })
            .map(|(_, v)| v)
    })
}

/// What translating one operation's schemas needs, and what it could not carry.
pub(super) struct Translate<'a> {
    pub(super) components: &'a Map<String, Value>,
    pub(super) dialect_30: bool,
    pub(super) untranslated: Vec<String>,
}

impl Translate<'_> {
    pub(super) fn root(&mut self, s: &Value, at: &str) -> Value {
        schema::root(
            s,
            self.components,
            self.dialect_30,
            at,
            &mut self.untranslated,
        )
    }
}

/// The request body's schema, or why there is none to check.
pub(super) fn request_schema(
    doc: &Value,
    op: &Map<String, Value>,
    t: &mut Translate<'_>,
    at: &str,
) -> Result<Value, String> {
    let Some(body) = op.get("requestBody") else {
        return Err("the document declares no request body".into());
    };
    let body = resolve(doc, body).map_err(|why| {
        t.untranslated.push(format!("{at}/requestBody: {why}"));
        format!("its request body: {why}")
    })?;
    let Some(media) = json_media(body.get("content")) else {
        return Err("its request body has no JSON media type".into());
    };
    let Some(s) = media.get("schema") else {
        return Err("its JSON request body has no schema".into());
    };
    Ok(t.root(s, &format!("{at}/requestBody")))
}

/// An operation's responses whose code `keep` accepts, each `$ref` followed (or listed).
pub(super) fn responses<'a>(
    doc: &'a Value,
    op: &'a Map<String, Value>,
    t: &mut Translate<'_>,
    at: &str,
    keep: fn(&str) -> bool,
) -> Vec<(&'a String, &'a Value)> {
    let Some(all) = op.get("responses").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (code, r) in all.iter().filter(|(c, _)| keep(c)) {
        match resolve(doc, r) {
            Ok(r) => out.push((code, r)),
            Err(why) => t.untranslated.push(format!("{at}/responses/{code}: {why}")),
        }
    }
    out
}

pub(super) fn response_schema(
    doc: &Value,
    op: &Map<String, Value>,
    t: &mut Translate<'_>,
    at: &str,
) -> Option<Value> {
    let mut schemas: Vec<&Value> = responses(doc, op, t, at, |c| c.starts_with('2'))
        .into_iter()
        .filter_map(|(_, r)| json_media(r.get("content"))?.get("schema"))
        .collect();
    schemas.dedup();
    let s = match schemas.as_slice() {
        [] => return None,
        [one] => (*one).clone(),
        many => json!({"anyOf": many}),
    };
    Some(t.root(&s, &format!("{at}/responses")))
}

pub(super) fn error_domain(
    doc: &Value,
    op: &Map<String, Value>,
    t: &mut Translate<'_>,
    at: &str,
) -> Value {
    let mut errors = Map::new();
    let failing = responses(doc, op, t, at, |c| c.starts_with('4') || c.starts_with('5'));
    for (code, r) in failing {
        let schema = json_media(r.get("content"))
            .and_then(|m| m.get("schema"))
            .map(|s| t.root(s, &format!("{at}/responses/{code}")));
        errors.insert(
            code.clone(),
            json!({"description": r.get("description").cloned().unwrap_or(Value::Null),
                   "schema": schema.unwrap_or_else(|| json!("unknown"))}),
        );
    }
    if errors.is_empty() {
        json!("unknown")
    } else {
        json!({"responses": errors})
    }
}
