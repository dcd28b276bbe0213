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

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::codes::{ErrorCode, Refusal};
use crate::digest::Sha256Digest;
use crate::json::{self, MAX_SAFE_INTEGER};
use crate::keys::{batch, KeyPair, TrustStore, TrustedKey};
use crate::{canon, target};

/// Upper bound on a decoded lease. Leases are a few hundred bytes; unknown members are allowed
/// but must not turn a header into a memory sink.
pub const MAX_LEASE_BYTES: usize = 16 * 1024;
/// Nesting allowed inside a lease (its unknown members may be objects).
pub const MAX_LEASE_DEPTH: usize = 16;
/// SPEC §5.1: `lease_id` is at most 128 bytes.
pub const MAX_LEASE_ID_BYTES: usize = 128;

/// The four recovery modes of PTCL §4 rule 3.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecoveryMode {
    CompensatingAction,
    SnapshotRestore,
    DryRunShadow,
    HumanEscrow,
}

impl RecoveryMode {
    pub const ALL: [RecoveryMode; 4] = [
        Self::CompensatingAction,
        Self::SnapshotRestore,
        Self::DryRunShadow,
        Self::HumanEscrow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::CompensatingAction => "COMPENSATING_ACTION",
            Self::SnapshotRestore => "SNAPSHOT_RESTORE",
            Self::DryRunShadow => "DRY_RUN_SHADOW",
            Self::HumanEscrow => "HUMAN_ESCROW",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|m| m.as_str() == s)
    }
}

/// `operational.reversibility` of the contract binding the operation (RICH §5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reversibility {
    Reversible,
    Compensable,
    Irreversible,
    Unknown,
}

impl Reversibility {
    /// Check 8. An `irreversible` operation accepts only modes that never let the write land
    /// unreviewed. `unknown` is treated as `irreversible`: without a statement that the write
    /// can be undone, claiming to undo it is not credible (fail closed; docs/decisions.md).
    pub fn allows(self, mode: RecoveryMode) -> bool {
        match self {
            Self::Reversible | Self::Compensable => true,
            Self::Irreversible | Self::Unknown => {
                matches!(mode, RecoveryMode::HumanEscrow | RecoveryMode::DryRunShadow)
            }
        }
    }
}

/// A lease that passed the form check (check 2). Fields as in SPEC §5.1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub lease_id: String,
    pub sor_target_uri: String,
    pub recovery_mode: RecoveryMode,
    pub t_req_ms: u64,
    pub t_granted_ms: u64,
    pub cas_fence_epoch: u64,
    pub pre_image_state_hash: Sha256Digest,
    pub inverse_payload_jcs_hash: Sha256Digest,
    pub trace_anchor_ref: Option<Sha256Digest>,
    /// `issued_at` as Unix milliseconds.
    pub issued_at_ms: Option<i64>,
    /// The caller the sidecar granted this lease to (SPEC §5.7), if any.
    pub agent_id: Option<String>,
    pub kid: String,
    sig: [u8; 64],
}

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

fn malformed(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::LeaseMalformed, detail)
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

fn str_field<'a>(o: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, Refusal> {
    match o.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(malformed_field(name, "must be a string")),
        None => Err(malformed_field(name, "is required")),
    }
}

fn malformed_field(name: &'static str, rule: &'static str) -> Refusal {
    Refusal::new(ErrorCode::LeaseMalformed, format!("{name} {rule}"))
}

fn int_field(o: &Map<String, Value>, name: &'static str, min: u64) -> Result<u64, Refusal> {
    let v = o
        .get(name)
        .ok_or_else(|| malformed_field(name, "is required"))?;
    let n = v
        .as_u64()
        .filter(|n| *n <= MAX_SAFE_INTEGER)
        .ok_or_else(|| malformed_field(name, "must be a non-negative integer within 2^53-1"))?;
    if n < min {
        return Err(malformed_field(
            name,
            if min == 1 {
                "must be at least 1"
            } else {
                "is below its minimum"
            },
        ));
    }
    Ok(n)
}

