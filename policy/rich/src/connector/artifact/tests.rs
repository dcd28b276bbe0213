#![allow(clippy::unwrap_used)]
use serde_json::{json, Value};

use super::*;
use palisade_policy::digest::Sha256Digest;

fn compiled(doc: &Value) -> Result<Connector, Vec<Problem>> {
    let name = format!("{}.json", Sha256Digest::of_json(doc).to_hex());
    Connector::compile(&name, &serde_json::to_vec(doc).unwrap())
}

fn doc(class: &str, transform: Option<Value>) -> Value {
    let d = format!("sha-256:{}", "a".repeat(64));
    let mut v = json!({"id": "urn:test:c", "class": class, "purpose": "structural-adaptation",
        "sourceDigest": d, "targetDigest": d, "qualification": "urn:test:q"});
    if let Some(t) = transform {
        v["transform"] = t;
    }
    v
}

#[test]
fn t0_passes_its_input_through_unchanged() {
    let c = compiled(&doc("T0", None)).unwrap();
    assert_eq!(c.profile, PROFILE_T0);
    let big = json!({"n": 9007199254740993_u64, "s": "x"});
    assert_eq!(c.run(&big).unwrap(), big);
    let c = compiled(&doc("T0", Some(json!({"lang": "identity"})))).unwrap();
    assert_eq!(c.class, Class::T0);
    // A T0 that claims to transform is not a T0.
    let problems =
        compiled(&doc("T0", Some(json!({"lang": "jmespath", "expr": "a"})))).unwrap_err();
    assert!(problems[0].message.contains("passes its input through"));
}

#[test]
fn a_file_named_for_other_content_is_refused() {
    let d = doc("T0", None);
    let problems = Connector::compile(
        &format!("{}.json", "0".repeat(64)),
        &serde_json::to_vec(&d).unwrap(),
    )
    .unwrap_err();
    assert!(problems[0].message.contains("does not match its content"));
}

#[test]
fn required_members_are_named() {
    let mut d = doc("T1", Some(json!({"lang": "jmespath", "expr": "a"})));
    d.as_object_mut().unwrap().remove("qualification");
    d["sourceDigest"] = json!("sha256:abc");
    let problems = compiled(&d).unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter().any(|p| p.contains("/qualification")),
        "{text:?}"
    );
    assert!(text.iter().any(|p| p.contains("/sourceDigest")), "{text:?}");
}

#[test]
fn transform_failures_never_quote_the_payload() {
    // `join` over numbers fails in the evaluator; its own message would quote the values.
    let c = compiled(&doc(
        "T1",
        Some(json!({"lang": "jmespath", "expr": "join(',', a)"})),
    ))
    .unwrap();
    let err = c.run(&json!({"a": [4242424242_u64]})).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, ConnectorError::Transform(_)));
    assert!(!text.contains("4242424242"), "{text}");
    // Integers beyond 2^53 are refused by the profile, at a location.
    let c = compiled(&doc("T1", Some(json!({"lang": "jmespath", "expr": "a"})))).unwrap();
    let err = c.run(&json!({"a": [9007199254740993_u64]})).unwrap_err();
    assert!(err.to_string().contains("/a/0"), "{err}");
}

#[test]
fn preconditions_are_checked_before_the_transform() {
    let mut d = doc("T1", Some(json!({"lang": "jmespath", "expr": "{b: a}"})));
    d["preconditions"] = json!({"$schema": crate::schema::DIALECT_2020_12, "required": ["a"]});
    let c = compiled(&d).unwrap();
    assert!(matches!(
        c.run(&json!({"z": 1})).unwrap_err(),
        ConnectorError::Precondition(_)
    ));
    assert_eq!(c.run(&json!({"a": 1})).unwrap(), json!({"b": 1}));
}
