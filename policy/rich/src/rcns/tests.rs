#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::evaluate::{evaluate, gate, Refused};
use super::recipes::{is_path, PathMatch};
use super::*;
use crate::Bundle;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::ErrorCode;

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

fn contract() -> Value {
    json!({
        "structural": {"input": {"$schema": DIALECT, "type": "object"}, "output": "unknown"},
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "write", "reversibility": "compensable",
                        "idempotencyKey": "optional"}
    })
}

fn recipe() -> Value {
    json!({
        "name": "reserve", "version": "1", "method": "RESERVE", "path_exact": "/reservations",
        "required_scopes": ["stock:reserve"], "trust_tier": 2,
        "semantic": {"intent": "reserve stock"},
        "input_schema": {"$schema": DIALECT, "type": "object"},
        "output_schema": {"$schema": DIALECT},
        "steps": [{"capability": "items.put", "path": {"id": "input.sku"}, "body": "input"},
                  {"capability": "orders.create", "body": "{sku: input.sku}"}],
        "output": "{item: steps[0]}"
    })
}

fn recipes(list: Vec<Value>) -> Value {
    json!({"capabilityScopes": {"items.put": ["items:write"], "orders.create": ["orders:write"]},
           "recipes": list})
}

/// A bundle binding `PUT /items/{id}` and `POST /orders`, with `set` as its recipe file.
fn bundle_with(set: &Value) -> Result<Bundle, Vec<crate::Problem>> {
    let c = contract();
    let hex = Sha256Digest::of_json(&c).to_hex();
    let set_hex = Sha256Digest::of_json(set).to_hex();
    let lock = json!({
        "bindingId": "urn:test:rcns/1",
        "capabilities": {
            "items.put": {"protocol": "http", "operation": "PUT /items/{id}",
                          "contractDigest": format!("sha-256:{hex}")},
            "orders.create": {"protocol": "http", "operation": "POST /orders",
                              "contractDigest": format!("sha-256:{hex}")}
        },
        "rcns": {"recipesDigest": format!("sha-256:{set_hex}")}
    });
    let files = BTreeMap::from([
        (format!("{hex}.json"), serde_json::to_vec(&c).unwrap()),
        (format!("{set_hex}.json"), serde_json::to_vec(set).unwrap()),
    ]);
    Bundle::compile(&serde_json::to_vec(&lock).unwrap(), &files, None)
}

fn problems_of(set: Value) -> Vec<String> {
    bundle_with(&set)
        .expect_err("refused")
        .iter()
        .map(|p| p.to_string())
        .collect()
}

#[test]
fn a_recipe_set_compiles_with_its_scopes_and_steps() {
    let b = bundle_with(&recipes(vec![recipe()])).unwrap();
    let set = b.recipes.as_deref().unwrap();
    let r = set.find("RESERVE", "/reservations").unwrap();
    assert_eq!(r.steps.len(), 2);
    assert_eq!(
        r.all_scopes,
        BTreeSet::from(["stock:reserve", "items:write", "orders:write"].map(String::from))
    );
    assert!(set.methods.contains("RESERVE"));
    assert!(set.find("RESERVE", "/reservations/").is_none());
    assert!(set.find("BOOK", "/reservations").is_none());
    assert_eq!(r.pattern()["path_exact"], "/reservations");
}

