//! Compatibility between two contract revisions (RICH §15.1): `compatible`, `breaking` or
//! `unknown`, with where and why.
//!
//! Inputs must not narrow (every request the old contract accepted, the new one accepts:
//! old input ⊆ new input) and outputs must not widen (every answer the new contract allows,
//! an old consumer accepts: new output ⊆ old output). Inclusion between JSON Schemas is not
//! decidable in general, so this decides it over a fragment — `type`, `enum`/`const`,
//! numeric and length bounds, `properties`/`required`/`additionalProperties`, `items`, and
//! non-recursive `$ref`s into `$defs` — and answers `unknown` for anything outside it. Sound,
//! not complete: it never says `compatible` for a pair it cannot show to be, and never says
//! `breaking` without naming a rule some payload of the source breaks in the target.
//! `compatible-with-connector` ([`Verdict::outcome_with`]): every `breaking` finding is on a
//! side a qualified connector bridges (old → new for inputs, new → old for outputs); an
//! `unknown` finding stays unknown, since nothing shows the connector maps what the check
//! could not read.

use serde_json::{Map, Value};

/// RICH §15.1 outcomes, from best to worst.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    Compatible,
    CompatibleWithConnector,
    Unknown,
    Breaking,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Compatible => "compatible",
            Self::CompatibleWithConnector => "compatible-with-connector",
            Self::Unknown => "unknown",
            Self::Breaking => "breaking",
        }
    }
}

/// One reason for an outcome other than `compatible`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub outcome: Outcome,
    /// Where, as a JSON pointer into the source schema.
    pub at: String,
    pub why: String,
}

/// The verdict on one pair of schemas (or contracts).
#[derive(Debug, Default)]
pub struct Verdict {
    pub findings: Vec<Finding>,
}

impl Verdict {
    pub fn outcome(&self) -> Outcome {
        self.findings
            .iter()
            .map(|f| f.outcome)
            .max()
            .unwrap_or(Outcome::Compatible)
    }

    /// The outcome when qualified connectors bridge the inputs (`request`: old → new) and/or
    /// the outputs (`response`: new → old).
    pub fn outcome_with(&self, request: bool, response: bool) -> Outcome {
        let covered = |f: &Finding| {
            f.outcome == Outcome::Breaking
                && ((request && f.at.starts_with("/structural/input"))
                    || (response && f.at.starts_with("/structural/output")))
        };
        match self.outcome() {
            Outcome::Compatible => Outcome::Compatible,
            _ => self
                .findings
                .iter()
                .filter(|f| !covered(f))
                .map(|f| f.outcome)
                .max()
                .unwrap_or(Outcome::CompatibleWithConnector),
        }
    }

    fn add(&mut self, outcome: Outcome, at: &str, why: impl Into<String>) {
        self.findings.push(Finding {
            outcome,
            at: if at.is_empty() { "/".into() } else { at.into() },
            why: why.into(),
        });
    }
}

/// Keywords that do not change what a schema accepts.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$defs",
    "title",
    "description",
    "examples",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
];
/// Keywords this check understands. Kept apart from `bound::SCALAR_KEYWORDS` on purpose:
/// a keyword added to the admission fragment must not become "understood" here until this
/// check actually compares it, or a pair using it could be called compatible unchecked.
const UNDERSTOOD: &[&str] = &[
    "type",
    "enum",
    "const",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "minItems",
    "maxItems",
    "$ref",
];
const DEPTH: usize = 32;

/// Contract-level: input must not narrow, output must not widen. `"unknown"` domains on
/// either side make that side `unknown`.
pub fn contracts(old: &Value, new: &Value) -> Verdict {
    let mut v = Verdict::default();
    let asserts = |c: &Value| c.pointer("/structural/formats") == Some(&Value::from("assert"));
    let assert_formats = asserts(old) || asserts(new);
    // Inputs: what the old accepted, the new must (old ⊆ new). Outputs the other way round.
    for (side, source, target) in [("input", old, new), ("output", new, old)] {
        let at = format!("/structural/{side}");
        match (source.pointer(&at), target.pointer(&at)) {
            (Some(s), Some(t)) if s != "unknown" && t != "unknown" => {
                include(s, t, &at, assert_formats, &mut v)
            }
            _ => v.add(
                Outcome::Unknown,
                &at,
                format!("an {side} schema is unknown"),
            ),
        }
    }
    v
}

