//! Witnesses (C2SP tlog-witness, tlog-cosignature v1): the `add-checkpoint` request a log
//! sends, the decision a witness makes on it, and the timestamped Ed25519 cosignature it
//! returns. Pure; the sidecar's submitter and `palisade witness` do the I/O.
//!
//! ```text
//! request  = "old <size>\n" *("<base64 hash>\n") "\n" <signed checkpoint>
//! signed   = "cosignature/v1\n" "time <t>\n" <checkpoint body>
//! line     = "— <witness name> " base64(key ID ‖ u64be t ‖ Ed25519 signature) "\n"
//! ```

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::checkpoint::{self, Checkpoint, LogKey, WitnessKey};
use super::error::LogError;
use super::merkle::{self, Hash};
use palisade_core::keys::{KeyPair, TrustedKey};

/// Most consistency-proof lines a request may carry (C2SP tlog-witness).
pub const MAX_PROOF_LINES: usize = 63;
/// Most bytes of an `add-checkpoint` body a witness reads.
pub const MAX_REQUEST: usize = 64 * 1024;

/// An `add-checkpoint` request.
#[derive(Debug, Clone, PartialEq)]
pub struct AddCheckpoint {
    pub old: u64,
    pub proof: Vec<Hash>,
    /// The signed checkpoint, as sent.
    pub checkpoint: String,
}

impl AddCheckpoint {
    pub fn to_body(&self) -> String {
        let mut out = format!("old {}\n", self.old);
        for h in &self.proof {
            out.push_str(&STANDARD.encode(h.0));
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&self.checkpoint);
        out
    }

    /// Reads a request body strictly: the old size (decimal, no leading zeros), at most 63
    /// proof lines, an empty line, the checkpoint.
    pub fn parse(body: &[u8]) -> Result<Self, String> {
        if body.len() > MAX_REQUEST {
            return Err("the request is larger than 64 KiB".into());
        }
        let text = std::str::from_utf8(body).map_err(|_| "the request is not UTF-8")?;
        let (head, checkpoint) = text
            .split_once("\n\n")
            .ok_or("no empty line before the checkpoint")?;
        let mut lines = head.split('\n');
        let old = lines
            .next()
            .and_then(|l| l.strip_prefix("old "))
            .ok_or("the first line is not `old <size>`")?;
        if old.is_empty()
            || !old.bytes().all(|b| b.is_ascii_digit())
            || (old.len() > 1 && old.starts_with('0'))
        {
            return Err("the old size is not a decimal without leading zeros".into());
        }
        let old: u64 = old.parse().map_err(|_| "the old size is out of range")?;
        let proof = lines
            .map(|l| merkle::decode_hash(l).map_err(|e| format!("a proof line: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        if proof.len() > MAX_PROOF_LINES {
            return Err("more than 63 proof lines".into());
        }
        Ok(Self {
            old,
            proof,
            checkpoint: checkpoint.to_owned(),
        })
    }
}

/// What a witness answers, besides a cosignature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("400: {0}")]
    BadRequest(String),
    #[error("403: no signature by the log's key verifies")]
    Forbidden,
    #[error("409: the witness's latest checkpoint for this log has size {0}")]
    Conflict(u64),
    #[error("409: a checkpoint of the same size with another root")]
    Fork,
    #[error("422: the consistency proof does not verify")]
    Inconsistent,
}

/// A witness's decision on `req` for the log `key`, given the latest checkpoint it cosigned
/// for that log (`None`: never). The checkpoint to record and cosign, when it passes.
pub fn decide(
    req: &AddCheckpoint,
    key: &LogKey,
    latest: Option<&Checkpoint>,
) -> Result<Checkpoint, Refused> {
    let new = checkpoint::open(req.checkpoint.as_bytes(), key)
        .map_err(|_| Refused::Forbidden)?
        .checkpoint;
    if req.old > new.size {
        return Err(Refused::BadRequest(
            "the old size is beyond the checkpoint's".into(),
        ));
    }
    let latest_size = latest.map_or(0, |c| c.size);
    if req.old != latest_size {
        return Err(Refused::Conflict(latest_size));
    }
    match latest {
        None => {
            if !req.proof.is_empty() {
                return Err(Refused::Inconsistent);
            }
        }
        Some(old) if old.size == new.size => {
            if old.root != new.root {
                return Err(Refused::Fork);
            }
        }
        Some(old) => {
            merkle::verify_consistency(&req.proof, old.size, old.root, new.size, new.root)
                .map_err(|_| Refused::Inconsistent)?;
        }
    }
    Ok(new)
}

/// The message a v1 cosignature signs.
fn signed_message(body: &str, timestamp: u64) -> Vec<u8> {
    format!("cosignature/v1\ntime {timestamp}\n{body}").into_bytes()
}

/// A witness's signing key under its name.
pub struct Cosigner {
    pub key: WitnessKey,
    pair: KeyPair,
}

impl Cosigner {
    pub fn new(name: &str, pair: KeyPair) -> Result<Self, LogError> {
        let raw = pair.public().to_bytes();
        let mut typed = vec![0x04];
        typed.extend_from_slice(&raw);
        let vkey = format!(
            "{name}+{:08x}+{}",
            signed_note::key_id(name, &typed),
            STANDARD.encode(&typed)
        );
        Ok(Self {
            key: WitnessKey::parse(&vkey)?,
            pair,
        })
    }