#[test]
fn a_recipe_that_cannot_be_enforced_is_refused_with_its_pointer() {
    let mut no_scope = recipes(vec![recipe()]);
    no_scope["capabilityScopes"]
        .as_object_mut()
        .unwrap()
        .remove("orders.create");
    let cases: Vec<(Value, &str)> = vec![
        (
            no_scope,
            "/recipes/0/steps/1/capability: has no capabilityScopes entry",
        ),
        (
            {
                let mut r = recipe();
                r["steps"][0]["capability"] = json!("nope");
                recipes(vec![r])
            },
            "/recipes/0/steps/0/capability: must name a capability",
        ),
        (
            {
                let mut r = recipe();
                r["path_regex"] = json!("/r.*");
                recipes(vec![r])
            },
            "exactly one of path_exact and path_regex",
        ),
        (
            {
                let mut r = recipe();
                r.as_object_mut().unwrap().remove("path_exact");
                r["path_regex"] = json!("(unclosed");
                recipes(vec![r])
            },
            "/recipes/0/path_regex: not a regular expression",
        ),
        (
            {
                let mut r = recipe();
                r.as_object_mut().unwrap().remove("path_exact");
                // Compiles to far more than the 64 KiB program cap.
                r["path_regex"] = json!("(\\w{100}){100}");
                recipes(vec![r])
            },
            "/recipes/0/path_regex: not a regular expression",
        ),
        (
            {
                let mut r = recipe();
                r["steps"][0].as_object_mut().unwrap().remove("path");
                recipes(vec![r])
            },
            "/recipes/0/steps/0/path/id: is required",
        ),
        (
            {
                let mut r = recipe();
                r["steps"][1]["path"] = json!({"id": "input.sku"});
                recipes(vec![r])
            },
            "/recipes/0/steps/1/path/id: is not a parameter",
        ),
        (
            {
                let mut r = recipe();
                r["steps"][0]["body"] = json!("abs(input.qty)");
                recipes(vec![r])
            },
            "/recipes/0/steps/0/body: not a T1 JMESPath expression",
        ),
        (
            recipes(vec![recipe(), recipe()]),
            "/recipes/1/name: appears twice",
        ),
        (
            {
                let mut r = recipe();
                r["trust_tier"] = json!(0);
                recipes(vec![r])
            },
            "/recipes/0/trust_tier",
        ),
        (
            {
                let mut r = recipe();
                r["method"] = json!("reserve");
                recipes(vec![r])
            },
            "/recipes/0/method",
        ),
        (
            {
                let mut r = recipe();
                r["input_schema"] = json!({"type": 5});
                recipes(vec![r])
            },
            "/recipes/0/input_schema",
        ),
        (
            {
                let mut r = recipe();
                r["steps"] = json!([]);
                recipes(vec![r])
            },
            "/recipes/0/steps: must be an array of 1 to 8 steps",
        ),
    ];
    for (set, want) in cases {
        let ps = problems_of(set);
        assert!(ps.iter().any(|p| p.contains(want)), "{want} not in {ps:#?}");
    }
}

#[test]
fn a_regex_pattern_matches_the_whole_path_only() {
    let mut r = recipe();
    r.as_object_mut().unwrap().remove("path_exact");
    r["path_regex"] = json!("/reservations/[0-9]+");
    let b = bundle_with(&recipes(vec![r])).unwrap();
    let set = b.recipes.as_deref().unwrap();
    assert!(set.find("RESERVE", "/reservations/42").is_some());
    for p in [
        "/reservations/42/x",
        "/x/reservations/42",
        "/reservations/",
        "/reservations/4a",
    ] {
        assert!(set.find("RESERVE", p).is_none(), "{p}");
    }
    assert!(matches!(set.recipes[0].path, PathMatch::Regex(_)));
}

#[test]
fn the_path_grammar_refuses_dot_segments_queries_and_empty_segments() {
    for ok in ["/a", "/a/b-c_d.e~f", "/items/{id}", "/A/9"] {
        assert!(is_path(ok), "{ok}");
    }
    for bad in [
        "", "a", "/", "//a", "/a//b", "/a/", "/..", "/a/../b", "/./a", "/a?b", "/a#b", "/a b",
        "/%2e%2e", "/{}", "/{a-b}", "/é",
    ] {
        assert!(!is_path(bad), "{bad}");
    }
    assert!(!is_path(&format!("/{}", "a".repeat(300))));
}

fn propose(params: Value) -> Result<Proposal, palisade_policy::Refusal> {
    Proposal::parse(
        serde_json::to_vec(&json!({"method": "PROPOSE", "task_id": "t-1", "parameters": params}))
            .unwrap()
            .as_slice(),
    )
}

#[test]
fn both_body_forms_are_read_and_they_are_exclusive() {
    let wrapped = propose(
        json!({"endpoint": {"method": "RESERVE", "path": "/reservations",
        "semantic": {"intent": "x"}}, "persistent": true}),
    )
    .unwrap();
    assert_eq!((wrapped.form, wrapped.persistent), ("endpoint", true));
    let flat = propose(
        json!({"name": "reserve", "method": "RESERVE", "path": "/reservations",
        "semantic": {"intent": "x"}}),
    )
    .unwrap();
    assert_eq!((flat.form, flat.name.as_deref()), ("flat", Some("reserve")));
    assert_eq!(flat.task_id.as_deref(), Some("t-1"));
    let bad = [
        json!({"endpoint": {"method": "RESERVE", "path": "/r"}, "method": "RESERVE"}),
        json!({"endpoint": "RESERVE /r"}),
        json!({"method": "RESERVE"}),
        json!({"method": 5, "path": "/r"}),
        json!({"method": "RESERVE", "path": "/r", "persistent": "yes"}),
    ];
    for params in bad {
        let r = propose(params.clone()).unwrap_err();
        assert_eq!(
            (r.code, r.reason),
            (ErrorCode::RcnsProposal, Some("proposal-malformed")),
            "{params}"
        );
    }
    for body in [&b"[]"[..], b"{", b"{\"method\":\"GET\",\"parameters\":{}}"] {
        assert!(Proposal::parse(body).is_err());
    }
}

