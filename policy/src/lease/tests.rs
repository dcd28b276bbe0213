use super::*;
use crate::keys::KeyPair;
use proptest::prelude::*;
use serde_json::json;

mod properties;

const NOW: i64 = 1_796_000_000_000; // 2026-11-30
const TARGET: &str = "https://erp.example.com/api/v2/inventory/allocations/99281";

fn issuer() -> KeyPair {
    KeyPair::from_seed([42; 32])
}

fn trust() -> TrustStore {
    let mut t = TrustStore::new();
    t.insert(issuer().trusted("test-issuer")).unwrap();
    t
}

fn fields() -> Map<String, Value> {
    json!({
        "ptcl_version": "1.0",
        "lease_id": "urn:uuid:3a88e112-901c-4b77-8821-00912a34f119",
        "sor_target_uri": TARGET,
        "recovery_mode": "COMPENSATING_ACTION",
        "t_req_ms": 450,
        "t_granted_ms": 2000,
        "cas_fence_epoch": 1048579,
        "pre_image_state_hash": "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
        "inverse_payload_jcs_hash": "sha256:4fc82b26aecb47d2868c4efbe3581732a3e7cbcc6c2efb32062c08170a05eeb8",
        "trace_anchor_ref": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "issued_at": format_rfc3339_ms(NOW - 500),
    })
    .as_object()
    .unwrap()
    .clone()
}

fn signed(f: Map<String, Value>) -> Vec<u8> {
    serde_json::to_vec(&sign(f, &issuer())).unwrap()
}

fn cx(request: Option<RequestFacts<'static>>) -> VerifyContext<'static> {
    VerifyContext {
        now_ms: NOW,
        max_clock_skew_ms: 60_000,
        first_seen: None,
        request,
    }
}

fn facts(rev: Option<Reversibility>) -> Option<RequestFacts<'static>> {
    Some(RequestFacts {
        target: TARGET,
        reversibility: rev,
    })
}

#[test]
fn a_good_lease_verifies() {
    let raw = signed(fields());
    let v = verify(&raw, &trust(), &cx(facts(Some(Reversibility::Reversible)))).unwrap();
    assert_eq!(v.lease().cas_fence_epoch, 1048579);
    assert_eq!(v.lease().recovery_mode, RecoveryMode::CompensatingAction);
    assert_eq!(v.expires_at_ms(), NOW - 500 + 2000);
    assert_eq!(v.lease().kid, issuer().kid());
}

fn with(f: impl FnOnce(&mut Map<String, Value>)) -> Map<String, Value> {
    let mut m = fields();
    f(&mut m);
    m
}

