//! Swagger 2.0's schemas, parameter types and responses as OpenAPI 3.0 writes them.

use serde_json::{json, Map, Value};

/// The keys a non-body parameter (or its `items`) shares with a schema.
const SCHEMA_KEYS: [&str; 17] = [
    "type",
    "format",
    "items",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "enum",
    "multipleOf",
    "x-nullable",
];

/// A 2.0 response as 3.0's: its schema under each media type the operation produces.
pub(super) fn response(r: &Value, produces: &[String]) -> Value {
    let Some(obj) = r.as_object() else {
        return r.clone();
    };
    if obj.contains_key("$ref") {
        return refs(r);
    }
    let mut out = Map::new();
    out.insert(
        "description".into(),
        obj.get("description").cloned().unwrap_or(json!("")),
    );
    if let Some(s) = obj.get("schema") {
        let s = schema(s);
        let content: Map<String, Value> = produces
            .iter()
            .map(|m| (m.clone(), json!({ "schema": s })))
            .collect();
        out.insert("content".into(), Value::Object(content));
    }
    Value::Object(out)
}

/// A non-body parameter's (or an `items`') inline type as a schema.
pub(super) fn param_schema(p: &Value) -> Value {
    let mut s = Map::new();
    for key in SCHEMA_KEYS {
        if let Some(v) = p.get(key) {
            let v = if key == "items" {
                param_schema(v)
            } else {
                v.clone()
            };
            s.insert(key.into(), v);
        }
    }
    schema(&Value::Object(s))
}

/// A 2.0 schema as 3.0's: `$ref`s rewritten, `x-nullable` → `nullable`, a `discriminator`
/// (a property name in 2.0) → 3.0's object.
pub(super) fn schema(s: &Value) -> Value {
    match s {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, v) in o {
                match k.as_str() {
                    "$ref" => {
                        out.insert(k.clone(), rewrite_ref(v));
                    }
                    "x-nullable" => {
                        out.insert("nullable".into(), v.clone());
                    }
                    "discriminator" if v.is_string() => {
                        out.insert(k.clone(), json!({ "propertyName": v }));
                    }
                    // Member maps whose keys are names, not keywords: their values are schemas.
                    "properties" | "definitions" | "patternProperties" => {
                        let members = v
                            .as_object()
                            .map(|m| m.iter().map(|(n, s)| (n.clone(), schema(s))).collect())
                            .unwrap_or_default();
                        out.insert(k.clone(), Value::Object(members));
                    }
                    "example" | "default" | "enum" | "x-example" => {
                        out.insert(k.clone(), v.clone());
                    }
                    _ => {
                        out.insert(k.clone(), schema(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(schema).collect()),
        other => other.clone(),
    }
}

/// `$ref`s anywhere in `v` rewritten to 3.0's locations.
pub(super) fn refs(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let v = if k == "$ref" { rewrite_ref(v) } else { refs(v) };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(refs).collect()),
        other => other.clone(),
    }
}

fn rewrite_ref(v: &Value) -> Value {
    let Some(r) = v.as_str() else {
        return v.clone();
    };
    for (from, to) in [
        ("#/definitions/", "#/components/schemas/"),
        ("#/parameters/", "#/components/parameters/"),
        ("#/responses/", "#/components/responses/"),
    ] {
        if let Some(rest) = r.strip_prefix(from) {
            return json!(format!("{to}{rest}"));
        }
    }
    v.clone()
}
