//! The PTCL compensation lease (SPEC §5.1) and its verification (SPEC §5.2 checks 2–8).
//!
//! [`verify`] (or its steps: [`prepare`], [`check_signatures`] or
//! [`Unsigned::check_signature`], then [`Signed::finish`]) is the only way to obtain a
//! [`VerifiedLease`] but for [`grant`]; pipeline stages that need a lease accept nothing else,
//! so no write can reach the fence stage with an unchecked lease. The checks run in the
//! SPEC's order and stop at the first failure, so a lease that is wrong in two ways always
//! gets the same code.
//!
//! Time is an argument: the caller passes "now" in Unix milliseconds (the proxy reads a
//! monotonic clock anchored once at the wall clock) and, for leases without `issued_at`, the
//! time its store first saw the lease.

mod form;

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::canon;
use crate::codes::{ErrorCode, Refusal};
use crate::digest::Sha256Digest;
use crate::json;
use crate::keys::{batch, KeyPair, TrustStore, TrustedKey};
use form::{malformed, malformed_field, parse_form};
pub use form::{
    Lease, RecoveryMode, Reversibility, MAX_LEASE_BYTES, MAX_LEASE_DEPTH, MAX_LEASE_ID_BYTES,
};

/// Proof that a lease passed checks 2–6 (and 7–8 when request facts were given).
#[derive(Debug, Clone)]
pub struct VerifiedLease {
    lease: Lease,
    expires_at_ms: i64,
    /// SHA-256 of the JCS of the whole lease, signature included: names this exact lease in
    /// receipts and the store.
    digest: Sha256Digest,
    /// Private: only [`Signed::finish`] (after checks 2–4) and [`grant`] construct one.
    _proof: (),
}

impl VerifiedLease {
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms
    }

    pub fn digest(&self) -> Sha256Digest {
        self.digest
    }
}

/// What check 7 and check 8 compare the lease with.
#[derive(Debug, Clone, Copy)]
pub struct RequestFacts<'a> {
    /// The request's target, already normalised with [`target::normalize`].
    pub target: &'a str,
    /// The binding's reversibility; `None` for an unbound operation (no contract to consult).
    pub reversibility: Option<Reversibility>,
}

/// Everything besides the lease that verification depends on.
#[derive(Clone, Copy)]
pub struct VerifyContext<'a> {
    /// Now, in Unix milliseconds.
    pub now_ms: i64,
    /// `ptcl.max_clock_skew`.
    pub max_clock_skew_ms: i64,
    /// When this sidecar first saw a `lease_id` (leases without `issued_at` expire at first
    /// sight + `t_granted_ms`); asked only for such leases, after the signature checks.
    /// `None` means now: this is the first sight.
    pub first_seen: Option<&'a (dyn Fn(&str) -> i64 + Sync + 'a)>,
    /// `None` runs checks 2–6 only (`palisade lease verify`); the proxy always passes facts.
    pub request: Option<RequestFacts<'a>>,
}

/// Decodes an `Agent-Compensation-Lease` header value: raw JSON when it starts with `{`, else
/// base64url without padding (SPEC §5.1).
pub fn decode_header(value: &[u8]) -> Result<Cow<'_, [u8]>, Refusal> {
    let value = value.trim_ascii();
    if value.len() > MAX_LEASE_BYTES * 4 / 3 + 4 {
        return Err(malformed("lease header exceeds the size limit"));
    }
    if value.first() == Some(&b'{') {
        return Ok(Cow::Borrowed(value));
    }
    URL_SAFE_NO_PAD
        .decode(value)
        .map(Cow::Owned)
        .map_err(|_| malformed("lease header is neither JSON nor unpadded base64url"))
}

/// SPEC §5.2 checks 2–8, in order.
pub fn verify(
    raw: &[u8],
    trust: &TrustStore,
    cx: &VerifyContext<'_>,
) -> Result<VerifiedLease, Refusal> {
    prepare(raw, trust)?.check_signature()?.finish(cx)
}

/// A lease that passed checks 2–3 (well-formed, signed by a key this sidecar trusts) and whose
/// signature is still to be checked, alone ([`Unsigned::check_signature`]) or with others
/// ([`check_signatures`]). Owned, so it can wait in a batch.
pub struct Unsigned {
    lease: Lease,
    normalized_target: String,
    key: TrustedKey,
    /// The JCS of the whole lease, signature included.
    full: Vec<u8>,
    /// The JCS of every member but `signature`: what the signature covers (check 4).
    signing_input: Vec<u8>,
}

