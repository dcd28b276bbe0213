//! Request-target canonicalisation (issue 15): no input may panic, and a canonical path is a
//! fixed point with no dot-segment or empty segment left, so the path that is checked is the
//! path that is forwarded, whatever spelling arrived.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = palisade_policy::path::canonical_path(raw) {
        assert_eq!(
            palisade_policy::path::canonical_path(&c).as_deref(),
            Ok(c.as_str()),
            "not a fixed point: {raw:?} -> {c:?}"
        );
        let path = c.split('?').next().unwrap_or_default();
        assert!(path.starts_with('/'), "{raw:?} -> {c:?}");
        assert!(!path.contains("//"), "{raw:?} -> {c:?}");
        for seg in path.split('/').skip(1) {
            assert!(seg != "." && seg != "..", "{raw:?} -> {c:?}");
        }
    }
});