fn caller(scopes: &[&str], tier: u8) -> Caller {
    Caller {
        agent_id: "agent-1".into(),
        scopes: scopes.iter().map(|s| s.to_string()).collect(),
        trust_tier: tier,
    }
}

const ALL: &[&str] = &[
    "rcns:negotiate",
    "stock:reserve",
    "items:write",
    "orders:write",
];

fn claim(scopes: &[&str]) -> BTreeSet<String> {
    scopes.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_gate_names_the_lock_that_is_closed() {
    let c = caller(ALL, 1);
    let full = claim(ALL);
    assert!(gate(true, true, Some(&c), &full).is_ok());
    let lock = |r: Result<(), evaluate::Gate>| {
        let g = r.unwrap_err();
        assert_eq!(g.refusal.code, ErrorCode::RcnsRefused);
        assert_eq!(g.refusal.status(), 464);
        assert_eq!(g.refusal.reason, Some("rcns-disabled"));
        g.lock
    };
    assert_eq!(lock(gate(false, true, Some(&c), &full)), 1);
    assert_eq!(lock(gate(true, false, Some(&c), &full)), 2);
    assert_eq!(lock(gate(true, true, None, &full)), 3);
    assert_eq!(
        lock(gate(true, true, Some(&caller(&ALL[1..], 1)), &full)),
        3
    );
    assert_eq!(lock(gate(true, true, Some(&c), &claim(&ALL[1..]))), 3);
}

fn outcome(
    p: Value,
    c: &Caller,
    cl: &[&str],
) -> Result<String, (u16, ErrorCode, Option<&'static str>)> {
    let b = bundle_with(&recipes(vec![recipe()])).unwrap();
    let p = propose(p).unwrap();
    evaluate(&p, c, &claim(cl), b.recipes.as_deref(), Some(&b))
        .map(|m| m.recipe.name.clone())
        .map_err(|e| {
            let r = e.refusal();
            (r.status(), r.code, r.reason)
        })
}

#[test]
fn the_evaluation_runs_in_the_seeds_order() {
    let good = json!({"endpoint": {"method": "RESERVE", "path": "/reservations",
                                   "semantic": {"intent": "reserve"}}});
    let c = caller(ALL, 2);
    assert_eq!(outcome(good.clone(), &c, ALL).unwrap(), "reserve");
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p["endpoint"]);
        p
    };
    type Case<'a> = (Value, Caller, &'a [&'a str], u16, Option<&'a str>);
    let cases: Vec<Case> = vec![
        // 1 before 2: a bad method and a bad path is a method violation.
        (
            with(&|e| {
                e["method"] = json!("book");
                e["path"] = json!("/../x");
            }),
            c.clone(),
            ALL,
            459,
            None,
        ),
        (
            with(&|e| e["method"] = json!("BOOK")),
            c.clone(),
            ALL,
            459,
            None,
        ),
        (
            with(&|e| e["path"] = json!("/a/../b")),
            c.clone(),
            ALL,
            460,
            None,
        ),
        (
            with(&|e| {
                e.as_object_mut().unwrap().remove("semantic");
            }),
            c.clone(),
            ALL,
            400,
            Some("semantic-invalid"),
        ),
        (
            with(&|e| e["semantic"] = json!({"intent": " "})),
            c.clone(),
            ALL,
            400,
            Some("semantic-invalid"),
        ),
        (
            with(&|e| e["input_schema"] = json!({"type": 5})),
            c.clone(),
            ALL,
            400,
            Some("schema-invalid"),
        ),
        // Lock 4 before authority.
        (
            good.clone(),
            caller(ALL, 3),
            ALL,
            464,
            Some("trust-tier-insufficient"),
        ),
        // Each step within scope, the composition not: refused before anything runs.
        (
            good.clone(),
            caller(&["rcns:negotiate", "items:write", "orders:write"], 1),
            ALL,
            455,
            Some("scope-exceeded"),
        ),
        (
            good.clone(),
            caller(&["rcns:negotiate", "stock:reserve", "items:write"], 1),
            ALL,
            455,
            Some("scope-exceeded"),
        ),
        (
            good.clone(),
            c.clone(),
            &["rcns:negotiate", "stock:reserve", "items:write"],
            262,
            Some("scope-required"),
        ),
        (
            with(&|e| e["path"] = json!("/elsewhere")),
            c.clone(),
            ALL,
            463,
            Some("composition-impossible"),
        ),
    ];
    for (p, who, cl, status, reason) in cases {
        let got = outcome(p.clone(), &who, cl).unwrap_err();
        assert_eq!((got.0, got.2), (status, reason), "{p}");
    }
}

