//! OpenAPI Schema Objects → JSON Schema 2020-12 (RICH §3.3: an OpenAPI document is evidence a
//! contract is generated from).
//!
//! OpenAPI 3.1 schemas already are 2020-12; 3.0's dialect differs in a few keywords, which are
//! rewritten: `nullable: true` → `null` added to `type` (or to `enum`, or `anyOf` with
//! `{"type": "null"}` when there is no `type`), `example` → `examples: [example]`, boolean
//! `exclusiveMinimum`/`exclusiveMaximum` → the numeric form. `format` stays an annotation, as
//! 2020-12 makes it. `$ref`s to `#/components/schemas/X` become `#/$defs/X`, and every
//! schema reached that way (recursion included) is copied, translated, into the root's
//! `$defs`, so each contract schema stands alone. Anything else that cannot be carried over
//! (a `$ref` to another document or another part of this one) is replaced by `{}` and *listed*
//! in the result; nothing is dropped silently.
//!
//! Keyword-aware: only the places where 2020-12 has subschemas are walked, so a property
//! that happens to be named `example` or `nullable` is left alone.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Map, Value};

/// Deepest schema nesting walked; deeper is listed as untranslated (RICH §17.4).
const MAX_DEPTH: usize = 64;
const COMPONENT: &str = "#/components/schemas/";

/// Keywords whose value is one subschema.
const ONE: &[&str] = &[
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "if",
    "then",
    "else",
    "contentSchema",
];
/// Keywords whose value is an array of subschemas.
const MANY: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
/// Keywords whose value maps names to subschemas.
const NAMED: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// Translates `schema` (found at `at`, a JSON pointer into the document) as a standalone
/// 2020-12 root with the `$defs` it needs. `untranslated` collects what could not be carried.
pub(super) fn root(
    schema: &Value,
    components: &Map<String, Value>,
    dialect_30: bool,
    at: &str,
    untranslated: &mut Vec<String>,
) -> Value {
    let mut t = Translator {
        components,
        dialect_30,
        needed: BTreeSet::new(),
        untranslated,
    };
    let mut out = t.schema(schema, at, 0);
    // Every component reached, and every one those reach, until none is new.
    let mut defs = BTreeMap::new();
    while let Some(name) = t.needed.iter().find(|n| !defs.contains_key(*n)).cloned() {
        let def_at = format!("/components/schemas/{}", escape(&name));
        let translated = match components.get(&name) {
            Some(s) => t.schema(s, &def_at, 1),
            None => {
                t.untranslated
                    .push(format!("{at}: $ref {COMPONENT}{name} names no schema"));
                json!({})
            }
        };
        defs.insert(name, translated);
    }
    if let Value::Object(o) = &mut out {
        o.insert(
            "$schema".into(),
            json!("https://json-schema.org/draft/2020-12/schema"),
        );
        if !defs.is_empty() {
            o.insert("$defs".into(), Value::Object(defs.into_iter().collect()));
        }
    }
    out
}

fn escape(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

struct Translator<'a> {
    components: &'a Map<String, Value>,
    dialect_30: bool,
    needed: BTreeSet<String>,
    untranslated: &'a mut Vec<String>,
}

impl Translator<'_> {
    fn schema(&mut self, s: &Value, at: &str, depth: usize) -> Value {
        if depth > MAX_DEPTH {
            self.untranslated
                .push(format!("{at}: nested deeper than {MAX_DEPTH}"));
            return json!({});
        }
        let Value::Object(obj) = s else {
            // `true`/`false` schemas are 2020-12 already; anything else is not a schema.
            if s.is_boolean() {
                return s.clone();
            }
            self.untranslated.push(format!("{at}: not a schema"));
            return json!({});
        };
        let mut out = Map::new();
        for (k, v) in obj {
            let child = format!("{at}/{}", escape(k));
            let translated = match k.as_str() {
                "$ref" => match v.as_str().and_then(|r| r.strip_prefix(COMPONENT)) {
                    Some(name) if !name.contains('/') => {
                        // A URI fragment: percent-decoded, then a JSON pointer token.
                        let name = percent_encoding::percent_decode_str(name)
                            .decode_utf8_lossy()
                            .replace("~1", "/")
                            .replace("~0", "~");
                        if !self.components.contains_key(&name) {
                            self.untranslated
                                .push(format!("{at}: $ref {COMPONENT}{name} names no schema"));
                        }
                        self.needed.insert(name.clone());
                        json!(def_ref(&name))
                    }
                    _ => {
                        self.untranslated.push(format!(
                            "{at}: $ref {v} (only {COMPONENT}… is resolved); replaced by {{}}"
                        ));
                        continue;
                    }
                },
                key if ONE.contains(&key) => self.schema(v, &child, depth + 1),
                key if MANY.contains(&key) => match v {
                    Value::Array(items) => Value::Array(
                        items
                            .iter()
                            .enumerate()
                            .map(|(i, s)| self.schema(s, &format!("{child}/{i}"), depth + 1))
                            .collect(),
                    ),
                    _ => v.clone(),
                },
                key if NAMED.contains(&key) => match v {
                    Value::Object(m) => Value::Object(
                        m.iter()
                            .map(|(name, s)| {
                                let at = format!("{child}/{}", escape(name));
                                (name.clone(), self.schema(s, &at, depth + 1))
                            })
                            .collect(),
                    ),
                    _ => v.clone(),
                },
                _ => v.clone(),
            };
            out.insert(k.clone(), translated);
        }
        if self.dialect_30 {
            dialect_30(&mut out);
        }
        Value::Object(out)
    }
}

