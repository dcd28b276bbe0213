#![allow(clippy::unwrap_used)]

use curve25519_dalek::constants::{ED25519_BASEPOINT_POINT, EIGHT_TORSION};
use curve25519_dalek::edwards::CompressedEdwardsY;
use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::SigningKey;
use sha2::{Digest as _, Sha512};

use super::*;
use crate::keys::{KeyPair, TrustedKey};

fn signer(n: u8) -> (KeyPair, TrustedKey) {
    let pair = KeyPair::from_seed([n; 32]);
    let trusted = TrustedKey::from_bytes(pair.public().as_bytes(), "test").unwrap();
    (pair, trusted)
}

/// A signature whose `R` carries the torsion point `t`: `[s]B − [k]A` is `R − t`, so
/// `verify_strict` refuses it, yet its prime-order part is right. Only a key's holder can make
/// one (`s` needs the secret scalar).
fn torsioned(seed: u8, message: &[u8], t: usize) -> [u8; 64] {
    let sk = SigningKey::from_bytes(&[seed; 32]);
    let a = sk.to_scalar();
    let public = sk.verifying_key();
    let r = Scalar::from_bytes_mod_order([seed.wrapping_add(7); 32]);
    let big_r = (ED25519_BASEPOINT_POINT * r + EIGHT_TORSION[t]).compress();
    let mut h = Sha512::new();
    h.update(big_r.as_bytes());
    h.update(public.as_bytes());
    h.update(message);
    let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
    let s = r + k * a;
    let mut sig = [0u8; 64];
    sig[..32].copy_from_slice(big_r.as_bytes());
    sig[32..].copy_from_slice(s.as_bytes());
    sig
}

#[test]
fn good_signatures_pass_in_one_batch_and_a_bad_one_is_found_alone() {
    let keys: Vec<_> = (1..=4).map(signer).collect();
    let messages: Vec<Vec<u8>> = (0..16).map(|i| format!("lease {i}").into_bytes()).collect();
    let mut sigs: Vec<[u8; 64]> = messages
        .iter()
        .enumerate()
        .map(|(i, m)| keys[i % 4].0.sign(m))
        .collect();
    let items = |sigs: &[[u8; 64]]| -> Vec<bool> {
        let items: Vec<Item<'_>> = (0..16)
            .map(|i| Item {
                key: &keys[i % 4].1,
                message: &messages[i],
                signature: &sigs[i],
            })
            .collect();
        verify_each(&items)
    };
    assert_eq!(items(&sigs), vec![true; 16]);
    // One flipped bit in one signature: only that item is refused.
    sigs[5][40] ^= 1;
    let mut want = vec![true; 16];
    want[5] = false;
    assert_eq!(items(&sigs), want);
    // A signature moved to another key's message.
    sigs[5] = keys[1].0.sign(&messages[6]);
    assert_eq!(items(&sigs), want);
}

#[test]
fn the_small_order_encodings_are_the_ten_that_decode_to_small_order_points() {
    let all = &*SMALL_ORDER_ENCODINGS;
    assert_eq!(
        all.len(),
        10,
        "8 points, 2 of them (x = 0) with a second encoding"
    );
    for enc in all {
        let point = CompressedEdwardsY(*enc).decompress().unwrap();
        assert!(point.is_small_order());
        assert!(y_is_canonical(enc));
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(enc);
        assert!(!r_is_batchable(&sig));
    }
}

#[test]
fn y_at_or_above_p_is_not_canonical() {
    let mut p = [0xffu8; 32];
    p[0] = 0xed;
    p[31] = 0x7f;
    assert!(!y_is_canonical(&p), "p itself");
    let mut below = p;
    below[0] = 0xec;
    assert!(y_is_canonical(&below), "p − 1");
    let mut top = [0xffu8; 32];
    assert!(!y_is_canonical(&top), "2^255 − 1 with the sign bit");
    top[31] = 0x7f;
    assert!(!y_is_canonical(&top), "2^255 − 1");
    let mut other = p;
    other[9] = 0xfe;
    assert!(y_is_canonical(&other));
    // p + 1 encodes y = 1 (the identity) non-canonically: never batched, and strict refuses.
    let mut p1 = p;
    p1[0] = 0xee;
    let (pair, key) = signer(3);
    let mut sig = pair.sign(b"m");
    sig[..32].copy_from_slice(&p1);
    assert!(!r_is_batchable(&sig));
    let good = pair.sign(b"n");
    let items = [
        Item {
            key: &key,
            message: b"m",
            signature: &sig,
        },
        Item {
            key: &key,
            message: b"n",
            signature: &good,
        },
    ];
    assert_eq!(verify_each(&items), vec![false, true]);
}

#[test]
fn a_torsioned_r_is_refused_alone_and_never_costs_a_good_signature() {
    let (pair, key) = signer(9);
    let bad = torsioned(9, b"torsioned", 1);
    assert!(!key.verify(b"torsioned", &bad), "verify_strict refuses it");
    assert!(
        r_is_batchable(&bad),
        "the pre-check cannot see it: this is the case that stays"
    );
    assert_eq!(
        verify_each(&[Item {
            key: &key,
            message: b"torsioned",
            signature: &bad
        }]),
        vec![false],
        "a batch of one is verify_strict"
    );
    let messages: Vec<Vec<u8>> = (0..64).map(|i| format!("good {i}").into_bytes()).collect();
    let goods: Vec<[u8; 64]> = messages.iter().map(|m| pair.sign(m)).collect();
    let mut accepted = 0;
    for i in 0..64 {
        let items = [
            Item {
                key: &key,
                message: b"torsioned",
                signature: &bad,
            },
            Item {
                key: &key,
                message: &messages[i],
                signature: &goods[i],
            },
        ];
        let verdicts = verify_each(&items);
        assert!(
            verdicts[1],
            "a good signature beside a torsioned one passes"
        );
        accepted += usize::from(verdicts[0]);
    }
    // About 1/8 of batches (the coefficient z must be ≡ 0 mod the torsion's order).
    assert!(
        accepted < 32,
        "torsioned R accepted in {accepted} of 64 batches"
    );
}

#[test]
fn an_empty_batch_has_no_verdicts() {
    assert!(verify_each(&[]).is_empty());
}