    /// The verifier key (`<name>+<hex id>+<base64(0x04 ‖ key)>`).
    pub fn vkey(&self) -> String {
        let mut typed = vec![0x04];
        typed.extend_from_slice(&self.key.key);
        format!(
            "{}+{:08x}+{}",
            self.key.name,
            self.key.id,
            STANDARD.encode(typed)
        )
    }

    /// The cosignature line over `checkpoint` at `timestamp` (POSIX seconds).
    pub fn cosign(&self, checkpoint: &Checkpoint, timestamp: u64) -> String {
        let sig = self
            .pair
            .sign(&signed_message(&checkpoint.body(), timestamp));
        let mut raw = self.key.id.to_be_bytes().to_vec();
        raw.extend_from_slice(&timestamp.to_be_bytes());
        raw.extend_from_slice(&sig);
        format!("\u{2014} {} {}\n", self.key.name, STANDARD.encode(raw))
    }
}

/// Checks one signature line as `key`'s cosignature over `checkpoint`: its timestamp.
pub fn verify_cosignature(
    key: &WitnessKey,
    checkpoint: &Checkpoint,
    line: &str,
) -> Result<u64, String> {
    let rest = line
        .strip_suffix('\n')
        .unwrap_or(line)
        .strip_prefix("\u{2014} ")
        .ok_or("not a signature line")?;
    let (name, sig) = rest.split_once(' ').ok_or("no signature")?;
    if name != key.name {
        return Err(format!("signed by {name:?}, not {:?}", key.name));
    }
    let raw = STANDARD
        .decode(sig)
        .map_err(|_| "the signature is not base64")?;
    if raw.len() != 4 + 8 + 64 || raw[..4] != key.id.to_be_bytes() {
        return Err("not a v1 cosignature by this key".into());
    }
    let mut ts = [0u8; 8];
    ts.copy_from_slice(&raw[4..12]);
    let timestamp = u64::from_be_bytes(ts);
    let mut s = [0u8; 64];
    s.copy_from_slice(&raw[12..]);
    let trusted = TrustedKey::from_bytes(&key.key, &key.name).map_err(|e| e.to_string())?;
    if !trusted.verify(&signed_message(&checkpoint.body(), timestamp), &s) {
        return Err("the cosignature does not verify".into());
    }
    Ok(timestamp)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::merkle::MemoryHashes;
    use crate::seal::Signer;

    fn log_of(n: u64) -> MemoryHashes {
        let mut m = MemoryHashes::default();
        for i in 0..n {
            m.append(format!("{{\"n\":{i}}}").as_bytes()).unwrap();
        }
        m
    }

    #[test]
    fn a_witness_follows_a_growing_log_and_refuses_what_the_protocol_says() {
        let signer = Signer::new(
            "log.example/palisade",
            Arc::new(KeyPair::from_seed([1; 32])),
        )
        .unwrap();
        let log = log_of(20);
        let note = |n: u64| signer.sign(n, merkle::root(n, &log).unwrap()).unwrap();
        let key = signer.key();
        // First contact: old 0, no proof.
        let first = AddCheckpoint {
            old: 0,
            proof: vec![],
            checkpoint: note(5),
        };
        assert_eq!(
            AddCheckpoint::parse(first.to_body().as_bytes()).unwrap(),
            first
        );
        let cp5 = decide(&first, key, None).unwrap();
        // Then with a consistency proof from 5.
        let next = AddCheckpoint {
            old: 5,
            proof: merkle::consistency(5, 12, &log).unwrap(),
            checkpoint: note(12),
        };
        let cp12 = decide(&next, key, Some(&cp5)).unwrap();
        assert_eq!(cp12.size, 12);
        // A stale old size: 409 naming the latest.
        assert_eq!(decide(&next, key, Some(&cp12)), Err(Refused::Conflict(12)));
        // A proof that does not lead there.
        let mut bad = next.clone();
        bad.proof[0] = Hash([9; 32]);
        assert_eq!(decide(&bad, key, Some(&cp5)), Err(Refused::Inconsistent));
        // Another key's checkpoint.
        let other = Signer::new(
            "log.example/palisade",
            Arc::new(KeyPair::from_seed([2; 32])),
        )
        .unwrap();
        let forged = AddCheckpoint {
            old: 0,
            proof: vec![],
            checkpoint: other.sign(3, Hash([1; 32])).unwrap(),
        };
        assert_eq!(decide(&forged, key, None), Err(Refused::Forbidden));
        // The same size with another root: a fork.
        let fork = AddCheckpoint {
            old: 12,
            proof: vec![],
            checkpoint: signer.sign(12, Hash([3; 32])).unwrap(),
        };
        assert_eq!(decide(&fork, key, Some(&cp12)), Err(Refused::Fork));
        // An old size beyond the checkpoint.
        let back = AddCheckpoint {
            old: 13,
            proof: vec![],
            checkpoint: note(12),
        };
        assert!(matches!(
            decide(&back, key, Some(&cp12)),
            Err(Refused::BadRequest(_))
        ));
        // Strict parsing.
        for body in [
            "old 05\n\nx",
            "old 5\nnot-base64\n\nx",
            "old 5\nx",
            "new 5\n\nx",
        ] {
            assert!(AddCheckpoint::parse(body.as_bytes()).is_err(), "{body}");
        }
    }

    #[test]
    fn a_cosignature_verifies_under_its_key_only() {
        let w = Cosigner::new("witness.example/w1", KeyPair::from_seed([4; 32])).unwrap();
        assert_eq!(WitnessKey::parse(&w.vkey()).unwrap(), w.key);
        let cp = Checkpoint {
            origin: "log.example/palisade".into(),
            size: 7,
            root: Hash([5; 32]),
        };
        let line = w.cosign(&cp, 1_796_400_000);
        assert_eq!(verify_cosignature(&w.key, &cp, &line), Ok(1_796_400_000));
        let other = Checkpoint {
            size: 8,
            ..cp.clone()
        };
        assert!(verify_cosignature(&w.key, &other, &line).is_err());
        let stranger = Cosigner::new("witness.example/w1", KeyPair::from_seed([5; 32])).unwrap();
        assert!(verify_cosignature(&stranger.key, &cp, &line).is_err());
    }

    #[test]
    fn a_cosigned_checkpoint_still_opens_under_the_log_key() {
        let signer = Signer::new(
            "log.example/palisade",
            Arc::new(KeyPair::from_seed([1; 32])),
        )
        .unwrap();
        let note = signer.sign(7, Hash([5; 32])).unwrap();
        let w = Cosigner::new("witness.example/w1", KeyPair::from_seed([4; 32])).unwrap();
        let cp = checkpoint::open(note.as_bytes(), signer.key())
            .unwrap()
            .checkpoint;
        let served = note.clone() + &w.cosign(&cp, 1_796_400_000);
        let opened = checkpoint::open(served.as_bytes(), signer.key()).unwrap();
        assert_eq!(opened.checkpoint, cp);
        assert_eq!(
            opened.others.len(),
            1,
            "the cosignature, unverified by the log key"
        );
    }
}
