//! A binding's worst-case bound (RICH §12.2, §10.2): what its input contract can admit at most,
//! as a JSON Schema in the decidable fragment (type, enum, const, minimum/maximum and their
//! exclusive forms, minLength/maxLength, minItems/maxItems, items, properties, required,
//! additionalProperties), so an authorization server can compare it with what it grants.
//!
//! The bound over-approximates: every keyword outside the fragment only narrows what a schema
//! accepts (`pattern`, `format`, `multipleOf`, `allOf`/`anyOf`/`oneOf`/`not`,
//! `if`/`then`/`else`, `dependent*`, `uniqueItems`, `contains`, `unevaluated*`, …), so
//! dropping it keeps every input the contract accepts inside the bound. Where dropping one
//! keyword would let another narrow more than it did — `items` after `prefixItems`,
//! `additionalProperties` beside `patternProperties` — both go. A schema that refers elsewhere
//! (`$ref`, `$dynamicRef`) is not followed: its bound is recorded as not computable.

use serde_json::{Map, Value};

use palisade_policy::digest::Sha256Digest;

/// Deepest schema walked.
pub const MAX_DEPTH: usize = 64;

/// A contract's worst-case bound over its input.
#[derive(Debug, Clone, PartialEq)]
pub enum WorstCaseBound {
    Bound {
        schema: Value,
        /// `sha-256:` of the bound's JCS form (seed 002 §10.2 `worstCaseBoundDigest`).
        digest: String,
    },
    /// Why it cannot be computed.
    NotComputable(String),
}

impl WorstCaseBound {
    /// The bound of an input schema; `None` (no input schema, or `"unknown"`) is unbounded.
    pub fn of(input: Option<&Value>) -> WorstCaseBound {
        let unbounded = Value::Bool(true);
        match worst_case(input.unwrap_or(&unbounded), 0) {
            Ok(schema) => WorstCaseBound::Bound {
                digest: format!("sha-256:{}", Sha256Digest::of_json(&schema).to_hex()),
                schema,
            },
            Err(why) => WorstCaseBound::NotComputable(why),
        }
    }

    /// `{"worstCaseBound": …, "worstCaseBoundDigest": …}` or `{"worstCaseBound": null,
    /// "notComputable": why}`.
    pub fn to_json(&self) -> Value {
        match self {
            WorstCaseBound::Bound { schema, digest } => serde_json::json!({
                "worstCaseBound": schema, "worstCaseBoundDigest": digest,
            }),
            WorstCaseBound::NotComputable(why) => serde_json::json!({
                "worstCaseBound": null, "notComputable": why,
            }),
        }
    }
}

/// The fragment's keywords that constrain an instance directly (the others,
/// [`NESTED_KEYWORDS`], hold schemas).
pub const SCALAR_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "required",
];

/// The fragment's keywords whose values are schemas (or a map of them).
pub const NESTED_KEYWORDS: &[&str] = &["items", "properties", "additionalProperties"];

fn worst_case(schema: &Value, depth: usize) -> Result<Value, String> {
    if depth > MAX_DEPTH {
        return Err("the input schema nests deeper than the bound is computed".into());
    }
    let obj = match schema {
        Value::Bool(_) => return Ok(schema.clone()),
        Value::Object(o) => o,
        // "unknown" and anything else that is no schema: nothing is known to bound it.
        _ => return Ok(Value::Bool(true)),
    };
    for r in ["$ref", "$dynamicRef", "$recursiveRef"] {
        if obj.contains_key(r) {
            return Err(format!(
                "the input schema uses {r}, which the bound does not follow"
            ));
        }
    }
    let mut out = Map::new();
    for k in SCALAR_KEYWORDS {
        if let Some(v) = obj.get(*k) {
            out.insert((*k).to_owned(), v.clone());
        }
    }
    if let Some(Value::Object(props)) = obj.get("properties") {
        let mut bounded = Map::new();
        for (name, sub) in props {
            bounded.insert(name.clone(), worst_case(sub, depth + 1)?);
        }
        out.insert("properties".into(), Value::Object(bounded));
    }
    if !obj.contains_key("prefixItems") {
        if let Some(items) = obj.get("items").filter(|i| i.is_object() || i.is_boolean()) {
            out.insert("items".into(), worst_case(items, depth + 1)?);
        }
    }
    if !obj.contains_key("patternProperties") {
        if let Some(extra) = obj.get("additionalProperties") {
            out.insert("additionalProperties".into(), worst_case(extra, depth + 1)?);
        }
    }
    if out.is_empty() {
        return Ok(Value::Bool(true));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn bound(input: Value) -> Value {
        match WorstCaseBound::of(Some(&input)) {
            WorstCaseBound::Bound { schema, .. } => schema,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_fragment_is_kept_and_the_rest_dropped() {
        let input = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object", "required": ["qty"], "additionalProperties": false,
            "properties": {
                "qty": {"type": "integer", "minimum": 0, "maximum": 5000, "multipleOf": 5},
                "sku": {"type": "string", "pattern": "^SKU-", "maxLength": 32},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "uniqueItems": true}
            },
            "allOf": [{"required": ["sku"]}]});
        assert_eq!(
            bound(input),
            json!({"type": "object", "required": ["qty"], "additionalProperties": false,
            "properties": {
                "qty": {"type": "integer", "minimum": 0, "maximum": 5000},
                "sku": {"type": "string", "maxLength": 32},
                "tags": {"type": "array", "items": {"enum": ["a", "b"]}}
            }})
        );
    }

    #[test]
    fn what_would_narrow_more_goes_too() {
        let b = bound(json!({"type": "array", "prefixItems": [{"type": "string"}],
                             "items": {"type": "integer"}}));
        assert_eq!(b, json!({"type": "array"}));
        let b = bound(json!({"type": "object", "patternProperties": {"^x-": true},
                             "additionalProperties": false}));
        assert_eq!(b, json!({"type": "object"}));
    }

    #[test]
    fn unknown_is_unbounded_and_refs_are_not_computable() {
        assert_eq!(
            WorstCaseBound::of(None),
            WorstCaseBound::of(Some(&json!(true)))
        );
        assert_eq!(bound(json!("unknown")), json!(true));
        assert_eq!(bound(json!({"pattern": "^a"})), json!(true));
        let r = WorstCaseBound::of(Some(&json!({"properties": {"a": {"$ref": "#/$defs/a"}}})));
        assert!(matches!(r, WorstCaseBound::NotComputable(why) if why.contains("$ref")));
    }

    #[test]
    fn the_bound_admits_everything_the_contract_does() {
        // Sound by construction; checked here on samples with the schemas compiled.
        let input = json!({"type": "object", "properties": {
            "n": {"type": "integer", "multipleOf": 3, "maximum": 30},
            "s": {"type": "string", "pattern": "^[a-z]+$", "minLength": 2}},
            "required": ["n"], "not": {"required": ["x"]}});
        let contract = jsonschema::validator_for(&input).unwrap();
        let b = jsonschema::validator_for(&bound(input)).unwrap();
        for sample in [
            json!({"n": 3}),
            json!({"n": 30, "s": "ab"}),
            json!({"n": 6, "s": "zz"}),
        ] {
            assert!(
                contract.is_valid(&sample) && b.is_valid(&sample),
                "{sample}"
            );
        }
        // And narrows: what the fragment excludes stays excluded.
        assert!(!b.is_valid(&json!({"n": 33})));
        assert!(!b.is_valid(&json!({"s": "ab"})));
    }
}
