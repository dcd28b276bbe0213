#![allow(clippy::unwrap_used)]
//! RFC 8785 vectors from the reference implementation (testdata/jcs, copied into the repo).

use std::path::PathBuf;

use palisade_policy::canon;

fn testdata(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/jcs")
        .join(rel)
}

#[test]
fn every_input_output_pair_is_byte_exact() {
    let mut seen = 0;
    for entry in std::fs::read_dir(testdata("input")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        let input = std::fs::read(&path).unwrap();
        let want = std::fs::read(testdata("output").join(&name)).unwrap();
        let got = canon::canonicalize(&input, 128).unwrap();
        assert_eq!(got, want, "vector {name:?}");
        seen += 1;
    }
    assert_eq!(seen, 6, "all six reference vectors ran");
}

#[test]
fn es6_number_sample_is_byte_exact() {
    let text = std::fs::read_to_string(testdata("es6testfile100m_first100000.txt")).unwrap();
    let mut lines = 0;
    for line in text.lines() {
        let (bits, want) = line.split_once(',').unwrap();
        let f = f64::from_bits(u64::from_str_radix(bits, 16).unwrap());
        let got = canon::format_f64(f).unwrap();
        assert_eq!(got, want, "bits {bits}");
        // The same value through the parser: the expected text read back canonicalises to itself,
        // except where it is an integral double beyond 2^53 (refused as an unsafe integer).
        let integral_unsafe = !want.contains(['.', 'e'])
            && want
                .trim_start_matches('-')
                .parse::<u128>()
                .is_ok_and(|m| m > palisade_policy::json::MAX_SAFE_INTEGER as u128);
        if !integral_unsafe {
            let again = canon::canonicalize(want.as_bytes(), 4).unwrap();
            assert_eq!(String::from_utf8(again).unwrap(), want, "reparse of {want}");
        }
        lines += 1;
    }
    assert_eq!(lines, 100_000);
}