fn digest_field(o: &Map<String, Value>, name: &'static str) -> Result<Sha256Digest, Refusal> {
    Sha256Digest::parse_ptcl(str_field(o, name)?)
        .map_err(|_| malformed_field(name, "must be sha256: followed by 64 lowercase hex digits"))
}

/// Check 2: every field present with its type and form. Also returns the normalised target.
fn parse_form(o: &Map<String, Value>) -> Result<(Lease, String), Refusal> {
    if str_field(o, "ptcl_version")? != "1.0" {
        return Err(malformed_field("ptcl_version", "must be \"1.0\""));
    }
    let lease_id = str_field(o, "lease_id")?;
    if lease_id.is_empty() || lease_id.len() > MAX_LEASE_ID_BYTES {
        return Err(malformed_field("lease_id", "must be 1 to 128 bytes"));
    }
    let sor_target_uri = str_field(o, "sor_target_uri")?;
    let normalized_target = target::normalize(sor_target_uri)
        .map_err(|_| malformed_field("sor_target_uri", "must be an absolute http(s) URI"))?;
    let recovery_mode = RecoveryMode::parse(str_field(o, "recovery_mode")?)
        .ok_or_else(|| malformed_field("recovery_mode", "must be one of the four PTCL modes"))?;
    let t_req_ms = int_field(o, "t_req_ms", 0)?;
    let t_granted_ms = int_field(o, "t_granted_ms", 1)?;
    let cas_fence_epoch = int_field(o, "cas_fence_epoch", 1)?;
    let pre_image_state_hash = digest_field(o, "pre_image_state_hash")?;
    let inverse_payload_jcs_hash = digest_field(o, "inverse_payload_jcs_hash")?;
    let trace_anchor_ref = match o.get("trace_anchor_ref") {
        None => None,
        Some(_) => Some(digest_field(o, "trace_anchor_ref")?),
    };
    let issued_at_ms = match o.get("issued_at") {
        None => None,
        Some(_) => {
            let s = str_field(o, "issued_at")?;
            let t = OffsetDateTime::parse(s, &Rfc3339)
                .map_err(|_| malformed_field("issued_at", "must be an RFC 3339 timestamp"))?;
            Some((t.unix_timestamp_nanos() / 1_000_000) as i64)
        }
    };
    let agent_id = match o.get("agent_id") {
        None => None,
        Some(_) => Some(str_field(o, "agent_id")?.to_owned()),
    };

    let sig_obj = match o.get("signature") {
        Some(Value::Object(s)) => s,
        Some(_) => return Err(malformed_field("signature", "must be an object")),
        None => return Err(malformed_field("signature", "is required")),
    };
    if str_field(sig_obj, "alg")? != "Ed25519" {
        return Err(malformed_field("signature.alg", "must be \"Ed25519\""));
    }
    let kid = str_field(sig_obj, "kid")?;
    if Sha256Digest::parse_ptcl(kid).is_err() {
        return Err(malformed_field(
            "signature.kid",
            "must be sha256: followed by 64 lowercase hex digits",
        ));
    }
    let sig: [u8; 64] = URL_SAFE_NO_PAD
        .decode(str_field(sig_obj, "sig")?)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| {
            malformed_field("signature.sig", "must be 64 bytes of unpadded base64url")
        })?;

    let lease = Lease {
        lease_id: lease_id.to_owned(),
        sor_target_uri: sor_target_uri.to_owned(),
        recovery_mode,
        t_req_ms,
        t_granted_ms,
        cas_fence_epoch,
        pre_image_state_hash,
        inverse_payload_jcs_hash,
        trace_anchor_ref,
        issued_at_ms,
        agent_id,
        kid: kid.to_owned(),
        sig,
    };
    Ok((lease, normalized_target))
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
