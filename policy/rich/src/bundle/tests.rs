#![allow(clippy::unwrap_used)]
use super::*;
use crate::{IdempotencyKey, SideEffect};
use palisade_policy::lease::Reversibility;
use serde_json::json;

const DIALECT: &str = super::super::schema::DIALECT_2020_12;

fn contract(reversibility: &str, idem: &str) -> Value {
    json!({
        "structural": {
            "input": {"$schema": DIALECT, "type": "object", "required": ["qty"],
                      "properties": {"qty": {"type": "integer", "minimum": 0}}},
            "output": "unknown"
        },
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "write", "reversibility": reversibility,
                        "idempotencyKey": idem, "timeout": "PT5S", "modelMediation": "none"}
    })
}

fn file_of(doc: &Value) -> (String, Vec<u8>) {
    let bytes = serde_json::to_vec(doc).unwrap();
    (
        format!("{}.json", Sha256Digest::of_json(doc).to_hex()),
        bytes,
    )
}

fn lock_for(caps: Value) -> Vec<u8> {
    serde_json::to_vec(
        &json!({"richVersion": "0.1", "bindingId": "urn:test:bundle/1", "capabilities": caps}),
    )
    .unwrap()
}

fn bundle_with(docs: &[&Value]) -> BTreeMap<String, Vec<u8>> {
    docs.iter().map(|d| file_of(d)).collect()
}

#[test]
fn compiles_routes_and_keeps_contract_facts() {
    let c = contract("compensable", "required");
    let (name, _) = file_of(&c);
    let digest = format!("sha-256:{}", name.trim_end_matches(".json"));
    let lock = lock_for(json!({
        "alloc": {"protocol": "http", "operation": "PUT /api/v2/allocations/{id}", "contractDigest": digest},
        "export": {"protocol": "http", "operation": "PUT /api/v2/allocations/export", "contractDigest": digest,
                   "runtime": {"onDrift": "notify", "timeout": "PT2S"}},
        "tool": {"protocol": "mcp", "operation": "allocate", "contractDigest": digest}
    }));
    let b = Bundle::compile(&lock, &bundle_with(&[&c]), None).unwrap();
    assert_eq!(b.binding_id, "urn:test:bundle/1");
    assert!(b.digest.starts_with("sha-256:"));
    assert_eq!(
        b.route("PUT", "/api/v2/allocations/7").unwrap().name,
        "alloc"
    );
    assert_eq!(
        b.route("PUT", "/api/v2/allocations/export").unwrap().name,
        "export",
        "literal beats param"
    );
    assert!(b.route("POST", "/api/v2/allocations/7").is_none());
    assert!(b.route("PUT", "/api/v2/allocations/7/x").is_none());
    assert!(
        b.route("PUT", "/api/v2/allocations/").is_none(),
        "a param needs a segment"
    );
    let cap = b.route("PUT", "/api/v2/allocations/export").unwrap();
    assert_eq!(cap.runtime.on_drift, DriftPolicy::Notify);
    assert_eq!(cap.runtime.timeout_ms, Some(2000));
    assert_eq!(cap.contract.idempotency_key, IdempotencyKey::Required);
    assert_eq!(cap.contract.reversibility, Reversibility::Compensable);
    assert_eq!(cap.contract.timeout_ms, Some(5000));
    assert_eq!(b.tool("allocate").unwrap().protocol, Protocol::Mcp);
    let input = cap.contract.input.as_ref().unwrap();
    assert!(input.check(&json!({"qty": 1})).is_ok());
    assert_eq!(
        input
            .check(&json!({"qty": -1}))
            .unwrap_err()
            .instance_location,
        "/qty"
    );
    // The digest pins the lockfile: the same content in another member order is the same.
    let again = Bundle::compile(&lock, &bundle_with(&[&c]), Some(&b.digest)).unwrap();
    assert_eq!(again.digest, b.digest);
}

#[test]
fn every_problem_is_reported_with_its_pointer() {
    let good = contract("reversible", "optional");
    let (good_name, good_bytes) = file_of(&good);
    let good_digest = format!("sha-256:{}", good_name.trim_end_matches(".json"));
    // A contract whose file name lies about its content.
    let liar = contract("irreversible", "none");
    let (liar_name, _) = file_of(&liar);
    let other = contract("reversible", "none");
    let mut files = BTreeMap::new();
    files.insert(good_name.clone(), good_bytes);
    files.insert(liar_name.clone(), serde_json::to_vec(&other).unwrap());
    let lock = lock_for(json!({
        "a": {"protocol": "http", "operation": "PUT /x/{id}", "contractDigest": good_digest},
        "b": {"protocol": "http", "operation": "PUT /x/{key}", "contractDigest": good_digest},
        "c": {"protocol": "ftp", "operation": "GET /y", "contractDigest": good_digest},
        "d": {"protocol": "http", "operation": "get /z", "contractDigest": good_digest},
        "e": {"protocol": "http", "operation": "PUT /w", "contractDigest": format!("sha-256:{}", liar_name.trim_end_matches(".json"))},
        "f": {"protocol": "http", "operation": "PUT /v", "contractDigest": "sha-256:00"},
        "g": {"protocol": "http", "operation": "PUT /u", "contractDigest": format!("sha-256:{}", "ab".repeat(32))},
        "h": {"protocol": "http", "operation": "PUT /t", "contractDigest": good_digest,
              "runtime": {"onDrift": "qualified-fallback"}}
    }));
    let problems =
        Bundle::compile(&lock, &files, Some(&format!("sha-256:{}", "0".repeat(64)))).unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    let has = |needle: &str| text.iter().any(|t| t.contains(needle));
    assert!(has("lockfile#: digest"), "{text:#?}");
    assert!(has("binds the same operation"), "{text:#?}");
    assert!(has("lockfile#/capabilities/c/protocol"), "{text:#?}");
    assert!(has("lockfile#/capabilities/d/operation"), "{text:#?}");
    assert!(
        has(&format!("contracts/{liar_name}#: file name does not match")),
        "{text:#?}"
    );
    assert!(has("lockfile#/capabilities/f/contractDigest"), "{text:#?}");
    assert!(has("no contract file"), "{text:#?}");
    assert!(
        has("lockfile#/capabilities/h/runtime/fallback"),
        "{text:#?}"
    );
}