/// The OpenAPI 3.0 keywords whose meaning 2020-12 spells differently.
fn dialect_30(o: &mut Map<String, Value>) {
    if let Some(example) = o.remove("example") {
        o.entry("examples").or_insert_with(|| json!([example]));
    }
    for (flag, bound) in [
        ("exclusiveMinimum", "minimum"),
        ("exclusiveMaximum", "maximum"),
    ] {
        match o.get(flag) {
            Some(Value::Bool(true)) => {
                if let Some(b) = o.remove(bound) {
                    o.insert(flag.into(), b);
                } else {
                    o.remove(flag);
                }
            }
            Some(Value::Bool(false)) => {
                o.remove(flag);
            }
            _ => {}
        }
    }
    if o.remove("nullable") == Some(Value::Bool(true)) {
        if let Some(Value::Array(e)) = o.get_mut("enum") {
            if !e.contains(&Value::Null) {
                e.push(Value::Null);
            }
        }
        match o.get("type").cloned() {
            Some(Value::String(t)) => {
                o.insert("type".into(), json!([t, "null"]));
            }
            Some(Value::Array(mut ts)) => {
                if !ts.contains(&json!("null")) {
                    ts.push(json!("null"));
                }
                o.insert("type".into(), Value::Array(ts));
            }
            _ => {
                // No type to widen (a `$ref`, an `allOf`): null or the rest.
                let rest = Value::Object(std::mem::take(o));
                o.insert("anyOf".into(), json!([rest, {"type": "null"}]));
            }
        }
    }
}

/// What a URI fragment cannot hold as it is (RFC 3986 §3.5): percent-encoded in a `$ref`.
const FRAGMENT: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'<')
    .add(b'>')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The `$ref` to component `name` once copied into the root's `$defs`.
fn def_ref(name: &str) -> String {
    let token = escape(name);
    format!(
        "#/$defs/{}",
        percent_encoding::utf8_percent_encode(&token, FRAGMENT)
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn translate(s: Value, components: Value) -> (Value, Vec<String>) {
        let mut u = Vec::new();
        let c = components.as_object().unwrap().clone();
        (root(&s, &c, true, "/s", &mut u), u)
    }

    #[test]
    fn dialect_30_keywords_become_2020_12() {
        let (s, u) = translate(
            json!({"type": "object", "properties": {
                "n": {"type": "number", "minimum": 0, "exclusiveMinimum": true, "example": 3},
                "s": {"type": "string", "nullable": true, "enum": ["a"]},
                "example": {"type": "string", "nullable": false},
                "r": {"allOf": [{"$ref": "#/components/schemas/X"}], "nullable": true}
            }}),
            json!({"X": {"type": "integer"}}),
        );
        assert!(u.is_empty(), "{u:?}");
        let p = &s["properties"];
        assert_eq!(
            p["n"],
            json!({"type": "number", "exclusiveMinimum": 0, "examples": [3]})
        );
        assert_eq!(
            p["s"],
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        // A property *named* example is a property, not the keyword.
        assert_eq!(p["example"], json!({"type": "string"}));
        assert_eq!(
            p["r"],
            json!({"anyOf": [{"allOf": [{"$ref": "#/$defs/X"}]}, {"type": "null"}]})
        );
        assert_eq!(s["$defs"]["X"], json!({"type": "integer"}));
    }

    #[test]
    fn recursive_refs_become_defs_and_foreign_refs_are_listed() {
        let (s, u) = translate(
            json!({"$ref": "#/components/schemas/Node"}),
            json!({"Node": {"type": "object", "properties": {
                "next": {"$ref": "#/components/schemas/Node"},
                "ext": {"$ref": "other.yaml#/Thing"},
                "gone": {"$ref": "#/components/schemas/Missing"}}}}),
        );
        assert_eq!(s["$ref"], "#/$defs/Node");
        assert_eq!(
            s["$defs"]["Node"]["properties"]["next"]["$ref"],
            "#/$defs/Node"
        );
        assert_eq!(s["$defs"]["Node"]["properties"]["ext"], json!({}));
        assert_eq!(u.len(), 3, "{u:?}");
        assert!(u.iter().any(|m| m.contains("other.yaml")), "{u:?}");
        assert!(u.iter().any(|m| m.contains("Missing")), "{u:?}");
    }
}
