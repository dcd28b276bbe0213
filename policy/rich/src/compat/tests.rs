#![allow(clippy::unwrap_used)]
use super::*;
use serde_json::json;

fn outcome(source: Value, target: Value) -> (Outcome, Vec<Finding>) {
    let mut v = Verdict::default();
    schema_into(&source, &target, "", &mut v);
    (v.outcome(), v.findings)
}

#[test]
fn widening_is_compatible_and_narrowing_is_breaking() {
    let item = json!({"type": "object", "required": ["sku"],
        "properties": {"sku": {"type": "string", "maxLength": 16},
                       "qty": {"type": "integer", "minimum": 0, "maximum": 100}},
        "additionalProperties": false});
    // Same schema.
    assert_eq!(outcome(item.clone(), item.clone()).0, Outcome::Compatible);
    // Wider: a longer sku, a larger qty range, an optional new member.
    let wider = json!({"type": "object", "required": ["sku"],
        "properties": {"sku": {"type": "string", "maxLength": 32},
                       "qty": {"type": "number", "minimum": -5},
                       "note": {"type": "string"}},
        "additionalProperties": false});
    assert_eq!(outcome(item.clone(), wider.clone()).0, Outcome::Compatible);
    // The reverse narrows at every point.
    let (o, f) = outcome(wider, item.clone());
    assert_eq!(o, Outcome::Breaking);
    let at: Vec<&str> = f.iter().map(|f| f.at.as_str()).collect();
    for want in ["/properties/sku", "/properties/qty", "/properties/note"] {
        assert!(at.contains(&want), "{want} in {f:#?}");
    }
    // A new required member breaks old senders.
    let mut more = item.clone();
    more["required"] = json!(["sku", "qty"]);
    let (o, f) = outcome(item.clone(), more);
    assert_eq!(o, Outcome::Breaking);
    assert_eq!(f[0].at, "/properties/qty");
    // Closing an open object breaks a source that may send anything else.
    let open = json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let closed = json!({"type": "object", "properties": {"a": {"type": "string"}},
                        "additionalProperties": false});
    assert_eq!(outcome(open.clone(), closed.clone()).0, Outcome::Breaking);
    assert_eq!(outcome(closed, open).0, Outcome::Compatible);
}

#[test]
fn listed_values_are_checked_one_by_one() {
    let s = json!({"type": "string", "enum": ["DRAFT", "REGISTERED"]});
    let t = json!({"type": "string", "enum": ["DRAFT", "REGISTERED", "DISPOSED"]});
    assert_eq!(outcome(s.clone(), t.clone()).0, Outcome::Compatible);
    assert_eq!(outcome(t.clone(), s.clone()).0, Outcome::Breaking);
    assert_eq!(outcome(json!({"type": "string"}), s).0, Outcome::Breaking);
    assert_eq!(
        outcome(
            json!({"const": 3}),
            json!({"type": "integer", "maximum": 5})
        )
        .0,
        Outcome::Compatible
    );
}

#[test]
fn integers_fit_numbers_and_bounds_respect_exclusivity() {
    assert_eq!(
        outcome(json!({"type": "integer"}), json!({"type": "number"})).0,
        Outcome::Compatible
    );
    assert_eq!(
        outcome(json!({"type": "number"}), json!({"type": "integer"})).0,
        Outcome::Breaking
    );
    let ge0 = json!({"type": "number", "minimum": 0});
    let gt0 = json!({"type": "number", "exclusiveMinimum": 0});
    assert_eq!(outcome(gt0.clone(), ge0.clone()).0, Outcome::Compatible);
    assert_eq!(outcome(ge0, gt0).0, Outcome::Breaking);
    assert_eq!(
        outcome(
            json!({"type": ["string", "null"]}),
            json!({"type": "string"})
        )
        .0,
        Outcome::Breaking
    );
}

