//! PROPOSE bodies, the four-lock gate and the seed's evaluation order.

use super::*;

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
