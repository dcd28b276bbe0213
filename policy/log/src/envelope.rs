//! What a client receives for a receipt (SPEC §5.5): the entry, its index, its inclusion proof
//! and the checkpoint that covers it. A client verifies it alone with the log's verifier key:
//! the leaf hash of `JCS(receipt)`, the proof up to the checkpoint's root, the note's
//! signature.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::checkpoint::{self, Checkpoint, LogKey};
use super::error::LogError;
use super::merkle::{self, Hash};

/// A receipt as the client gets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Envelope {
    pub receipt: Value,
    pub index: u64,
    /// Base64 (RFC 4648 §4) of each hash of the inclusion proof.
    pub inclusion: Vec<String>,
    /// The signed note of the checkpoint the proof leads to.
    pub checkpoint: String,
}

/// Most bytes of an envelope read from outside.
pub const MAX_ENVELOPE: usize = 256 * 1024;

impl Envelope {
    /// Builds the envelope of entry `index` (its JCS `entry`), proven by `proof` in the tree of
    /// the signed `checkpoint`.
    pub fn new(
        entry: &[u8],
        index: u64,
        proof: &[Hash],
        checkpoint: String,
    ) -> Result<Self, LogError> {
        let receipt =
            serde_json::from_slice(entry).map_err(|e| LogError::Receipt(e.to_string()))?;
        Ok(Self {
            receipt,
            index,
            inclusion: merkle::encode_proof(proof),
            checkpoint,
        })
    }

    /// Reads an envelope as a client holds it: the `Agent-Commit-Receipt` value (base64url
    /// without padding) or its JSON.
    pub fn from_wire(text: &[u8]) -> Result<Self, LogError> {
        if text.len() > MAX_ENVELOPE {
            return Err(LogError::Receipt("larger than 256 KiB".into()));
        }
        let trimmed = text.trim_ascii();
        let json = if trimmed.first() == Some(&b'{') {
            trimmed.to_vec()
        } else {
            URL_SAFE_NO_PAD
                .decode(trimmed)
                .map_err(|_| LogError::Receipt("neither JSON nor base64url".into()))?
        };
        serde_json::from_slice(&json)
            .map_err(|e| LogError::Receipt(format!("not an envelope: {e}")))
    }

    /// The header value: base64url of the JSON, no padding.
    pub fn to_header(&self) -> String {
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default())
    }

    /// The entry's bytes: the receipt's JCS.
    pub fn entry(&self) -> Result<Vec<u8>, LogError> {
        let raw =
            serde_json::to_vec(&self.receipt).map_err(|e| LogError::Receipt(e.to_string()))?;
        palisade_core::canon::canonicalize(&raw, 64).map_err(|e| LogError::Receipt(e.to_string()))
    }

    /// Verifies the envelope under the log's key: the checkpoint's signature, then the entry's
    /// inclusion in its tree. The checkpoint, when all holds.
    pub fn verify(&self, key: &LogKey) -> Result<Checkpoint, LogError> {
        let opened = checkpoint::open(self.checkpoint.as_bytes(), key)?;
        let cp = opened.checkpoint;
        if self.index >= cp.size {
            return Err(LogError::IndexBeyondTree {
                index: self.index,
                size: cp.size,
            });
        }
        let proof = merkle::decode_proof(&self.inclusion)?;
        let leaf = merkle::leaf_hash(&self.entry()?);
        merkle::verify_inclusion(&proof, cp.size, cp.root, self.index, leaf)?;
        Ok(cp)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::merkle::MemoryHashes;
    use palisade_core::keys::KeyPair;

    #[test]
    fn an_envelope_verifies_and_each_tampering_names_what_failed() {
        let pair = KeyPair::from_seed([5; 32]);
        let key = LogKey::of_pair("log.example/palisade", &pair).unwrap();
        let mut log = MemoryHashes::default();
        let entries: Vec<Vec<u8>> = (0..7)
            .map(|i| {
                format!(
                    r#"{{"kind":"commit","receipt_id":"urn:uuid:{i}","receipt_version":"2.0"}}"#
                )
                .into_bytes()
            })
            .collect();
        for e in &entries {
            log.append(e).unwrap();
        }
        let cp = Checkpoint {
            origin: key.origin().into(),
            size: 7,
            root: merkle::root(7, &log).unwrap(),
        };
        let note = checkpoint::sign(&cp, &key, &pair).unwrap();
        let env = Envelope::new(
            &entries[3],
            3,
            &merkle::inclusion(3, 7, &log).unwrap(),
            note,
        )
        .unwrap();
        assert_eq!(env.verify(&key).unwrap(), cp);
        let wire = Envelope::from_wire(env.to_header().as_bytes()).unwrap();
        assert_eq!(wire.verify(&key).unwrap(), cp);

        let mut changed = env.clone();
        changed.receipt["kind"] = "rejection".into();
        assert!(matches!(
            changed.verify(&key),
            Err(LogError::Inclusion { index: 3 })
        ));
        let mut moved = env.clone();
        moved.index = 4;
        assert!(matches!(
            moved.verify(&key),
            Err(LogError::Inclusion { .. })
        ));
        let mut forged = env.clone();
        forged.checkpoint = forged.checkpoint.replacen("\n7\n", "\n8\n", 1);
        assert!(matches!(forged.verify(&key), Err(LogError::Signature(_))));
        let other = LogKey::of_pair("log.example/palisade", &KeyPair::from_seed([6; 32])).unwrap();
        assert!(matches!(env.verify(&other), Err(LogError::Signature(_))));
    }
}
