#![allow(clippy::unwrap_used)]
//! RFC 8032 §7.1 and Project Wycheproof Ed25519 vectors, run through the same verification
//! code the proxy uses for leases and receipts (`TrustedKey::from_bytes` + `TrustedKey::verify`).

use std::path::PathBuf;

use palisade_policy::keys::{KeyPair, TrustedKey};
use serde_json::Value;

fn load(rel: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/ed25519")
        .join(rel);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn hex(v: &Value) -> Vec<u8> {
    hex::decode(v.as_str().unwrap()).unwrap()
}

/// Verification as the proxy does it: a key that is not a valid, non-weak point is refused
/// when loaded, and a signature that is not exactly 64 bytes never reaches `verify`.
fn accepted(pk: &[u8], msg: &[u8], sig: &[u8]) -> bool {
    let Ok(pk) = <[u8; 32]>::try_from(pk) else {
        return false;
    };
    let Ok(sig) = <[u8; 64]>::try_from(sig) else {
        return false;
    };
    match TrustedKey::from_bytes(&pk, "vector") {
        Ok(key) => key.verify(msg, &sig),
        Err(_) => false,
    }
}

#[test]
fn rfc8032_vectors_sign_and_verify() {
    let doc = load("rfc8032_7.1.json");
    let vectors = doc["vectors"].as_array().unwrap();
    assert_eq!(vectors.len(), 5);
    for v in vectors {
        let name = v["name"].as_str().unwrap();
        let seed: [u8; 32] = hex(&v["secret_key"]).try_into().unwrap();
        let msg = hex(&v["message"]);
        let key = KeyPair::from_seed(seed);
        assert_eq!(
            key.public().as_bytes().to_vec(),
            hex(&v["public_key"]),
            "{name}: public key"
        );
        assert_eq!(
            key.sign(&msg).to_vec(),
            hex(&v["signature"]),
            "{name}: signature"
        );
        assert!(
            accepted(&hex(&v["public_key"]), &msg, &hex(&v["signature"])),
            "{name}: verify"
        );
    }
}

fn run_wycheproof(file: &str, pk_of: impl Fn(&Value) -> &Value) -> (usize, usize) {
    let doc = load(file);
    let (mut valid, mut invalid) = (0, 0);
    for group in doc["testGroups"].as_array().unwrap() {
        let pk = hex(pk_of(group));
        for t in group["tests"].as_array().unwrap() {
            let id = &t["tcId"];
            let got = accepted(&pk, &hex(&t["msg"]), &hex(&t["sig"]));
            match t["result"].as_str().unwrap() {
                "valid" => {
                    assert!(got, "{file} tcId {id} ({}) must verify", t["comment"]);
                    valid += 1;
                }
                "invalid" => {
                    assert!(!got, "{file} tcId {id} ({}) must be refused", t["comment"]);
                    invalid += 1;
                }
                other => panic!("{file} tcId {id}: unexpected result {other}"),
            }
        }
    }
    (valid, invalid)
}

#[test]
fn wycheproof_v1_vectors_give_their_expected_result() {
    let counts = run_wycheproof("wycheproof/ed25519_test.json", |g| &g["publicKey"]["pk"]);
    assert_eq!(counts, (88, 63));
}

#[test]
fn wycheproof_legacy_vectors_give_their_expected_result() {
    let counts = run_wycheproof("wycheproof/eddsa_test.json", |g| &g["key"]["pk"]);
    assert_eq!(counts, (84, 61));
}

/// Every Wycheproof vector whose key loads and whose signature is 64 bytes, checked together
/// in batches (`keys::batch::verify_each`, issue 36) of every size from 2 to all of them: each
/// verdict is the vector's expected result, whatever else shares its batch.
#[test]
fn wycheproof_vectors_batched_give_their_expected_result() {
    use palisade_policy::keys::batch::{verify_each, Item};
    struct Case {
        key: TrustedKey,
        msg: Vec<u8>,
        sig: [u8; 64],
        valid: bool,
    }
    let mut cases = Vec::new();
    for (file, pk_of) in [
        ("wycheproof/ed25519_test.json", ["publicKey", "pk"]),
        ("wycheproof/eddsa_test.json", ["key", "pk"]),
    ] {
        let doc = load(file);
        for group in doc["testGroups"].as_array().unwrap() {
            let pk: Result<[u8; 32], _> = hex(&group[pk_of[0]][pk_of[1]]).try_into();
            let Some(key) = pk.ok().and_then(|pk| TrustedKey::from_bytes(&pk, "v").ok()) else {
                continue;
            };
            for t in group["tests"].as_array().unwrap() {
                let Ok(sig) = <[u8; 64]>::try_from(hex(&t["sig"])) else {
                    continue;
                };
                cases.push(Case {
                    key: key.clone(),
                    msg: hex(&t["msg"]),
                    sig,
                    valid: t["result"] == "valid",
                });
            }
        }
    }
    let (valid, invalid) = (
        cases.iter().filter(|c| c.valid).count(),
        cases.iter().filter(|c| !c.valid).count(),
    );
    assert!(
        valid > 150 && invalid > 50,
        "{valid} valid, {invalid} invalid"
    );
    for size in [2, 3, 7, 16, 64, cases.len()] {
        for chunk in cases.chunks(size) {
            let items: Vec<Item<'_>> = chunk
                .iter()
                .map(|c| Item {
                    key: &c.key,
                    message: &c.msg,
                    signature: &c.sig,
                })
                .collect();
            let want: Vec<bool> = chunk.iter().map(|c| c.valid).collect();
            assert_eq!(verify_each(&items), want, "batches of {size}");
        }
    }
}