/// A lease whose signature verified (check 4); checks 5–8 remain ([`Signed::finish`]).
pub struct Signed {
    lease: Lease,
    normalized_target: String,
    full: Vec<u8>,
}

/// Checks 2–3.
pub fn prepare(raw: &[u8], trust: &TrustStore) -> Result<Unsigned, Refusal> {
    // Check 2: well-formed.
    if raw.len() > MAX_LEASE_BYTES {
        return Err(malformed("lease exceeds the size limit"));
    }
    let tree = json::parse_tree(raw, MAX_LEASE_DEPTH)
        .map_err(|_| malformed("lease is not valid I-JSON (RFC 7493)"))?;
    let json::Node::Object(members) = &tree else {
        return Err(malformed("lease must be a JSON object"));
    };
    let Value::Object(object) = tree.to_value() else {
        unreachable!("an object node converts to an object value")
    };
    let (lease, normalized_target) = parse_form(&object)?;

    // Check 3: the key is one we trust.
    let key = trust.get(&lease.kid).ok_or_else(|| {
        Refusal::new(
            ErrorCode::LeaseUntrustedKey,
            "signature.kid names no trusted key",
        )
    })?;

    // One pass writes the whole lease's JCS (its digest names the lease) and locates
    // `signature` in it; the signature covers the rest (check 4).
    let mut full = Vec::with_capacity(raw.len());
    let cut = canon::write_members_noting(&mut full, members, Some("signature"))
        .expect("parse_form found a signature member");
    let signing_input = canon::without(&full, cut);
    Ok(Unsigned {
        lease,
        normalized_target,
        key: key.clone(),
        full,
        signing_input,
    })
}

impl Unsigned {
    /// Check 4 alone (`verify_strict`).
    pub fn check_signature(self) -> Result<Signed, Refusal> {
        let ok = self.key.verify(&self.signing_input, &self.lease.sig);
        self.signed(ok)
    }

    fn signed(self, ok: bool) -> Result<Signed, Refusal> {
        if !ok {
            return Err(Refusal::new(
                ErrorCode::LeaseSignature,
                "signature does not verify over the JCS form of the lease",
            ));
        }
        Ok(Signed {
            lease: self.lease,
            normalized_target: self.normalized_target,
            full: self.full,
        })
    }
}

/// Check 4 for several leases at once, each with the verdict [`Unsigned::check_signature`]
/// gives (see [`crate::keys::batch`] for the one case that differs and why it may).
pub fn check_signatures(leases: Vec<Unsigned>) -> Vec<Result<Signed, Refusal>> {
    let verdicts = {
        let items: Vec<batch::Item<'_>> = leases
            .iter()
            .map(|u| batch::Item {
                key: &u.key,
                message: &u.signing_input,
                signature: &u.lease.sig,
            })
            .collect();
        batch::verify_each(&items)
    };
    leases
        .into_iter()
        .zip(verdicts)
        .map(|(u, ok)| u.signed(ok))
        .collect()
}

impl Signed {
    /// Checks 5–8.
    pub fn finish(self, cx: &VerifyContext<'_>) -> Result<VerifiedLease, Refusal> {
        let Signed {
            lease,
            normalized_target,
            full,
        } = self;
        // Check 5: the recovery window can be honoured.
        if lease.t_req_ms > lease.t_granted_ms {
            return Err(Refusal::new(
                ErrorCode::RecoveryWindow,
                "t_req_ms exceeds t_granted_ms",
            ));
        }

        // Check 6: not from the future, not expired.
        let start = match lease.issued_at_ms {
            Some(issued) => {
                if issued > cx.now_ms.saturating_add(cx.max_clock_skew_ms) {
                    return Err(Refusal::new(
                        ErrorCode::ClockSkew,
                        "issued_at is further in the future than max_clock_skew allows",
                    ));
                }
                issued
            }
            None => cx.first_seen.map_or(cx.now_ms, |f| f(&lease.lease_id)),
        };
        // t_granted_ms ≤ 2^53−1, so the sum cannot overflow an i64 for any sane start.
        let expires_at_ms = start.saturating_add(lease.t_granted_ms as i64);
        if cx.now_ms > expires_at_ms {
            return Err(Refusal::new(
                ErrorCode::LeaseExpired,
                "the lease's recovery window has passed",
            ));
        }

        if let Some(request) = cx.request {
            // Check 7: the lease names this request's target.
            if normalized_target != request.target {
                return Err(Refusal::new(
                    ErrorCode::TargetMismatch,
                    "sor_target_uri does not name the requested resource",
                ));
            }
            // Check 8: the contract allows the recovery mode.
            if let Some(rev) = request.reversibility {
                if !rev.allows(lease.recovery_mode) {
                    return Err(Refusal::new(
                        ErrorCode::RecoveryMode,
                        "recovery_mode is not allowed for an operation of this reversibility",
                    ));
                }
            }
        }

        let digest = Sha256Digest::of(&full);
        Ok(VerifiedLease {
            lease,
            expires_at_ms,
            digest,
            _proof: (),
        })
    }
}