/// One row per refusal code of checks 2–8, each asserting the exact code.
#[test]
fn each_check_refuses_with_its_code() {
    let other_key = KeyPair::from_seed([7; 32]);
    let mut tampered: Value = serde_json::from_slice(&signed(fields())).unwrap();
    tampered["cas_fence_epoch"] = json!(1048580);

    let rows: Vec<(&str, Vec<u8>, VerifyContext<'static>, ErrorCode)> = vec![
        (
            "not json",
            b"{nope".to_vec(),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "not an object",
            b"[]".to_vec(),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "duplicate member",
            br#"{"ptcl_version":"1.0","ptcl_version":"1.0"}"#.to_vec(),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "wrong version",
            signed(with(|m| {
                m.insert("ptcl_version".into(), json!("2.0"));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "missing epoch",
            signed(with(|m| {
                m.remove("cas_fence_epoch");
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "zero epoch",
            signed(with(|m| {
                m.insert("cas_fence_epoch".into(), json!(0));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "negative t_req",
            signed(with(|m| {
                m.insert("t_req_ms".into(), json!(-1));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "float epoch",
            signed(with(|m| {
                m.insert("cas_fence_epoch".into(), json!(1.5));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "unknown mode",
            signed(with(|m| {
                m.insert("recovery_mode".into(), json!("YOLO"));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "uppercase digest",
            signed(with(|m| {
                m.insert(
                    "pre_image_state_hash".into(),
                    json!(format!("sha256:{}", "A".repeat(64))),
                );
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "long lease_id",
            signed(with(|m| {
                m.insert("lease_id".into(), json!("x".repeat(129)));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "relative target",
            signed(with(|m| {
                m.insert("sor_target_uri".into(), json!("/items/1"));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "bad issued_at",
            signed(with(|m| {
                m.insert("issued_at".into(), json!("yesterday"));
            })),
            cx(None),
            ErrorCode::LeaseMalformed,
        ),
        (
            "untrusted key",
            serde_json::to_vec(&sign(fields(), &other_key)).unwrap(),
            cx(None),
            ErrorCode::LeaseUntrustedKey,
        ),
        (
            "tampered field",
            serde_json::to_vec(&tampered).unwrap(),
            cx(None),
            ErrorCode::LeaseSignature,
        ),
        (
            "window inverted",
            signed(with(|m| {
                m.insert("t_req_ms".into(), json!(2001));
            })),
            cx(None),
            ErrorCode::RecoveryWindow,
        ),
        (
            "issued in the future",
            signed(with(|m| {
                m.insert("issued_at".into(), json!(format_rfc3339_ms(NOW + 61_000)));
            })),
            cx(None),
            ErrorCode::ClockSkew,
        ),
        (
            "expired",
            signed(with(|m| {
                m.insert("issued_at".into(), json!(format_rfc3339_ms(NOW - 2_001)));
            })),
            cx(None),
            ErrorCode::LeaseExpired,
        ),
        (
            "expired since first sight",
            signed(with(|m| {
                m.remove("issued_at");
            })),
            VerifyContext {
                first_seen: Some(&|_| NOW - 2_001),
                ..cx(None)
            },
            ErrorCode::LeaseExpired,
        ),
        (
            "other resource",
            signed(with(|m| {
                m.insert(
                    "sor_target_uri".into(),
                    json!("https://erp.example.com/api/v2/inventory/allocations/1"),
                );
            })),
            cx(facts(None)),
            ErrorCode::TargetMismatch,
        ),
        (
            "compensation of an irreversible write",
            signed(fields()),
            cx(facts(Some(Reversibility::Irreversible))),
            ErrorCode::RecoveryMode,
        ),
        (
            "snapshot of an unknown-reversibility write",
            signed(with(|m| {
                m.insert("recovery_mode".into(), json!("SNAPSHOT_RESTORE"));
            })),
            cx(facts(Some(Reversibility::Unknown))),
            ErrorCode::RecoveryMode,
        ),
    ];
    let t = trust();
    for (name, raw, cx, want) in rows {
        let got = verify(&raw, &t, &cx).map(|_| ()).unwrap_err();
        assert_eq!(got.code, want, "row {name:?}: {got}");
    }
}

#[test]
fn checks_run_in_spec_order() {
    // Untrusted key *and* an inverted window: check 3 answers first.
    let other = KeyPair::from_seed([7; 32]);
    let raw = serde_json::to_vec(&sign(
        with(|m| {
            m.insert("t_req_ms".into(), json!(9999));
        }),
        &other,
    ))
    .unwrap();
    assert_eq!(
        verify(&raw, &trust(), &cx(None)).unwrap_err().code,
        ErrorCode::LeaseUntrustedKey
    );
    // Wrong target *and* expired: check 6 answers first.
    let raw = signed(with(|m| {
        m.insert("issued_at".into(), json!(format_rfc3339_ms(NOW - 10_000)));
        m.insert(
            "sor_target_uri".into(),
            json!("https://other.example.com/x"),
        );
    }));
    assert_eq!(
        verify(&raw, &trust(), &cx(facts(None))).unwrap_err().code,
        ErrorCode::LeaseExpired
    );
}

#[test]
fn escrow_and_dry_run_pass_for_irreversible_writes_and_unknown_members_are_signed() {
    for mode in ["HUMAN_ESCROW", "DRY_RUN_SHADOW"] {
        let raw = signed(with(|m| {
            m.insert("recovery_mode".into(), json!(mode));
            m.insert("x-vendor".into(), json!({"nested": [1, 2]}));
        }));
        verify(
            &raw,
            &trust(),
            &cx(facts(Some(Reversibility::Irreversible))),
        )
        .unwrap();
        // The unknown member is covered by the signature.
        let mut v: Value = serde_json::from_slice(&raw).unwrap();
        v["x-vendor"]["nested"][0] = json!(3);
        let err = verify(&serde_json::to_vec(&v).unwrap(), &trust(), &cx(None)).unwrap_err();
        assert_eq!(err.code, ErrorCode::LeaseSignature);
    }
}

#[test]
fn header_decoding_accepts_base64url_and_raw_json() {
    let raw = signed(fields());
    let b64 = URL_SAFE_NO_PAD.encode(&raw);
    assert_eq!(&*decode_header(b64.as_bytes()).unwrap(), raw.as_slice());
    assert_eq!(&*decode_header(&raw).unwrap(), raw.as_slice());
    let padded = base64::engine::general_purpose::URL_SAFE.encode(&raw);
    if padded.ends_with('=') {
        assert_eq!(
            decode_header(padded.as_bytes()).unwrap_err().code,
            ErrorCode::LeaseMalformed
        );
    }
    assert_eq!(
        decode_header(b"!!!").unwrap_err().code,
        ErrorCode::LeaseMalformed
    );
    assert_eq!(
        decode_header(&vec![b'A'; 40_000]).unwrap_err().code,
        ErrorCode::LeaseMalformed
    );
}

#[test]
fn rfc3339_formatting_is_fixed_width() {
    assert_eq!(format_rfc3339_ms(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(format_rfc3339_ms(1_500), "1970-01-01T00:00:01.500Z");
    assert_eq!(
        format_rfc3339_ms(1_796_000_000_123),
        "2026-11-30T00:53:20.123Z"
    );
}

#[test]
fn a_lease_granted_in_process_is_the_lease_verify_would_accept() {
    let granted = grant(fields(), &issuer(), Some(Reversibility::Compensable)).unwrap();
    let verified = verify(&signed(fields()), &trust(), &cx(facts(None))).unwrap();
    assert_eq!(granted.digest(), verified.digest());
    assert_eq!(granted.lease(), verified.lease());
    assert_eq!(granted.expires_at_ms(), verified.expires_at_ms());
    // Check 8 holds for a grant too; and a grant names when it was issued.
    let mut snapshot = fields();
    snapshot.insert("recovery_mode".into(), json!("SNAPSHOT_RESTORE"));
    let refused = grant(snapshot, &issuer(), Some(Reversibility::Irreversible)).unwrap_err();
    assert_eq!(refused.code, ErrorCode::RecoveryMode);
    let mut undated = fields();
    undated.remove("issued_at");
    let refused = grant(undated, &issuer(), None).unwrap_err();
    assert_eq!(refused.code, ErrorCode::LeaseMalformed);
}

#[test]
fn leases_checked_together_get_the_verdicts_each_gets_alone() {
    let mut raws: Vec<Vec<u8>> = (0..12)
        .map(|i| {
            let mut f = fields();
            f.insert("lease_id".into(), json!(format!("urn:lease:{i}")));
            signed(f)
        })
        .collect();
    // Lease 4's body changed after signing; lease 9 carries lease 2's signature.
    let mut tampered: Value = serde_json::from_slice(&raws[4]).unwrap();
    tampered["t_req_ms"] = json!(451);
    raws[4] = serde_json::to_vec(&tampered).unwrap();
    let two: Value = serde_json::from_slice(&raws[2]).unwrap();
    let mut nine: Value = serde_json::from_slice(&raws[9]).unwrap();
    nine["signature"] = two["signature"].clone();
    raws[9] = serde_json::to_vec(&nine).unwrap();
    let t = trust();
    let batch: Vec<Unsigned> = raws.iter().map(|r| prepare(r, &t).unwrap()).collect();
    let together: Vec<Result<Signed, Refusal>> = check_signatures(batch);
    for (i, (raw, verdict)) in raws.iter().zip(together).enumerate() {
        let alone = verify(raw, &t, &cx(facts(None))).map(|v| v.digest());
        let batched = verdict
            .and_then(|s| s.finish(&cx(facts(None))))
            .map(|v| v.digest());
        assert_eq!(
            batched.as_ref().map_err(|r| r.code),
            alone.as_ref().map_err(|r| r.code),
            "lease {i}"
        );
        assert_eq!(batched.is_err(), i == 4 || i == 9, "lease {i}");
    }
}
