use super::*;
use proptest::prelude::*;

#[test]
fn spellings_of_one_path_canonicalise_alike() {
    let rows: &[(&str, &str)] = &[
        ("/api/v2/allocations/X", "/api/v2/allocations/X"),
        ("/api/v2/allocations/zz/../X", "/api/v2/allocations/X"),
        ("/api/v2/allocations/zz/%2e%2e/X", "/api/v2/allocations/X"),
        ("/api/v2/allocations/zz/%2E%2E/X", "/api/v2/allocations/X"),
        ("/api/v2/allocations/./X", "/api/v2/allocations/X"),
        ("/api/v2/%61llocations/X", "/api/v2/allocations/X"),
        ("//api/v2/allocations/X", "/api/v2/allocations/X"),
        ("/api//v2///allocations/X", "/api/v2/allocations/X"),
        ("/api/v2/allocations/%58", "/api/v2/allocations/X"),
        ("/a/b%3ac", "/a/b%3Ac"),
        ("/a/b:c@d", "/a/b:c@d"),
        ("/a b", "/a%20b"),
        ("/a/%C3%A9", "/a/%C3%A9"),
        ("/a/é", "/a/%C3%A9"),
        ("/a/%25", "/a/%25"),
        ("/a/%252e%252e/b", "/a/%252e%252e/b"),
        ("/", "/"),
        ("//", "/"),
        ("/.", "/"),
        ("/a/", "/a/"),
        ("/a//", "/a/"),
        ("/a/.", "/a/"),
        ("/a/b/..", "/a/"),
        ("/a;v=1/b", "/a;v=1/b"),
    ];
    for (raw, want) in rows {
        assert_eq!(canonical_path(raw).as_deref(), Ok(*want), "{raw}");
    }
}

#[test]
fn spellings_without_one_canonical_form_are_refused() {
    let rows: &[(&str, PathError)] = &[
        ("api/x", PathError::NotOriginForm),
        ("*", PathError::NotOriginForm),
        ("/a%2Fb", PathError::EncodedSeparator),
        ("/a%2fb", PathError::EncodedSeparator),
        ("/a%5Cb", PathError::EncodedSeparator),
        ("/a\\..\\b", PathError::Backslash),
        ("/a%00", PathError::Control),
        ("/a%0d%0aX: y", PathError::Control),
        ("/a\u{1}", PathError::Control),
        ("/a%zz", PathError::BadEscape),
        ("/a%4", PathError::BadEscape),
        ("/a%", PathError::BadEscape),
        ("/a%C3", PathError::NotUtf8),
        ("/a%FF%FE", PathError::NotUtf8),
        ("/a/..;/b", PathError::DotSegmentParameters),
        ("/a/.;x/b", PathError::DotSegmentParameters),
        ("/a/%2e%2e;/b", PathError::DotSegmentParameters),
        ("/..", PathError::AboveRoot),
        ("/a/../../b", PathError::AboveRoot),
        ("/%2e%2e/etc", PathError::AboveRoot),
    ];
    for (raw, want) in rows {
        assert_eq!(canonical_path(raw), Err(*want), "{raw}");
    }
    assert_eq!(
        canonical_path(&format!("/{}", "a".repeat(MAX_PATH))),
        Err(PathError::TooLong)
    );
    // Short enough as sent, too long once its raw bytes are encoded (found by the fuzzer).
    let raw = format!("/{}", ">".repeat(MAX_PATH / 2));
    assert!(raw.len() <= MAX_PATH);
    assert_eq!(canonical_path(&raw), Err(PathError::TooLong));
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e".to_owned()),
        Just("%2E%2e".to_owned()),
        "[a-zA-Z0-9._~-]{1,6}",
        "(%[0-9a-fA-F]{2}|[a-z:@;=+]){1,4}",
    ]
}

proptest! {
    /// Canonical is a fixed point: what is forwarded, canonicalised again, is itself.
    #[test]
    fn canonicalising_twice_equals_once(segs in proptest::collection::vec(segment(), 0..8)) {
        let raw = format!("/{}", segs.join("/"));
        if let Ok(c) = canonical_path(&raw) {
            prop_assert_eq!(canonical_path(&c), Ok(c.clone()));
            prop_assert!(c.starts_with('/'));
            prop_assert!(!c.contains("//"));
            prop_assert!(!c.split('/').any(|s| s == "." || s == ".."));
        }
    }

    /// Decoding an unreserved character never changes which path it is.
    #[test]
    fn encoded_unreserved_characters_are_the_same_path(name in "[a-zA-Z0-9._~-]{1,12}") {
        let encoded: String = name.bytes().map(|b| format!("%{b:02x}")).collect();
        let plain = canonical_path(&format!("/items/{name}"));
        prop_assert_eq!(canonical_path(&format!("/items/{encoded}")), plain);
    }

    /// Nothing a client sends panics the canonicaliser.
    #[test]
    fn any_input_is_answered(raw in "\\PC{0,64}") {
        let _ = canonical_path(&raw);
    }
}

proptest! {
    /// The borrowing fast path decides exactly as the rebuild: whenever it keeps a path, the
    /// rebuild gives that path back byte for byte (issue 19 added the fast path).
    #[test]
    fn the_fast_path_agrees_with_the_rebuild(
        segs in proptest::collection::vec(segment(), 0..8),
        raw in "[/a.;%2eE~:]{0,24}",
    ) {
        for raw in [format!("/{}", segs.join("/")), raw] {
            let fast = is_canonical(&raw);
            let slow = rebuild(&raw);
            if fast {
                prop_assert_eq!(slow, Ok(raw.clone()));
            }
            prop_assert_eq!(canonical(&raw).map(|c| c.into_owned()), rebuild(&raw));
        }
    }
}

#[test]
fn common_paths_take_the_fast_path() {
    for p in ["/", "/api/v2/items/1", "/a/", "/items;v=1/x", "/~user/a.b"] {
        assert!(
            matches!(canonical(p), Ok(std::borrow::Cow::Borrowed(_))),
            "{p}"
        );
    }
    for p in ["//a", "/a/./b", "/a/..", "/%41", "/a b", "/..;x/a"] {
        assert!(!is_canonical(p), "{p}");
    }
}
