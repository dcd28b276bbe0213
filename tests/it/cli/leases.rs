//! `jcs`, `digest`, `keygen` and `lease sign|verify`.

use super::*;

#[test]
fn jcs_prints_the_canonical_form_without_a_newline() {
    for name in [
        "arrays",
        "french",
        "structures",
        "unicode",
        "values",
        "weird",
    ] {
        let input = std::fs::read(testdata(&format!("jcs/input/{name}.json"))).unwrap();
        let want = std::fs::read(testdata(&format!("jcs/output/{name}.json"))).unwrap();
        let o = palisade(&["jcs"], &input);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert_eq!(o.stdout, want, "{name}");
    }
}

#[test]
fn jcs_refuses_non_i_json_with_exit_1_and_one_line() {
    for (input, needle) in [
        (&br#"{"a":1,"a":2}"#[..], "duplicate member"),
        (br#"["\ud800"]"#, "lone surrogate"),
        (b"9007199254740993", "2^53"),
        (b"{", "syntax error"),
    ] {
        let o = palisade(&["jcs"], input);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn digest_hashes_the_canonical_form() {
    // {"b":1,"a":2} canonicalises to {"a":2,"b":1}.
    let want = support::sha256_hex(br#"{"a":2,"b":1}"#);
    let o = palisade(&["digest"], br#" { "b" : 1, "a" : 2 } "#);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).trim(), format!("sha-256:{want}"));
    let o = palisade(&["digest", "--prefix", "sha256"], br#"{"a":2,"b":1}"#);
    assert_eq!(stdout(&o).trim(), format!("sha256:{want}"));
    let o = palisade(&["digest", "--prefix", "md5"], b"{}");
    assert_eq!(o.status.code(), Some(2), "unknown prefix is a usage error");
}

#[test]
fn keygen_then_sign_then_verify_and_tampering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("agent.pem");
    let o = palisade(&["keygen", "--out", key.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let entry: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(entry["kid"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(
        entry["public_key"].as_str().unwrap().len(),
        43,
        "32 bytes of base64url"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let trust = dir.path().join("issuers.json");
    std::fs::write(
        &trust,
        serde_json::to_vec(&serde_json::json!([entry])).unwrap(),
    )
    .unwrap();
    let inverse = dir.path().join("inverse.json");
    std::fs::write(
        &inverse,
        br#"{"method":"PUT","path":"/api/v2/items/1","body":{"qty":1200}}"#,
    )
    .unwrap();

    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "7",
            "--pre-image",
            &format!("sha256:{}", "ab".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
            "--mode",
            "SNAPSHOT_RESTORE",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lease: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(lease["cas_fence_epoch"], 7);
    assert_eq!(lease["recovery_mode"], "SNAPSHOT_RESTORE");
    assert_eq!(lease["signature"]["kid"], entry["kid"]);
    // The inverse digest is the JCS SHA-256 of the file's JSON.
    let jcs = palisade(
        &["digest", "--prefix", "sha256"],
        &std::fs::read(&inverse).unwrap(),
    );
    assert_eq!(
        lease["inverse_payload_jcs_hash"].as_str().unwrap(),
        stdout(&jcs).trim()
    );

    let raw = serde_json::to_vec(&lease).unwrap();
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &raw,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The header form (base64url) verifies too.
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        b64.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let mut tampered = lease.clone();
    tampered["cas_fence_epoch"] = serde_json::json!(8);
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &serde_json::to_vec(&tampered).unwrap(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_SIGNATURE");

    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        b"{}",
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_MALFORMED");

    // A key that is not in the trust file.
    let other = dir.path().join("other.pem");
    palisade(&["keygen", "--out", other.to_str().unwrap()], b"");
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            other.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "1",
            "--pre-image",
            &format!("sha256:{}", "00".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
        ],
        b"",
    );
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &o.stdout,
    );
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_UNTRUSTED_KEY");

    // A window that cannot be honoured.
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "1",
            "--pre-image",
            &format!("sha256:{}", "00".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
            "--t-req",
            "5000",
            "--t-granted",
            "1000",
        ],
        b"",
    );
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &o.stdout,
    );
    assert_eq!(stdout(&o).trim(), "ERR_RECOVERY_WINDOW");
}

#[test]
fn lease_sign_reports_bad_arguments_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            dir.path().join("missing.pem").to_str().unwrap(),
            "--target",
            "https://x/y",
            "--epoch",
            "1",
            "--pre-image",
            "sha256:00",
            "--inverse",
            "/nonexistent",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.pem"), "{}", stderr(&o));
    let o = palisade(&["lease", "sign"], b"");
    assert_eq!(
        o.status.code(),
        Some(2),
        "missing arguments are a usage error"
    );
}