#[test]
fn a_pair_a_binding_serves_or_a_reserved_path_is_policy_refused() {
    let mut r = recipe();
    r.as_object_mut().unwrap().remove("path_exact");
    r["path_regex"] = json!("/.*");
    r["method"] = json!("POST");
    let b = bundle_with(&recipes(vec![r])).unwrap();
    let c = caller(ALL, 1);
    for path in ["/orders", "/.well-known/agtp/x"] {
        let p =
            propose(json!({"method": "POST", "path": path, "semantic": {"intent": "x"}})).unwrap();
        let e = evaluate(&p, &c, &claim(ALL), b.recipes.as_deref(), Some(&b)).unwrap_err();
        assert!(matches!(e, Refused::Plain(_)));
        assert_eq!(e.refusal().reason, Some("policy-refused"), "{path}");
    }
    let p =
        propose(json!({"method": "POST", "path": "/new", "semantic": {"intent": "x"}})).unwrap();
    assert!(evaluate(&p, &c, &claim(ALL), b.recipes.as_deref(), Some(&b)).is_ok());
}

/// A session-scoped contract of agent-1 for `RESERVE /reservations`.
fn synthesized() -> SynthesizedContract {
    SynthesizedContract {
        synthesis_id: "syn_1".into(),
        method: "RESERVE".into(),
        path: "/reservations".into(),
        endpoint: json!({"method": "RESERVE"}),
        recipe_name: "reserve".into(),
        recipe_version: "1".into(),
        recipe: recipe(),
        originating_agent_id: "agent-1".into(),
        negotiation_origin: contract::ORIGIN_PROPOSE,
        task_id: None,
        persistent: false,
        session: Some("ses_1".into()),
        issued_at_ms: 1_800_000_000_000,
        expires_at_ms: 1_800_003_600_000,
        idle_timeout_ms: Some(900_000),
        revoked: false,
        required_scopes: vec!["stock:reserve".into()],
        fingerprint: Some("ab".into()),
    }
}

#[test]
fn the_contract_hash_covers_the_captured_recipe_and_survives_storage() {
    let c = synthesized();
    let hash = c.contract_hash();
    assert_eq!(hash, Sha256Digest::of_json(&c.canonical()).to_hex());
    assert_eq!(c.canonical()["expires_at"], "2027-01-15T09:00:00.000Z");
    let back = SynthesizedContract::from_record(&c.to_record()).unwrap();
    assert_eq!(back, c);
    let mut edited = c.clone();
    edited.recipe["steps"][0]["body"] = json!("{}");
    assert_ne!(
        edited.contract_hash(),
        hash,
        "same name and version, another recipe"
    );
    let mut revoked = c.clone();
    revoked.revoked = true;
    assert_eq!(
        revoked.contract_hash(),
        hash,
        "revocation is state, not the contract"
    );
    assert_eq!(revoked.view()["revoked"], true);
}

#[test]
fn a_callers_file_is_checked_whole() {
    let ok = json!({"callers": [{"identity": format!("authz:sha256:{}", "a".repeat(64)),
        "agent_id": "agent-1", "scopes": ["rcns:negotiate"], "trust_tier": 1},
        {"identity": "spiffe://example.org/agent", "agent_id": "agent-2", "scopes": [], "trust_tier": 3}]});
    let c = Callers::parse(ok.to_string().as_bytes()).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(c.get("spiffe://example.org/agent").unwrap().trust_tier, 3);
    let bad = json!({"callers": [
        {"identity": "authz:sha256:ABC", "agent_id": "a", "scopes": [], "trust_tier": 1},
        {"identity": "spiffe://x/y", "agent_id": "a b", "scopes": [], "trust_tier": 1},
        {"identity": "spiffe://x/z", "agent_id": "z", "scopes": ["has space"], "trust_tier": 1},
        {"identity": "spiffe://x/w", "agent_id": "w", "scopes": [], "trust_tier": 4}]});
    let ps = Callers::parse(bad.to_string().as_bytes()).unwrap_err();
    for at in [
        "/callers/0/identity",
        "/callers/1/agent_id",
        "/callers/2/scopes",
        "/callers/3/trust_tier",
    ] {
        assert!(ps.iter().any(|p| p.pointer.ends_with(at)), "{at}: {ps:?}");
    }
}

