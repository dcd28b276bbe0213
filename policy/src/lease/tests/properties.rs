//! Properties of signing and verifying, over generated leases, fields, bytes and headers.

use super::*;

/// Field edits that keep the lease well-formed, so only the signature can catch them.
fn mutate(m: &mut Map<String, Value>, field: usize, n: u64) {
    let n = n % 1000 + 1;
    match field {
        0 => {
            m.insert("lease_id".into(), json!(format!("urn:uuid:{n}")));
        }
        1 => {
            m.insert("sor_target_uri".into(), json!(format!("{TARGET}{n}")));
        }
        2 => {
            m.insert(
                "recovery_mode".into(),
                json!(RecoveryMode::ALL[(n % 3 + 1) as usize].as_str()),
            );
        }
        3 => {
            m.insert("t_req_ms".into(), json!(450 + n));
        }
        4 => {
            m.insert("t_granted_ms".into(), json!(2000 + n));
        }
        5 => {
            m.insert("cas_fence_epoch".into(), json!(1048579 + n));
        }
        6 => {
            m.insert(
                "pre_image_state_hash".into(),
                json!(Sha256Digest::of(&n.to_be_bytes()).to_string()),
            );
        }
        7 => {
            m.insert(
                "inverse_payload_jcs_hash".into(),
                json!(Sha256Digest::of(&n.to_be_bytes()).to_string()),
            );
        }
        8 => {
            m.insert(
                "trace_anchor_ref".into(),
                json!(Sha256Digest::of(&n.to_be_bytes()).to_string()),
            );
        }
        _ => {
            m.insert("issued_at".into(), json!(format_rfc3339_ms(NOW - n as i64)));
        }
    }
}

proptest! {
    #[test]
    fn sign_then_verify_round_trips(epoch in 1u64..(1 << 53), t_req in 0u64..10_000, extra in 0u64..10_000, seed in any::<[u8; 32]>()) {
        let key = KeyPair::from_seed(seed);
        let mut t = TrustStore::new();
        t.insert(key.trusted("k")).unwrap();
        let mut f = fields();
        f.insert("cas_fence_epoch".into(), json!(epoch));
        f.insert("t_req_ms".into(), json!(t_req));
        f.insert("t_granted_ms".into(), json!(t_req + extra + 1_000));
        let raw = serde_json::to_vec(&sign(f, &key)).unwrap();
        let v = verify(&raw, &t, &cx(facts(None))).unwrap();
        prop_assert_eq!(v.lease().cas_fence_epoch, epoch);
    }

    #[test]
    fn changing_any_field_value_breaks_the_signature(field in 0usize..10, n in any::<u64>()) {
        let lease = sign(fields(), &issuer());
        let mut m = lease.as_object().unwrap().clone();
        let before = m.clone();
        mutate(&mut m, field, n);
        prop_assume!(m != before);
        let err = verify(&serde_json::to_vec(&m).unwrap(), &trust(), &cx(None)).unwrap_err();
        prop_assert_eq!(err.code, ErrorCode::LeaseSignature);
    }

    #[test]
    fn changing_any_signature_byte_breaks_the_signature(byte in 0usize..64, flip in 1u8..=255) {
        let lease = sign(fields(), &issuer());
        let mut sig = URL_SAFE_NO_PAD.decode(lease["signature"]["sig"].as_str().unwrap()).unwrap();
        sig[byte] ^= flip;
        let mut m = lease.clone();
        m["signature"]["sig"] = json!(URL_SAFE_NO_PAD.encode(&sig));
        let err = verify(&serde_json::to_vec(&m).unwrap(), &trust(), &cx(None)).unwrap_err();
        prop_assert_eq!(err.code, ErrorCode::LeaseSignature);
    }

    #[test]
    fn arbitrary_headers_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        fuzz_decode_and_verify(&bytes);
    }
}