#[test]
fn refs_arrays_and_what_is_outside_the_fragment() {
    let s = json!({"$defs": {"Line": {"type": "object", "properties": {"q": {"type": "integer"}}}},
                   "type": "array", "items": {"$ref": "#/$defs/Line"}, "maxItems": 10});
    let t = json!({"$defs": {"L": {"type": "object", "properties": {"q": {"type": "number"}}}},
                   "type": "array", "items": {"$ref": "#/$defs/L"}, "maxItems": 20});
    assert_eq!(outcome(s.clone(), t.clone()).0, Outcome::Compatible);
    assert_eq!(outcome(t, s).0, Outcome::Breaking);
    // anyOf, patterns that differ, recursion: not decided here, so never "compatible".
    let (o, f) = outcome(
        json!({"anyOf": [{"type": "string"}]}),
        json!({"type": "string"}),
    );
    assert_eq!(o, Outcome::Unknown, "{f:?}");
    assert_eq!(
        outcome(
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "string", "pattern": "^b"})
        )
        .0,
        Outcome::Unknown
    );
    let rec = json!({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}},
                     "$ref": "#/$defs/N"});
    assert_eq!(
        outcome(rec.clone(), rec.clone()).0,
        Outcome::Compatible,
        "the same schema"
    );
    let renamed = json!({"$defs": {"M": {"type": "object", "properties": {"next": {"$ref": "#/$defs/M"}}}},
                         "$ref": "#/$defs/M"});
    assert_eq!(
        outcome(rec, renamed).0,
        Outcome::Unknown,
        "recursion is not decided"
    );
    // Anything fits an empty target; a false target takes nothing.
    assert_eq!(
        outcome(json!({"type": "string"}), json!({})).0,
        Outcome::Compatible
    );
    assert_eq!(outcome(json!({}), json!(false)).0, Outcome::Breaking);
}

#[test]
fn contracts_compare_inputs_forwards_and_outputs_backwards() {
    let c = |input: Value, output: Value| json!({"structural": {"input": input, "output": output}});
    let narrow = json!({"type": "integer", "maximum": 10});
    let wide = json!({"type": "integer", "maximum": 100});
    // v2 accepts more and answers less: compatible.
    let v = contracts(
        &c(narrow.clone(), wide.clone()),
        &c(wide.clone(), narrow.clone()),
    );
    assert_eq!(v.outcome(), Outcome::Compatible, "{:?}", v.findings);
    // v2 answers more than v1 promised: breaking for old consumers.
    let v = contracts(&c(narrow.clone(), narrow.clone()), &c(narrow.clone(), wide));
    assert_eq!(v.outcome(), Outcome::Breaking);
    assert!(v.findings[0].at.starts_with("/structural/output"));
    let v = contracts(
        &c(json!("unknown"), narrow.clone()),
        &c(narrow.clone(), narrow),
    );
    assert_eq!(v.outcome(), Outcome::Unknown);
}

#[test]
fn asserted_formats_are_not_annotations() {
    let c = |fmt: Option<&str>, formats: &str| {
        let mut input = json!({"type": "string"});
        if let Some(f) = fmt {
            input["format"] = json!(f);
        }
        json!({"structural": {"input": input, "output": {"type": "string"}, "formats": formats}})
    };
    assert_eq!(
        contracts(&c(None, "annotate"), &c(Some("uuid"), "annotate")).outcome(),
        Outcome::Compatible
    );
    assert_eq!(
        contracts(&c(None, "assert"), &c(Some("uuid"), "assert")).outcome(),
        Outcome::Unknown
    );
    assert_eq!(
        contracts(&c(Some("uuid"), "assert"), &c(Some("uuid"), "assert")).outcome(),
        Outcome::Compatible
    );
}

#[test]
fn connectors_bridge_only_the_breaking_findings_of_their_side() {
    let c = |input: Value, output: Value| json!({"structural": {"input": input, "output": output}});
    let s = json!({"type": "string"});
    let i = json!({"type": "integer"});
    let n = json!({"type": "string", "pattern": "^a"});
    // Input narrowed (string → integer): breaking on the input side only.
    let v = contracts(&c(s.clone(), s.clone()), &c(i.clone(), s.clone()));
    assert_eq!(v.outcome(), Outcome::Breaking);
    assert_eq!(
        v.outcome_with(true, false),
        Outcome::CompatibleWithConnector
    );
    assert_eq!(v.outcome_with(false, true), Outcome::Breaking);
    // Output widened too: both sides need a bridge.
    let v = contracts(&c(s.clone(), i.clone()), &c(i.clone(), s.clone()));
    assert_eq!(v.outcome_with(true, false), Outcome::Breaking);
    assert_eq!(v.outcome_with(true, true), Outcome::CompatibleWithConnector);
    // Unknown stays unknown: nothing shows the connector maps what could not be read.
    let v = contracts(&c(s.clone(), s.clone()), &c(n, s.clone()));
    assert_eq!(v.outcome_with(true, true), Outcome::Unknown);
    // And compatible stays compatible.
    assert_eq!(
        contracts(&c(s.clone(), s.clone()), &c(s.clone(), s)).outcome_with(true, true),
        Outcome::Compatible
    );
}