/// Whether every instance `source` accepts, `target` accepts too; findings under `at`.
/// `format` is an annotation here, as in 2020-12.
pub fn schema_into(source: &Value, target: &Value, at: &str, v: &mut Verdict) {
    include(source, target, at, false, v);
}

fn include(source: &Value, target: &Value, at: &str, assert_formats: bool, v: &mut Verdict) {
    // The comparison reads 2020-12's keywords (`items`, `$defs`, `prefixItems`); a schema in
    // another dialect (an MCP SDK's draft-07) is not compared, it is unknown.
    let is_2020_12 = |s: &Value| {
        s.get("$schema")
            .and_then(Value::as_str)
            .is_none_or(|d| crate::schema::dialect(d) == Some(jsonschema::Draft::Draft202012))
    };
    if !is_2020_12(source) || !is_2020_12(target) {
        v.add(
            Outcome::Unknown,
            at,
            "the comparison reads JSON Schema 2020-12; this schema declares another dialect",
        );
        return;
    }
    let roots = Roots {
        source,
        target,
        assert_formats,
    };
    roots.include((source, target), at, v, 0, &mut Vec::new());
}

struct Roots<'a> {
    source: &'a Value,
    target: &'a Value,
    /// A contract asserts formats: a target `format` the source does not share is unknown.
    assert_formats: bool,
}

fn deref<'a>(root: &'a Value, s: &'a Value) -> Result<&'a Value, String> {
    match s.get("$ref").and_then(Value::as_str) {
        None => Ok(s),
        Some(r) => r
            .strip_prefix("#/$defs/")
            .filter(|n| !n.contains('/'))
            .and_then(|n| root.get("$defs")?.get(n))
            .ok_or_else(|| format!("$ref {r} is outside the fragment")),
    }
}

fn types(s: &Map<String, Value>) -> Option<Vec<&str>> {
    match s.get("type")? {
        Value::String(t) => Some(vec![t.as_str()]),
        Value::Array(ts) => Some(ts.iter().filter_map(Value::as_str).collect()),
        _ => Some(Vec::new()),
    }
}

fn allows(target_types: &[&str], t: &str) -> bool {
    target_types.contains(&t) || (t == "integer" && target_types.contains(&"number"))
}

fn num(s: &Map<String, Value>, k: &str) -> Option<f64> {
    s.get(k).and_then(Value::as_f64)
}

