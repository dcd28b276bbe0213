//! Ed25519 signatures verified in batches, with exactly the verdicts of
//! [`TrustedKey::verify`] (`verify_strict`) but for one case that only a key's holder can make
//! (issue 36; docs/decisions.md, "Leases verified in batches").
//!
//! A batch check (ed25519-dalek's `verify_batch`: one multiscalar multiplication for the whole
//! batch, with 128-bit coefficients drawn from a transcript of every input) costs about half a
//! single verification per signature. Where it could say yes when `verify_strict` says no:
//! - `R` encoded non-canonically (y ≥ p): the batch decodes it, `verify_strict` compares the
//!   encoding and refuses. Pre-checked here: such an item goes to `verify_strict` alone.
//! - `R` of small order: `verify_strict` refuses it outright. Pre-checked here the same way.
//! - A small-order public key: refused when the issuer is loaded ([`TrustedKey::from_bytes`]).
//! - A non-canonical `S`: the batch refuses it as `verify_strict` does.
//! - `[s]B − R − [k]A` a non-zero torsion point (a "torsioned" `R`): `verify_strict` refuses; a
//!   batch accepts with probability about 1/8, depending on every other item in it. Making
//!   such a signature needs the private key (the prime-order part must still verify), and its
//!   holder can sign any lease validly anyway, so the case grants nothing. It stays.
//!
//! A signature `verify_strict` accepts always passes a batch (each term of the batch equation is
//! zero), so a good lease is never refused because of another. A failed batch is checked item by
//! item with `verify_strict`: one bad lease delays the others by one batch, never refuses them.

use std::sync::LazyLock;

use curve25519_dalek::constants::EIGHT_TORSION;
use curve25519_dalek::edwards::CompressedEdwardsY;
use ed25519_dalek::{Signature, VerifyingKey};

use super::TrustedKey;

/// One signature to check.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    pub key: &'a TrustedKey,
    pub message: &'a [u8],
    pub signature: &'a [u8; 64],
}

/// Each item's verdict, in order: `true` exactly when [`TrustedKey::verify`] would say so (but
/// for the torsioned-`R` case in the module doc).
pub fn verify_each(items: &[Item<'_>]) -> Vec<bool> {
    let mut verdicts = vec![false; items.len()];
    // Items whose `R` the batch could judge differently go to `verify_strict` alone.
    let (batchable, alone): (Vec<usize>, Vec<usize>) =
        (0..items.len()).partition(|&i| r_is_batchable(items[i].signature));
    for i in alone {
        verdicts[i] = strict(&items[i]);
    }
    if batchable.len() == 1 {
        // A batch of one costs more than a single verification.
        verdicts[batchable[0]] = strict(&items[batchable[0]]);
    } else if !batchable.is_empty() {
        let messages: Vec<&[u8]> = batchable.iter().map(|&i| items[i].message).collect();
        let signatures: Vec<Signature> = batchable
            .iter()
            .map(|&i| Signature::from_bytes(items[i].signature))
            .collect();
        let keys: Vec<VerifyingKey> = batchable.iter().map(|&i| items[i].key.key).collect();
        if ed25519_dalek::verify_batch(&messages, &signatures, &keys).is_ok() {
            for i in batchable {
                verdicts[i] = true;
            }
        } else {
            for i in batchable {
                verdicts[i] = strict(&items[i]);
            }
        }
    }
    verdicts
}

fn strict(item: &Item<'_>) -> bool {
    item.key.verify(item.message, item.signature)
}

/// Every 32-byte encoding with a canonical y that decodes to a point of small order: the eight
/// points' own encodings, and for the two with x = 0 the encoding with the sign bit set too
/// (it decodes to the same point). Derived from curve25519-dalek's table, not written out.
static SMALL_ORDER_ENCODINGS: LazyLock<Vec<[u8; 32]>> = LazyLock::new(|| {
    let mut all = Vec::with_capacity(10);
    for point in EIGHT_TORSION {
        let canonical = point.compress().to_bytes();
        all.push(canonical);
        let mut flipped = canonical;
        flipped[31] ^= 0x80;
        if CompressedEdwardsY(flipped).decompress() == Some(point) {
            all.push(flipped);
        }
    }
    all
});

/// `R` (the signature's first 32 bytes) has a canonical y (< 2^255 − 19) and is not one of
/// the small-order encodings. A canonical y that is not on the curve fails the batch and then
/// `verify_strict`, as it should.
fn r_is_batchable(signature: &[u8; 64]) -> bool {
    let mut r = [0u8; 32];
    r.copy_from_slice(&signature[..32]);
    y_is_canonical(&r) && !SMALL_ORDER_ENCODINGS.contains(&r)
}

/// y (the encoding with its sign bit cleared, little-endian) is below p = 2^255 − 19. The
/// values from p to 2^255 − 1 are 0x7f·ff…ff·(ed..=ff) in big-endian order.
fn y_is_canonical(encoding: &[u8; 32]) -> bool {
    let top = encoding[31] & 0x7f;
    if top != 0x7f || encoding[1..31].iter().any(|b| *b != 0xff) {
        return true;
    }
    encoding[0] < 0xed
}

#[cfg(test)]
mod tests;
