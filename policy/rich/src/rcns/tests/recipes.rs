//! Recipe sets: compiled with their scopes and steps, refused with a pointer, path patterns.

use super::*;

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
