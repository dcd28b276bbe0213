//! Keys and leases from the command line: `keygen`, `lease sign`, `lease verify`.

use std::path::Path;

use palisade_policy::digest::Sha256Digest;
use palisade_policy::json;
use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease::{self, RecoveryMode, VerifyContext};
use serde_json::{json, Value};

use crate::clock::WallClock;

use super::failure::Failure;
use super::stdin::{read_stdin, MAX_DEPTH};

/// A new Ed25519 key from the OS's randomness.
pub(crate) fn fresh_key() -> KeyPair {
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut seed);
    KeyPair::from_seed(seed)
}

pub(super) fn keygen(out: &Path) -> Result<(), Failure> {
    let key = fresh_key();
    crate::fs::write_private_file(out, key.to_pkcs8_pem().as_bytes())
        .map_err(|e| Failure::usage(format!("{}: {e}", out.display())))?;
    // The issuer-file entry form: paste it into `trust.issuers` of a sidecar that should
    // accept leases signed with this key.
    println!(
        "{}",
        json!({"kid": key.kid(), "public_key": key.public_b64(), "name": out.file_stem().and_then(|s| s.to_str()).unwrap_or("key")})
    );
    Ok(())
}

pub(crate) fn read_key(path: &Path) -> Result<KeyPair, Failure> {
    let pem = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", path.display())))?;
    KeyPair::from_pkcs8_pem(&pem).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

pub(super) fn read_trust(path: &Path) -> Result<TrustStore, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", path.display())))?;
    let mut trust = TrustStore::new();
    trust
        .extend_from_issuers_json(&bytes)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    Ok(trust)
}

/// What `palisade lease sign` is given.
pub(super) struct LeaseSign<'a> {
    pub key: &'a Path,
    pub target: &'a str,
    pub epoch: u64,
    pub pre_image: &'a str,
    pub inverse: &'a Path,
    pub mode: &'a str,
    pub t_req: u64,
    pub t_granted: u64,
}

pub(super) fn lease_sign(args: LeaseSign<'_>) -> Result<(), Failure> {
    let LeaseSign {
        key,
        target,
        epoch,
        pre_image,
        inverse,
        mode,
        t_req,
        t_granted,
    } = args;
    let key = read_key(key)?;
    let mode = RecoveryMode::parse(mode).ok_or_else(|| {
        Failure::usage(
            "--mode: must be COMPENSATING_ACTION, SNAPSHOT_RESTORE, DRY_RUN_SHADOW or HUMAN_ESCROW",
        )
    })?;
    let pre_image = Sha256Digest::parse_ptcl(pre_image)
        .map_err(|e| Failure::usage(format!("--pre-image: {e}")))?;
    if palisade_policy::target::normalize(target).is_err() {
        return Err(Failure::usage("--target: must be an absolute http(s) URI"));
    }
    let inverse_bytes = std::fs::read(inverse)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", inverse.display())))?;
    let inverse_value = json::parse(&inverse_bytes, MAX_DEPTH)
        .map_err(|e| Failure::usage(format!("{}: {e}", inverse.display())))?;
    let now = WallClock::now_ms();
    let unsigned = json!({
        "ptcl_version": "1.0",
        "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        "sor_target_uri": target,
        "recovery_mode": mode.as_str(),
        "t_req_ms": t_req,
        "t_granted_ms": t_granted,
        "cas_fence_epoch": epoch,
        "pre_image_state_hash": pre_image.to_string(),
        "inverse_payload_jcs_hash": Sha256Digest::of_json(&inverse_value).to_string(),
        "issued_at": lease::format_rfc3339_ms(now),
    });
    let Value::Object(map) = unsigned else {
        unreachable!("a json! object literal is an object")
    };
    println!("{}", lease::sign(map, &key));
    Ok(())
}

pub(super) fn lease_verify(trust: &Path, max_clock_skew_ms: i64) -> Result<(), Failure> {
    let trust = read_trust(trust)?;
    let input = read_stdin()?;
    let raw = lease::decode_header(&input).map_err(|r| {
        println!("{}", r.code);
        Failure::refused(format!("{}: {}", r.code, r.detail))
    })?;
    let cx = VerifyContext {
        now_ms: WallClock::now_ms(),
        max_clock_skew_ms,
        first_seen: None,
        request: None,
    };
    match lease::verify(&raw, &trust, &cx) {
        Ok(v) => {
            println!(
                "ok {} epoch {} expires {}",
                v.lease().lease_id,
                v.lease().cas_fence_epoch,
                lease::format_rfc3339_ms(v.expires_at_ms())
            );
            Ok(())
        }
        Err(r) => {
            // The code alone on stdout for scripts; the reason on stderr for people.
            println!("{}", r.code);
            Err(Failure {
                code: 1,
                lines: vec![format!("{}: {}", r.code, r.detail)],
            })
        }
    }
}
