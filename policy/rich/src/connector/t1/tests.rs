use super::*;
use serde_json::json;

fn t1(expr: &str) -> Result<T1, T1Error> {
    T1::compile(expr, Limits::default())
}

#[test]
fn renames_and_reshapes_a_v2_request_into_v1() {
    let t = t1("{sku: item.sku, qty: quantity, warehouse: location.code, tags: labels[*].name}")
        .expect("compiles");
    let out = t
        .apply(&json!({
            "item": {"sku": "BOLT-M8"},
            "quantity": 9_007_199_254_740_991u64,
            "location": {"code": "BER-1"},
            "labels": [{"name": "a"}, {"name": "b"}],
            "extra": true
        }))
        .expect("applies");
    assert_eq!(
        out,
        json!({"sku": "BOLT-M8", "qty": 9_007_199_254_740_991u64, "warehouse": "BER-1", "tags": ["a", "b"]})
    );
}

#[test]
fn missing_is_null_and_floats_pass_unchanged() {
    let t = t1("{a: missing, p: price}").expect("compiles");
    let out = t.apply(&json!({"price": 0.1})).expect("applies");
    assert_eq!(out, json!({"a": null, "p": 0.1}));
}

#[test]
fn integers_beyond_two_to_the_53_are_refused_never_rounded() {
    let t = t1("@").expect("compiles");
    for big in [
        json!(9_007_199_254_740_992u64),
        json!(-9_007_199_254_740_992i64),
        json!(u64::MAX),
    ] {
        let err = t.apply(&json!({"a": [1, {"b": big}]})).unwrap_err();
        assert_eq!(err, T1Error::UnsafeInteger("/a/1/b".into()));
    }
    assert!(t.apply(&json!(-9_007_199_254_740_991i64)).is_ok());
}

#[test]
fn functions_that_compute_numbers_or_are_unknown_are_refused_at_compile() {
    for f in [
        "sum(a)",
        "avg(a)",
        "abs(a)",
        "to_number(a)",
        "max(a)",
        "floor(a)",
        "now()",
    ] {
        match t1(f) {
            Err(T1Error::Function(_)) => {}
            other => panic!("{f}: {other:?}"),
        }
    }
    let t = t1("{n: length(items), k: sort(keys(@)), j: join(',', items)}").expect("compiles");
    assert_eq!(
        t.apply(&json!({"items": ["x", "y"]})).expect("applies"),
        json!({"n": 2, "k": ["items"], "j": "x,y"})
    );
}

#[test]
fn pathological_expressions_are_refused_before_they_run() {
    // Exponential growth: each `[@,@][]` doubles what flows on.
    let doubling = "[@,@][]".repeat(7);
    match t1(&doubling) {
        Err(T1Error::Fanout(f, 64)) => assert!(f >= 128, "{f}"),
        other => panic!("{other:?}"),
    }
    // Hashes of hashes of the whole input.
    let mut nested = "@".to_string();
    for _ in 0..7 {
        nested = format!("{{a: {nested}, b: {nested}}}");
    }
    assert!(matches!(
        t1(&nested),
        Err(T1Error::Fanout(..)) | Err(T1Error::TooLong(..))
    ));
    // Deep nesting would recurse in the parser: refused on the text.
    assert_eq!(t1(&"(".repeat(1000)).unwrap_err(), T1Error::TooNested(16));
    assert_eq!(t1(&"[".repeat(17)).unwrap_err(), T1Error::TooNested(16));
    // Long chains parse without brackets: the tree depth limit refuses them.
    let chain = vec!["a[*]"; 40].join(".");
    assert!(
        matches!(t1(&chain), Err(T1Error::TooDeep(32))),
        "{:?}",
        t1(&chain)
    );
    let long = "a.".repeat(600) + "b";
    assert!(matches!(t1(&long), Err(T1Error::TooLong(1201, 1024))));
    assert!(matches!(t1("a.["), Err(T1Error::Parse(_))));
}

#[test]
fn the_fanout_bound_holds_in_what_evaluation_produces() {
    // 32× within the limit: the output has 32 copies of each item, and no more.
    let t = t1(&"[@,@][]".repeat(5)).expect("compiles");
    assert_eq!(t.fanout(), 32);
    let out = t.apply(&json!([1, 2, 3])).expect("applies");
    assert_eq!(out.as_array().map(Vec::len), Some(96));
}

#[test]
fn a_large_output_is_refused_and_deep_input_too() {
    let limits = Limits {
        max_output: 1000,
        ..Limits::default()
    };
    let t = T1::compile("[@, @]", limits).expect("compiles");
    let big: Vec<u32> = (0..600).collect();
    assert_eq!(
        t.apply(&json!(big)).unwrap_err(),
        T1Error::OutputTooLarge(1000)
    );
    let mut deep = json!(1);
    for _ in 0..70 {
        deep = json!([deep]);
    }
    assert_eq!(
        t1("@").expect("compiles").apply(&deep).unwrap_err(),
        T1Error::InputTooDeep(64)
    );
}
