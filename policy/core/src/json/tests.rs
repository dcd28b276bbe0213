use super::*;
use serde_json::json;

fn p(s: &str) -> Result<Value, JsonError> {
    parse(s.as_bytes(), 128)
}

#[test]
fn accepts_ordinary_documents() {
    assert_eq!(
        p(r#" {"a": [1, -2, 3.5, true, false, null], "b": "x\n\u00e9\ud83d\ude02"} "#).unwrap(),
        json!({"a": [1, -2, 3.5, true, false, null], "b": "x\né😂"})
    );
}

#[test]
fn refusals_name_the_rule_broken() {
    let rows: &[(&str, &[u8], JsonError)] = &[
        (
            "duplicate member",
            br#"{"a":1,"a":2}"#,
            JsonError::DuplicateMember(7),
        ),
        (
            "lone high surrogate",
            br#"["\ud800"]"#,
            JsonError::LoneSurrogate(2),
        ),
        (
            "lone low surrogate",
            br#"["\udc00"]"#,
            JsonError::LoneSurrogate(2),
        ),
        (
            "high then non-low",
            br#"["\ud800\u0041"]"#,
            JsonError::LoneSurrogate(2),
        ),
        (
            "integer above 2^53-1",
            b"9007199254740992",
            JsonError::UnsafeInteger(0),
        ),
        (
            "integer below -(2^53-1)",
            b"-9007199254740992",
            JsonError::UnsafeInteger(0),
        ),
        (
            "huge integer",
            b"123456789012345678901234567890",
            JsonError::UnsafeInteger(0),
        ),
        ("double overflow", b"1e400", JsonError::NumberOutOfRange(0)),
        ("invalid utf-8", b"[\"\xff\"]", JsonError::InvalidUtf8(2)),
        (
            "raw control char",
            b"[\"a\x01\"]",
            JsonError::ControlCharacter(3),
        ),
        ("trailing data", b"{} {}", JsonError::TrailingData(3)),
        ("leading zero", b"01", JsonError::TrailingData(1)),
        (
            "byte order mark",
            b"\xef\xbb\xbf{}",
            JsonError::Syntax {
                offset: 0,
                expected: "a JSON value",
            },
        ),
        (
            "bad escape",
            br#"["\x"]"#,
            JsonError::Syntax {
                offset: 2,
                expected: "a valid escape sequence",
            },
        ),
        (
            "unterminated",
            br#"["abc"#,
            JsonError::Syntax {
                offset: 5,
                expected: "'\"' closing the string",
            },
        ),
        (
            "missing fraction",
            b"1.",
            JsonError::Syntax {
                offset: 2,
                expected: "a digit after '.'",
            },
        ),
        (
            "empty",
            b"",
            JsonError::Syntax {
                offset: 0,
                expected: "a JSON value",
            },
        ),
    ];
    for (name, input, want) in rows {
        assert_eq!(parse(input, 128).as_ref(), Err(want), "row {name}");
    }
}

#[test]
fn safe_integer_bounds_are_accepted() {
    assert_eq!(p("9007199254740991").unwrap(), json!(9007199254740991u64));
    assert_eq!(p("-9007199254740991").unwrap(), json!(-9007199254740991i64));
    // Non-integer literals of large magnitude are doubles, not integers.
    assert!(p("1E30").is_ok());
    assert!(p("9007199254740993.0").is_ok());
}

#[test]
fn depth_is_bounded() {
    let ok = "[".repeat(128) + &"]".repeat(128);
    assert!(p(&ok).is_ok());
    let deep = "[".repeat(129) + &"]".repeat(129);
    assert_eq!(p(&deep), Err(JsonError::TooDeep(128)));
    // Far deeper than any stack could recurse: refused, not crashed.
    let hostile = "[".repeat(1_000_000);
    assert_eq!(p(&hostile), Err(JsonError::TooDeep(128)));
    let objects = r#"{"a":"#.repeat(200);
    assert_eq!(p(&objects), Err(JsonError::TooDeep(128)));
}
