//! JSON Schemas of contracts: compiled once, with the complexity limits of SPEC §7 / RICH §17.4
//! applied before compiling, so a hostile schema is refused at load time, never at request time.
//!
//! Limits: nesting depth ≤ [`MAX_SCHEMA_DEPTH`], JCS size ≤ [`MAX_SCHEMA_BYTES`], `$schema`
//! declared (2020-12, or 2019-09 and draft-07 as MCP SDKs write them), no remote references (the validator is built offline), and regular
//! expressions (`pattern`, `patternProperties` keys) that parse for the linear-time `regex`
//! engine and have no nested unbounded repetition (`(a+)+`, `(a*)*b`): the pattern shape that
//! backtracking engines explode on is refused outright, and the engine used never backtracks.

use jsonschema::{Draft, PatternOptions, Validator};
use serde_json::Value;

use super::Problem;

pub const MAX_SCHEMA_DEPTH: usize = 64;
pub const MAX_SCHEMA_BYTES: usize = 1 << 20;
pub const DIALECT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// The dialect a schema declares, when it is one contracts may use: 2020-12 (RICH's), or the
/// two that MCP tool schemas are written in by SDKs (2019-09, draft-07; the MCP spec lets a
/// schema declare its dialect, and the official TypeScript SDK declares draft-07). Each is
/// validated in its own dialect; the complexity limits are the same for all.
pub fn dialect(declared: &str) -> Option<Draft> {
    let uri = declared.strip_suffix('#').unwrap_or(declared);
    let uri = uri
        .strip_prefix("https://")
        .or_else(|| uri.strip_prefix("http://"))?;
    match uri {
        "json-schema.org/draft/2020-12/schema" => Some(Draft::Draft202012),
        "json-schema.org/draft/2019-09/schema" => Some(Draft::Draft201909),
        "json-schema.org/draft-07/schema" => Some(Draft::Draft7),
        _ => None,
    }
}

/// A compiled schema.
pub struct Schema {
    validator: Validator,
    /// The schema constrains nothing (`true`, or only annotations): see
    /// [`Schema::accepts_anything`].
    accepts_anything: bool,
}

/// Keywords that annotate or name, and constrain no instance (JSON Schema 2020-12 core and
/// meta-data vocabularies).
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "$dynamicAnchor",
    "$defs",
    "$vocabulary",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Schema")
    }
}

/// Where an instance broke its schema: JSON pointers, never the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Pointer into the instance (`/lines/0/qty`).
    pub instance_location: String,
    /// Pointer into the schema to the keyword that failed (`/properties/lines/items/...`).
    pub schema_location: String,
}

impl Schema {
    /// Checks limits, then compiles. `at` is the JSON pointer of the schema in its document,
    /// for error messages.
    pub fn compile(schema: &Value, at: &str) -> Result<Schema, Vec<Problem>> {
        Self::compile_with(schema, at, false)
    }

    /// [`Schema::compile`]; with `assert_formats`, `format` is checked instead of being an
    /// annotation (a contract's `structural.formats = "assert"`). Formats the validator does
    /// not know stay annotations either way.
    pub fn compile_with(
        schema: &Value,
        at: &str,
        assert_formats: bool,
    ) -> Result<Schema, Vec<Problem>> {
        let mut problems = Vec::new();
        let draft = match schema.get("$schema").and_then(Value::as_str) {
            Some(declared) => dialect(declared).unwrap_or_else(|| {
                problems.push(Problem::new(
                    format!("{at}/$schema"),
                    "the dialects supported are JSON Schema 2020-12 (RICH's), 2019-09 and draft-07",
                ));
                Draft::Draft202012
            }),
            None => {
                problems.push(Problem::new(
                    at,
                    "a schema must declare its dialect in $schema (RICH §5.2.1)",
                ));
                Draft::Draft202012
            }
        };
        // Depth first: nothing below may recurse into a schema deeper than the limit.
        let depth = depth_of(schema, MAX_SCHEMA_DEPTH + 1);
        if depth > MAX_SCHEMA_DEPTH {
            problems.push(Problem::new(
                at,
                format!("schema nests deeper than {MAX_SCHEMA_DEPTH} levels"),
            ));
            return Err(problems);
        }
        let size = palisade_policy::canon::to_vec(schema).len();
        if size > MAX_SCHEMA_BYTES {
            problems.push(Problem::new(
                at,
                format!("schema is {size} bytes; the limit is {MAX_SCHEMA_BYTES}"),
            ));
        }
        check_patterns(schema, at, &mut problems);
        if !problems.is_empty() {
            return Err(problems);
        }
        let validator = jsonschema::options()
            .with_draft(draft)
            .with_pattern_options(PatternOptions::regex())
            .should_validate_formats(assert_formats)
            .build(schema)
            .map_err(|e| {
                vec![Problem::new(
                    format!("{at}{}", e.schema_path()),
                    format!("schema does not compile: {e}"),
                )]
            })?;
        let accepts_anything = match schema {
            Value::Bool(b) => *b,
            Value::Object(members) => members.keys().all(|k| ANNOTATIONS.contains(&k.as_str())),
            _ => false,
        };
        Ok(Schema {
            validator,
            accepts_anything,
        })
    }

