//! A lease's form (SPEC §5.1, check 2): the fields, their types and bounds, read strictly
//! from the parsed document; nothing here checks a signature or a time.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use crate::codes::{ErrorCode, Refusal};
use crate::digest::Sha256Digest;
use crate::json::MAX_SAFE_INTEGER;
use crate::target;

/// Upper bound on a decoded lease. Leases are a few hundred bytes; unknown members are allowed
/// but must not turn a header into a memory sink.
pub const MAX_LEASE_BYTES: usize = 16 * 1024;
/// Nesting allowed inside a lease (its unknown members may be objects).
pub const MAX_LEASE_DEPTH: usize = 16;
/// SPEC §5.1: `lease_id` is at most 128 bytes.
pub const MAX_LEASE_ID_BYTES: usize = 128;

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
    pub(super) sig: [u8; 64],
}

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

pub(super) fn malformed(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::LeaseMalformed, detail)
}

fn str_field<'a>(o: &'a Map<String, Value>, name: &'static str) -> Result<&'a str, Refusal> {
    match o.get(name) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(malformed_field(name, "must be a string")),
        None => Err(malformed_field(name, "is required")),
    }
}

pub(super) fn malformed_field(name: &'static str, rule: &'static str) -> Refusal {
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
pub(super) fn parse_form(o: &Map<String, Value>) -> Result<(Lease, String), Refusal> {
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