impl Roots<'_> {
    /// Whether every instance the source schema `s` accepts, the target's `t` accepts too.
    fn include(
        &self,
        (s, t): (&Value, &Value),
        at: &str,
        v: &mut Verdict,
        depth: usize,
        seen: &mut Vec<(String, String)>,
    ) {
        // The same schema in the same context accepts the same instances, whatever it uses.
        if s == t && self.source.get("$defs") == self.target.get("$defs") {
            return;
        }
        if depth > DEPTH {
            v.add(Outcome::Unknown, at, "nested too deep to decide");
            return;
        }
        // Recursion through `$ref`: a pair met again is assumed (coinductively) to hold only
        // if no finding was made on the way; to stay simple and sound, call it unknown.
        let key = |x: &Value| {
            x.get("$ref")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        if s.get("$ref").is_some() || t.get("$ref").is_some() {
            let pair = (key(s), key(t));
            if seen.contains(&pair) {
                v.add(Outcome::Unknown, at, "recursive schema");
                return;
            }
            seen.push(pair);
        }
        let (s, t) = match (deref(self.source, s), deref(self.target, t)) {
            (Ok(s), Ok(t)) => (s, t),
            (Err(e), _) | (_, Err(e)) => {
                v.add(Outcome::Unknown, at, e);
                return;
            }
        };
        let any = Map::new();
        let sm = match s {
            Value::Bool(true) => &any,
            Value::Bool(false) => return,
            Value::Object(m) => m,
            _ => {
                v.add(Outcome::Unknown, at, "the source is not a schema");
                return;
            }
        };
        let tm = match t {
            Value::Bool(true) => return,
            Value::Bool(false) => {
                v.add(Outcome::Breaking, at, "the target accepts nothing here");
                return;
            }
            Value::Object(m) => m,
            _ => {
                v.add(Outcome::Unknown, at, "the target is not a schema");
                return;
            }
        };
        if self.assert_formats {
            if let Some(f) = tm.get("format") {
                if sm.get("format") != Some(f) {
                    v.add(
                        Outcome::Unknown,
                        at,
                        "the target asserts a format the source does not",
                    );
                }
            }
        }
        if tm
            .keys()
            .all(|k| ANNOTATIONS.contains(&k.as_str()) || k.starts_with("x-"))
        {
            return;
        }
        for (k, side) in sm
            .keys()
            .map(|k| (k, "source"))
            .chain(tm.keys().map(|k| (k, "target")))
        {
            let k = k.as_str();
            // `x-…` extensions (OpenAPI's) are unknown keywords: annotations in 2020-12.
            if !ANNOTATIONS.contains(&k) && !UNDERSTOOD.contains(&k) && !k.starts_with("x-") {
                v.add(
                    Outcome::Unknown,
                    at,
                    format!("the {side}'s `{k}` is outside the decidable fragment"),
                );
                return;
            }
        }
        // A source that lists its values: each must meet the target (checked with the
        // target's own keywords, below, by treating the values as the source's only types).
        if let Some(values) = sm
            .get("enum")
            .and_then(Value::as_array)
            .cloned()
            .or_else(|| sm.get("const").map(|c| vec![c.clone()]))
        {
            for (i, value) in values.iter().enumerate() {
                if !self.accepts_value(tm, value, at, v) {
                    v.add(
                        Outcome::Breaking,
                        at,
                        format!("the source's listed value #{i} is refused by the target"),
                    );
                }
            }
            return;
        }
        if tm.contains_key("enum") || tm.contains_key("const") {
            v.add(
                Outcome::Breaking,
                at,
                "the target lists its values and the source does not",
            );
            return;
        }
        let st = types(sm);
        let tt = types(tm);
        if let Some(tt) = &tt {
            match &st {
                None => v.add(
                    Outcome::Breaking,
                    at,
                    "the source allows any type; the target restricts it",
                ),
                Some(st) => {
                    for t in st {
                        if !allows(tt, t) {
                            v.add(
                                Outcome::Breaking,
                                at,
                                format!("the source allows type {t}; the target does not"),
                            );
                        }
                    }
                }
            }
        }
        let has = |t: &str| st.as_ref().is_none_or(|st| st.contains(&t));
        // Numbers: the target's bounds must hold for every number the source allows.
        if has("number") || has("integer") {
            number_bounds(sm, tm, at, v);
        }
        if has("string") {
            self.bound((sm, tm), "minLength", true, at, v);
            self.bound((sm, tm), "maxLength", false, at, v);
            if let Some(p) = tm.get("pattern") {
                if sm.get("pattern") != Some(p) {
                    v.add(
                        Outcome::Unknown,
                        at,
                        "the target's pattern differs from the source's",
                    );
                }
            }
        }
        if has("array") {
            self.bound((sm, tm), "minItems", true, at, v);
            self.bound((sm, tm), "maxItems", false, at, v);
            if let Some(ti) = tm.get("items") {
                let si = sm.get("items").cloned().unwrap_or(Value::Bool(true));
                self.include((&si, ti), &format!("{at}/items"), v, depth + 1, seen);
            }
        }
        if has("object") {
            self.objects((sm, tm), at, v, depth, seen);
        }
    }
}

/// The target's numeric bounds against the source's: each must hold for every number the
/// source allows.
fn number_bounds(sm: &Map<String, Value>, tm: &Map<String, Value>, at: &str, v: &mut Verdict) {
    for (lo, strict) in [("minimum", false), ("exclusiveMinimum", true)] {
        if let Some(tb) = num(tm, lo) {
            let sb = num(sm, "minimum")
                .map(|b| (b, false))
                .into_iter()
                .chain(num(sm, "exclusiveMinimum").map(|b| (b, true)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            let ok = sb.is_some_and(|(b, s_strict)| b > tb || (b == tb && (!strict || s_strict)));
            if !ok {
                v.add(
                    Outcome::Breaking,
                    at,
                    format!("the target's {lo} is not met by every number the source allows"),
                );
            }
        }
    }
    for (hi, strict) in [("maximum", false), ("exclusiveMaximum", true)] {
        if let Some(tb) = num(tm, hi) {
            let sb = num(sm, "maximum")
                .map(|b| (b, false))
                .into_iter()
                .chain(num(sm, "exclusiveMaximum").map(|b| (b, true)))
                .min_by(|a, b| a.0.total_cmp(&b.0));
            let ok = sb.is_some_and(|(b, s_strict)| b < tb || (b == tb && (!strict || s_strict)));
            if !ok {
                v.add(
                    Outcome::Breaking,
                    at,
                    format!("the target's {hi} is not met by every number the source allows"),
                );
            }
        }
    }
}

mod members;
#[cfg(test)]
mod tests;