    /// Whether the schema accepts every instance *and absence*: an output contract of `{}`
    /// (or only annotations) says nothing about a tool result, so a result without
    /// `structuredContent` meets it. Any schema that constrains something refuses absence.
    pub fn accepts_anything(&self) -> bool {
        self.accepts_anything
    }

    /// The first violation, if any (fail fast: the refusal names one location).
    pub fn check(&self, instance: &Value) -> Result<(), Violation> {
        match self.validator.iter_errors(instance).next() {
            None => Ok(()),
            Some(e) => Err(Violation {
                instance_location: e.instance_path().to_string(),
                schema_location: e.schema_path().to_string(),
            }),
        }
    }
}

/// Depth of a JSON value, counting stops at `limit` (so a very deep value costs `limit` steps
/// per branch, not its depth). Iterative: no recursion on untrusted nesting.
fn depth_of(v: &Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        if d >= limit {
            continue;
        }
        match v {
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            Value::Object(o) => stack.extend(o.values().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// Every regular expression in the schema must parse and have no nested unbounded repetition.
fn check_patterns(v: &Value, at: &str, problems: &mut Vec<Problem>) {
    let mut stack = vec![(v, at.to_owned())];
    while let Some((v, ptr)) = stack.pop() {
        match v {
            Value::Object(o) => {
                for (k, child) in o {
                    let child_ptr = format!("{ptr}/{}", escape(k));
                    if k == "pattern" {
                        if let Some(p) = child.as_str() {
                            if let Err(why) = check_regex(p) {
                                problems.push(Problem::new(child_ptr.clone(), why));
                            }
                        }
                    }
                    if k == "patternProperties" {
                        if let Some(props) = child.as_object() {
                            for p in props.keys() {
                                if let Err(why) = check_regex(p) {
                                    problems.push(Problem::new(
                                        format!("{child_ptr}/{}", escape(p)),
                                        why,
                                    ));
                                }
                            }
                        }
                    }
                    stack.push((child, child_ptr));
                }
            }
            Value::Array(a) => {
                for (i, child) in a.iter().enumerate() {
                    stack.push((child, format!("{ptr}/{i}")));
                }
            }
            _ => {}
        }
    }
}

/// RFC 6901 escaping of one reference token.
fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Longest pattern accepted, in bytes.
const MAX_PATTERN_BYTES: usize = 4096;

fn check_regex(pattern: &str) -> Result<(), String> {
    use regex_syntax::hir::{Hir, HirKind};
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(format!("pattern longer than {MAX_PATTERN_BYTES} bytes"));
    }
    let hir = regex_syntax::ParserBuilder::new()
        .nest_limit(64)
        .build()
        .parse(pattern)
        .map_err(|e| format!("pattern does not parse: {}", first_line(&e.to_string())))?;
    // Nested unbounded repetition: a repetition with no upper bound inside another one.
    fn nested(h: &Hir, inside_unbounded: bool) -> bool {
        match h.kind() {
            HirKind::Repetition(r) => {
                let unbounded = r.max.is_none();
                if unbounded && inside_unbounded {
                    return true;
                }
                nested(&r.sub, inside_unbounded || unbounded)
            }
            HirKind::Capture(c) => nested(&c.sub, inside_unbounded),
            HirKind::Concat(hs) | HirKind::Alternation(hs) => {
                hs.iter().any(|h| nested(h, inside_unbounded))
            }
            _ => false,
        }
    }
    if nested(&hir, false) {
        return Err(
            "pattern nests unbounded repetitions (catastrophic backtracking shape, RICH §17.4)"
                .into(),
        );
    }
    Ok(())
}

fn first_line(s: &str) -> String {
    s.lines().last().unwrap_or("").trim().to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn schema(body: Value) -> Value {
        let mut s = body;
        s["$schema"] = json!(DIALECT_2020_12);
        s
    }

    #[test]
    fn formats_are_annotations_unless_asserted() {
        let s = schema(json!({"type": "string", "format": "uuid"}));
        let annotated = Schema::compile(&s, "").unwrap();
        assert!(annotated.check(&json!("not-a-uuid")).is_ok());
        let asserted = Schema::compile_with(&s, "", true).unwrap();
        assert!(asserted.check(&json!("not-a-uuid")).is_err());
        assert!(asserted
            .check(&json!("3b5b3a38-5649-495f-87a1-14a4e5918634"))
            .is_ok());
    }

    #[test]
    fn compiles_and_names_the_failing_location() {
        let s = Schema::compile(
            &schema(json!({"type":"object","required":["qty"],
                "properties":{"qty":{"type":"integer","minimum":1}}})),
            "/x",
        )
        .unwrap();
        assert!(s.check(&json!({"qty": 3})).is_ok());
        let v = s.check(&json!({"qty": 0})).unwrap_err();
        assert_eq!(v.instance_location, "/qty");
        assert!(v.schema_location.ends_with("/minimum"), "{v:?}");
    }

    #[test]
    fn only_annotation_only_schemas_accept_anything() {
        for accepting in [
            json!({}),
            json!({"title": "t", "description": "d", "$defs": {"x": {"type": "string"}}}),
        ] {
            assert!(
                Schema::compile(&schema(accepting.clone()), "/x")
                    .unwrap()
                    .accepts_anything(),
                "{accepting}"
            );
        }
        for constraining in [
            json!({"type": "object"}),
            json!({"properties": {}}),
            json!({"not": {}}),
            json!({"$ref": "#/$defs/x", "$defs": {"x": {}}}),
        ] {
            assert!(
                !Schema::compile(&schema(constraining.clone()), "/x")
                    .unwrap()
                    .accepts_anything(),
                "{constraining}"
            );
        }
    }

    #[test]
    fn redos_shapes_are_refused_at_compile_time() {
        for p in ["^(a+)+$", "(a*)*b", "^(x|y+)*$", "((ab)*c*)*"] {
            let e =
                Schema::compile(&schema(json!({"type":"string","pattern": p})), "").unwrap_err();
            assert!(e[0].message.contains("nests unbounded"), "{p}: {e:?}");
            assert_eq!(e[0].pointer, "/pattern");
        }
        let e = Schema::compile(&schema(json!({"patternProperties": {"^(a+)+$": {}}})), "")
            .unwrap_err();
        assert_eq!(e[0].pointer, "/patternProperties/^(a+)+$");
        // Bounded or single repetitions are fine.
        for p in ["^[A-Z]{3}-[0-9]+$", "^(ab){2,5}$", "^a+b*$"] {
            assert!(
                Schema::compile(&schema(json!({"pattern": p})), "").is_ok(),
                "{p}"
            );
        }
        // Backreferences do not parse for a linear-time engine.
        assert!(Schema::compile(&schema(json!({"pattern": "(a)\\1"})), "").is_err());
    }

    #[test]
    fn deep_large_and_undeclared_schemas_are_refused() {
        let mut deep = json!({"type": "string"});
        // (A 10,000-deep contract never gets this far: its file fails the parser's depth
        // limit; see bundle tests.)
        for _ in 0..200 {
            deep = json!({"items": deep});
        }
        let e = Schema::compile(&schema(deep), "/s").unwrap_err();
        assert!(e[0].message.contains("deeper than 64"), "{e:?}");
        let big = schema(json!({"description": "x".repeat(5 << 20)}));
        let e = Schema::compile(&big, "/s").unwrap_err();
        assert!(e[0].message.contains("limit is 1048576"), "{e:?}");
        let e = Schema::compile(&json!({"type": "string"}), "/s").unwrap_err();
        assert!(e[0].message.contains("declare its dialect"));
        let e = Schema::compile(
            &json!({"$schema": "http://json-schema.org/draft-04/schema#"}),
            "/s",
        )
        .unwrap_err();
        assert_eq!(e[0].pointer, "/s/$schema");
    }

    #[test]
    fn remote_references_are_not_fetched() {
        let e = Schema::compile(
            &schema(json!({"$ref": "https://example.com/schema.json"})),
            "/s",
        );
        assert!(e.is_err());
    }

    #[test]
    fn draft_07_and_2019_09_are_validated_in_their_own_dialect() {
        // draft-07's tuple `items` with `additionalItems`: an array of one integer.
        for declared in [
            "http://json-schema.org/draft-07/schema#",
            "http://json-schema.org/draft-07/schema",
            "https://json-schema.org/draft-07/schema#",
        ] {
            let s = json!({"$schema": declared, "type": "array",
                "items": [{"type": "integer"}], "additionalItems": false});
            let c = Schema::compile(&s, "/s").unwrap_or_else(|p| panic!("{declared}: {p:?}"));
            assert!(c.check(&json!([1])).is_ok(), "{declared}");
            assert!(c.check(&json!([1, 2])).is_err(), "{declared}");
            assert!(c.check(&json!(["a"])).is_err(), "{declared}");
        }
        // 2019-09's `dependentRequired`.
        let s = json!({"$schema": "https://json-schema.org/draft/2019-09/schema",
            "type": "object", "dependentRequired": {"a": ["b"]}});
        let c = Schema::compile(&s, "/s").unwrap();
        assert!(c.check(&json!({"a": 1, "b": 2})).is_ok());
        assert!(c.check(&json!({"a": 1})).is_err());
        // The limits hold whatever the dialect; other dialects are refused by name.
        let nested = json!({"$schema": "http://json-schema.org/draft-07/schema#",
            "type": "string", "pattern": "(a+)+$"});
        assert!(Schema::compile(&nested, "/s").is_err());
        for other in [
            "http://json-schema.org/draft-04/schema#",
            "https://example.com/my-dialect",
        ] {
            let e = Schema::compile(&json!({"$schema": other}), "/s").unwrap_err();
            assert!(
                e[0].message.contains("2019-09 and draft-07"),
                "{other}: {e:?}"
            );
        }
    }
}