#[test]
fn claimed_scopes_read_tokens_and_nothing_else() {
    let c = claimed_scopes(Some("rcns:negotiate  erp:x,erp:y \"quoted\""));
    assert_eq!(c, claim(&["rcns:negotiate", "erp:x", "erp:y"]));
    assert!(claimed_scopes(None).is_empty());
}

/// The invocation rules (seed 000 §3.8, §4.2), each refusal alone.
#[test]
fn a_contract_is_invoked_only_by_its_agent_in_its_session_with_its_scopes() {
    use super::invocation::{check, Invoking};
    let mut c = synthesized();
    c.required_scopes.push("stock:read".into());
    let all: BTreeSet<String> = ["stock:reserve", "stock:read"].map(String::from).into();
    let one: BTreeSet<String> = ["stock:read"].map(String::from).into();
    let ok = Invoking {
        agent_id: "agent-1",
        session: Some("ses_1"),
        method: "RESERVE",
        path: "/reservations",
        granted: &all,
        claimed: &all,
    };
    assert_eq!(check(&c, &ok), Ok(()));
    let refused = |inv: Invoking<'_>| check(&c, &inv).unwrap_err();
    let r = refused(Invoking {
        agent_id: "agent-2",
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.refusal.reason),
        (ErrorCode::RcnsRefused, Some("contract-not-yours"))
    );
    for session in [None, Some("ses_2")] {
        let r = refused(Invoking { session, ..ok });
        assert_eq!(r.refusal.reason, Some("contract-not-yours"), "{session:?}");
    }
    let mut revoked = c.clone();
    revoked.revoked = true;
    let r = check(&revoked, &ok).unwrap_err();
    assert_eq!(r.refusal.reason, Some("contract-revoked"));
    for (method, path) in [("POST", "/reservations"), ("RESERVE", "/reservations/1")] {
        let r = refused(Invoking { method, path, ..ok });
        assert_eq!(r.refusal.code, ErrorCode::NotFound, "{method} {path}");
    }
    // The identity document lost a scope: 455, naming it; granted but not claimed: 262.
    let r = refused(Invoking {
        granted: &one,
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.missing_scopes.clone()),
        (
            ErrorCode::RcnsScopeExceeded,
            vec!["stock:reserve".to_owned()]
        )
    );
    let r = refused(Invoking {
        claimed: &one,
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.refusal.reason),
        (ErrorCode::RcnsScopeRequired, Some("scope-required"))
    );
    // A persistent contract has no session to match.
    let mut persistent = c.clone();
    persistent.session = None;
    assert_eq!(
        check(
            &persistent,
            &Invoking {
                session: None,
                ..ok
            }
        ),
        Ok(())
    );
}

/// A step on an MCP tool (issue 37): its arguments built from the context, its inverse from
/// the context and those arguments; what is not an object is refused at the step.
#[test]
fn a_tool_step_builds_its_call_and_its_inverse() {
    use crate::connector::t1::{Limits, T1};
    use crate::recipes::ToolStep;
    let expr = |t: &str| T1::compile(t, Limits::default()).unwrap();
    let step = ToolStep {
        name: "set_level".into(),
        arguments: Some(expr("{sku: input.sku, qty: steps[0].n}")),
        inverse: Some(("set_level".into(), expr("{sku: arguments.sku, qty: `0`}"))),
    };
    let cx = compose::context(&json!({"sku": "A"}), &[json!({"n": 4})]);
    let req = compose::tool_request(1, &step, &cx).unwrap();
    assert_eq!(req.name, "set_level");
    assert_eq!(req.arguments, json!({"sku": "A", "qty": 4}));
    assert_eq!(
        req.inverse,
        Some(json!({"tool": "set_level", "arguments": {"sku": "A", "qty": 0}}))
    );
    let scalar = ToolStep {
        arguments: Some(expr("input.sku")),
        ..step
    };
    let r = compose::tool_request(1, &scalar, &cx).unwrap_err();
    assert_eq!(r.code, ErrorCode::RcnsStepFailed);
    assert_eq!(r.location.as_deref(), Some("/steps/1"));
}