/// A lease this sidecar grants in process (an RCNS step, issue 35): signed with `key` like
/// any lease it grants, and known valid without verifying that signature again, since it was
/// made here from `unsigned`. Its form is checked as check 2 does, and its recovery mode
/// against the operation's `reversibility` as check 8 does; it expires `t_granted_ms` after
/// its `issued_at`. The digest is that of the signed document, so a receipt names a lease
/// anyone can verify with the sidecar's public key.
pub fn grant(
    unsigned: Map<String, Value>,
    key: &KeyPair,
    reversibility: Option<Reversibility>,
) -> Result<VerifiedLease, Refusal> {
    let Value::Object(signed) = sign(unsigned, key) else {
        return Err(malformed("a granted lease must be a JSON object"));
    };
    let (lease, _) = parse_form(&signed)?;
    if lease.t_req_ms > lease.t_granted_ms {
        return Err(Refusal::new(
            ErrorCode::RecoveryWindow,
            "t_req_ms exceeds t_granted_ms",
        ));
    }
    let issued = lease
        .issued_at_ms
        .ok_or_else(|| malformed_field("issued_at", "is required of a granted lease"))?;
    if let Some(rev) = reversibility {
        if !rev.allows(lease.recovery_mode) {
            return Err(Refusal::new(
                ErrorCode::RecoveryMode,
                "recovery_mode is not allowed for an operation of this reversibility",
            ));
        }
    }
    let digest = Sha256Digest::of(&canon::to_vec(&Value::Object(signed)));
    Ok(VerifiedLease {
        expires_at_ms: issued.saturating_add(lease.t_granted_ms as i64),
        lease,
        digest,
        _proof: (),
    })
}

/// Signs `unsigned` (a lease object without `signature`) with `key` and returns the lease.
/// Any `signature` member already present is replaced.
pub fn sign(mut unsigned: Map<String, Value>, key: &KeyPair) -> Value {
    unsigned.remove("signature");
    let input = canon::to_vec(&Value::Object(unsigned.clone()));
    let sig = key.sign(&input);
    unsigned.insert(
        "signature".into(),
        serde_json::json!({
            "alg": "Ed25519",
            "kid": key.kid(),
            "sig": URL_SAFE_NO_PAD.encode(sig),
        }),
    );
    Value::Object(unsigned)
}

/// Formats Unix milliseconds as RFC 3339 UTC with millisecond precision.
pub fn format_rfc3339_ms(unix_ms: i64) -> String {
    let t = OffsetDateTime::from_unix_timestamp_nanos(unix_ms as i128 * 1_000_000)
        .unwrap_or(OffsetDateTime::UNIX_EPOCH);
    let mut s = t
        .format(&Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into());
    // `time` prints as many fraction digits as needed; fix three for stable receipts.
    if let Some(dot) = s.find('.') {
        let end = s.len() - 1; // 'Z'
        let frac = &s[dot + 1..end];
        let frac3 = format!("{frac:0<3}");
        s = format!("{}.{}Z", &s[..dot], &frac3[..3]);
    } else {
        s = format!("{}.000Z", &s[..s.len() - 1]);
    }
    s
}

#[doc(hidden)]
/// Fuzzing entry point: header decoding and verification must never panic.
pub fn fuzz_decode_and_verify(data: &[u8]) {
    let trust = TrustStore::new();
    let cx = VerifyContext {
        now_ms: 0,
        max_clock_skew_ms: 60_000,
        first_seen: None,
        request: Some(RequestFacts {
            target: "https://erp.example.com/x",
            reversibility: Some(Reversibility::Irreversible),
        }),
    };
    if let Ok(raw) = decode_header(data) {
        let _ = verify(&raw, &trust, &cx);
    }
    let _ = verify(data, &trust, &cx);
}

#[cfg(test)]
mod tests;