#[test]
fn hostile_contracts_are_refused_at_compile_time() {
    let mut redos = contract("reversible", "none");
    redos["structural"]["input"] =
        json!({"$schema": DIALECT, "type": "string", "pattern": "^(a+)+$"});
    let mut deep = String::new();
    for _ in 0..10_000 {
        deep.push_str("{\"items\":");
    }
    deep.push('1');
    for _ in 0..10_000 {
        deep.push('}');
    }
    let (redos_name, redos_bytes) = file_of(&redos);
    let deep_name = format!("{}.json", "cd".repeat(32));
    let mut files = BTreeMap::new();
    files.insert(redos_name.clone(), redos_bytes);
    files.insert(deep_name.clone(), deep.into_bytes());
    let lock = lock_for(json!({
        "r": {"protocol": "http", "operation": "PUT /r", "contractDigest": format!("sha-256:{}", redos_name.trim_end_matches(".json"))},
        "d": {"protocol": "http", "operation": "PUT /d", "contractDigest": format!("sha-256:{}", "cd".repeat(32))}
    }));
    let problems = Bundle::compile(&lock, &files, None).unwrap_err();
    let text: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("/structural/input/pattern") && t.contains("nests unbounded")),
        "{text:#?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains(&deep_name) && t.contains("not I-JSON")),
        "{text:#?}"
    );
}

#[test]
fn unknown_domains_and_defaults() {
    let c = json!({"structural": "unknown", "representation": "unknown", "semantic": "unknown",
                   "error": "unknown", "state": "unknown", "operational": "unknown"});
    let (name, bytes) = file_of(&c);
    let mut files = BTreeMap::new();
    files.insert(name.clone(), bytes);
    let lock = lock_for(json!({"x": {"protocol": "http", "operation": "POST /x",
        "contractDigest": format!("sha-256:{}", name.trim_end_matches(".json"))}}));
    let b = Bundle::compile(&lock, &files, None).unwrap();
    let cap = b.route("POST", "/x").unwrap();
    assert!(cap.contract.input.is_none());
    assert_eq!(
        cap.contract.side_effect,
        SideEffect::Write,
        "unknown side effect is a write"
    );
    assert_eq!(cap.contract.reversibility, Reversibility::Unknown);
    assert_eq!(cap.runtime.on_drift, DriftPolicy::FailClosed);
    // A domain left out is not a default assumption (RICH §5.2).
    let partial = json!({"structural": "unknown"});
    let (pname, pbytes) = file_of(&partial);
    let mut files = BTreeMap::new();
    files.insert(pname.clone(), pbytes);
    let lock = lock_for(json!({"x": {"protocol": "http", "operation": "POST /x",
        "contractDigest": format!("sha-256:{}", pname.trim_end_matches(".json"))}}));
    let problems = Bundle::compile(&lock, &files, None).unwrap_err();
    assert_eq!(problems.len(), 5, "{problems:#?}");
}

#[test]
fn formats_are_asserted_only_when_the_contract_says_so() {
    let mut c = contract("compensable", "optional");
    c["structural"]["input"] = json!({"$schema": "https://json-schema.org/draft/2020-12/schema",
                                      "type": "string", "format": "uuid"});
    let compile = |c: &Value| {
        let (name, bytes) = file_of(c);
        let mut files = BTreeMap::new();
        files.insert(name.clone(), bytes);
        let lock = lock_for(json!({"x": {"protocol": "http", "operation": "POST /x",
            "contractDigest": format!("sha-256:{}", name.trim_end_matches(".json"))}}));
        Bundle::compile(&lock, &files, None)
    };
    let b = compile(&c).unwrap();
    let input = b
        .route("POST", "/x")
        .unwrap()
        .contract
        .input
        .as_ref()
        .unwrap();
    assert!(
        input.check(&json!("nope")).is_ok(),
        "an annotation by default"
    );
    c["structural"]["formats"] = json!("assert");
    let b = compile(&c).unwrap();
    let input = b
        .route("POST", "/x")
        .unwrap()
        .contract
        .input
        .as_ref()
        .unwrap();
    assert!(input.check(&json!("nope")).is_err());
    c["structural"]["formats"] = json!("yes");
    let problems = compile(&c).unwrap_err();
    assert!(
        problems.iter().any(|p| p.to_string().contains("formats")),
        "{problems:?}"
    );
}
