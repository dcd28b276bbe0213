use super::*;
use proptest::prelude::*;
use serde_json::json;

#[test]
fn sorts_by_utf16_code_units_not_code_points() {
    // U+FB33 sorts after U+1F602 in UTF-16 (0xD83D < 0xFB33) but before it by code point.
    let v = json!({"\u{fb33}": 1, "\u{1f602}": 2, "a": 3});
    assert_eq!(
        String::from_utf8(to_vec(&v)).unwrap(),
        "{\"a\":3,\"\u{1f602}\":2,\"\u{fb33}\":1}"
    );
}

#[test]
fn escapes_only_what_the_rfc_requires() {
    let v = json!("\u{0}\u{1f}\"\\/\u{7f}\u{2028}é\t");
    assert_eq!(
        String::from_utf8(to_vec(&v)).unwrap(),
        "\"\\u0000\\u001f\\\"\\\\/\u{7f}\u{2028}é\\t\""
    );
}

#[test]
fn numbers_follow_ecmascript() {
    let rows = [
        ("0", "0"),
        ("-0", "0"),
        ("-0.0", "0"),
        ("1.0", "1"),
        ("1e21", "1e+21"),
        ("1e20", "100000000000000000000"),
        ("1e-7", "1e-7"),
        ("0.000001", "0.000001"),
        ("-9007199254740991", "-9007199254740991"),
        ("5e-324", "5e-324"),
    ];
    for (input, want) in rows {
        let got = canonicalize(input.as_bytes(), 8).unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), want, "input {input}");
    }
}

/// ECMAScript prints integral doubles in [2^53, 1e21) as plain digit strings, which I-JSON
/// (and so our parser) refuses as unsafe integers on re-input. See docs/decisions.md.
fn printed_as_unsafe_integer(f: f64) -> bool {
    f.fract() == 0.0 && f.abs() > crate::json::MAX_SAFE_INTEGER as f64 && f.abs() < 1e21
}

#[test]
fn integral_doubles_beyond_2_pow_53_canonicalise_but_do_not_reparse() {
    // Documented consequence of refusing unsafe integer literals (RFC 7493 §2.2).
    assert_eq!(canonicalize(b"1e20", 8).unwrap(), b"100000000000000000000");
    assert!(canonicalize(b"100000000000000000000", 8).is_err());
}

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|i| json!(i)),
        any::<f64>()
            .prop_filter("finite, and not printed as an unsafe integer", |f| {
                f.is_finite() && !printed_as_unsafe_integer(*f)
            })
            .prop_map(|f| json!(f)),
        "\\PC{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map("\\PC{0,8}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn next(seed: &mut u64) -> usize {
    *seed = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (*seed >> 33) as usize
}

/// Writes `v` as JSON with members in a shuffled order and random whitespace.
fn scramble(v: &Value, seed: &mut u64, out: &mut String) {
    let ws = [" ", "", "\n", "\t ", "\r\n"];
    out.push_str(ws[next(seed) % ws.len()]);
    match v {
        Value::Object(m) => {
            let mut members: Vec<_> = m.iter().collect();
            for i in (1..members.len()).rev() {
                members.swap(i, next(seed) % (i + 1));
            }
            out.push('{');
            for (i, (k, val)) in members.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).unwrap());
                out.push_str(ws[next(seed) % ws.len()]);
                out.push(':');
                scramble(val, seed, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                scramble(item, seed, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).unwrap()),
    }
    out.push_str(ws[next(seed) % ws.len()]);
}

proptest! {
    #[test]
    fn canonicalising_twice_equals_once(v in arb_json()) {
        let once = to_vec(&v);
        let twice = canonicalize(&once, 64).unwrap();
        prop_assert_eq!(once, twice);
    }

    #[test]
    fn member_order_and_whitespace_never_change_the_output(v in arb_json(), seed in any::<u64>()) {
        let mut text = String::new();
        let mut s = seed;
        scramble(&v, &mut s, &mut text);
        prop_assert_eq!(canonicalize(text.as_bytes(), 64).unwrap(), to_vec(&v));
    }

    #[test]
    fn canonical_form_parses_back_to_the_same_value(v in arb_json()) {
        let back = crate::json::parse(&to_vec(&v), 64).unwrap();
        prop_assert_eq!(to_vec(&back), to_vec(&v));
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = canonicalize(&bytes, 16);
    }
}

proptest! {
    #[test]
    fn cutting_a_member_equals_canonicalising_without_it(v in arb_json(), pick in any::<prop::sample::Index>()) {
        let Value::Object(map) = &v else { return Ok(()); };
        if map.is_empty() { return Ok(()); }
        let name = map.keys().nth(pick.index(map.len())).unwrap().clone();
        let text = to_vec(&v);
        let tree = crate::json::parse_tree(&text, 64).unwrap();
        let crate::json::Node::Object(members) = &tree else { unreachable!() };
        let mut full = Vec::new();
        let cut = write_members_noting(&mut full, members, Some(&name)).unwrap();
        prop_assert_eq!(&full, &text);
        let mut rest = map.clone();
        rest.remove(&name);
        prop_assert_eq!(without(&full, cut), to_vec(&Value::Object(rest)));
    }
}
