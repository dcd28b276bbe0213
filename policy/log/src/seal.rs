//! Sealing a store batch's receipts into the log (SPEC §5.5): the batch's entries are
//! integrated ([`super::batch::integrate`]), one checkpoint is signed over the new tree, and
//! each receipt gets its envelope. Both stores call [`seal`] inside the batch's transaction
//! with the log's head as that transaction holds it, so the checkpoints they sign always
//! extend the last one (never two inconsistent ones).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::json;

use super::batch::{self, Integrated};
use super::checkpoint::{self, Checkpoint, LogKey};
use super::error::LogError;
use super::merkle::{self, Hash, HashReader};
use crate::receipt::{Entry, SealedReceipt};
use palisade_core::keys::KeyPair;

/// The sidecar's key as the log's signer: the verifier key (origin, key ID) and the pair.
pub struct Signer {
    key: LogKey,
    pair: Arc<KeyPair>,
}

impl Signer {
    /// The log `origin` signed with `pair`.
    pub fn new(origin: &str, pair: Arc<KeyPair>) -> Result<Self, LogError> {
        Ok(Self {
            key: LogKey::of_pair(origin, &pair)?,
            pair,
        })
    }

    /// The log's verifier key.
    pub fn key(&self) -> &LogKey {
        &self.key
    }

    /// The key pair (leases and v1 receipts are signed with it too).
    pub fn pair(&self) -> &Arc<KeyPair> {
        &self.pair
    }

    /// The signed checkpoint of the tree of `size` entries with `root`.
    pub fn sign(&self, size: u64, root: Hash) -> Result<String, LogError> {
        let cp = Checkpoint {
            origin: self.key.origin().to_owned(),
            size,
            root,
        };
        checkpoint::sign(&cp, &self.key, &self.pair)
    }

    /// The checkpoint of the empty log (SPEC §9: an empty log serves a size-0 checkpoint).
    pub fn empty(&self) -> Result<Head, LogError> {
        Ok(Head {
            size: 0,
            note: self.sign(0, merkle::EMPTY_HASH)?,
        })
    }
}

/// The log's newest checkpoint as a store keeps it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Head {
    pub size: u64,
    /// The signed note.
    pub note: String,
}

impl Head {
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, LogError> {
        serde_json::from_slice(bytes).map_err(|e| LogError::Checkpoint(e.to_string()))
    }
}

/// What a sealed batch leaves to store and to answer.
#[derive(Debug)]
pub struct Sealed {
    /// The new stored hashes, by stored-hash index.
    pub hashes: BTreeMap<u64, Hash>,
    /// The new head: its size and the one checkpoint signed for the batch.
    pub head: Head,
    /// Each entry's receipt with its envelope, in the batch's order.
    pub receipts: Vec<SealedReceipt>,
}

/// Appends `entries` to the log of `size` entries whose stored hashes `stored` reads (the
/// frontier of the tree of `size` is all it needs: [`batch::frontier`]), signs one checkpoint
/// over the new tree, and gives each entry its envelope.
pub fn seal<R: HashReader>(
    size: u64,
    stored: &R,
    entries: Vec<Entry>,
    signer: &Signer,
) -> Result<Sealed, LogError> {
    let bytes: Vec<&[u8]> = entries.iter().map(|e| e.jcs.as_slice()).collect();
    let Integrated {
        hashes,
        size: new_size,
        root,
        proofs,
    } = batch::integrate(size, stored, &bytes)?;
    let note = signer.sign(new_size, root)?;
    let receipts = entries
        .into_iter()
        .zip(proofs)
        .map(|(entry, (index, proof))| {
            let value = json!({
                "receipt": entry.value,
                "index": index,
                "inclusion": merkle::encode_proof(&proof),
                "checkpoint": note,
            });
            SealedReceipt {
                value,
                index,
                entry: entry.jcs,
            }
        })
        .collect();
    Ok(Sealed {
        hashes,
        head: Head {
            size: new_size,
            note,
        },
        receipts,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::batch::frontier;
    use crate::merkle::Fetched;
    use crate::receipt::{ReceiptBody, ReceiptKind};
    use crate::Envelope;

    fn entry(i: u64) -> Entry {
        crate::receipt::entry(&ReceiptBody {
            cas_fence_epoch: Some(i),
            ..ReceiptBody::new(
                format!("urn:uuid:{i}"),
                ReceiptKind::Commit,
                "2026-12-06T00:00:00.000Z".into(),
            )
        })
        .unwrap()
    }

    #[test]
    fn every_envelope_of_every_batch_verifies_under_the_log_key_from_the_frontier_alone() {
        let signer = Signer::new(
            "example.com/palisade",
            Arc::new(KeyPair::from_seed([3; 32])),
        )
        .unwrap();
        let mut table: BTreeMap<u64, Hash> = BTreeMap::new();
        let mut size = 0;
        let mut notes = Vec::new();
        for k in 1..=20u64 {
            // Only the frontier is handed in: a store reads nothing else.
            let front: Fetched = frontier(size).into_iter().map(|i| (i, table[&i])).collect();
            let batch: Vec<Entry> = (size..size + k).map(entry).collect();
            let sealed = seal(size, &front, batch, &signer).unwrap();
            assert_eq!(sealed.head.size, size + k);
            for r in &sealed.receipts {
                let env: Envelope = serde_json::from_value(r.value.clone()).unwrap();
                let cp = env.verify(signer.key()).unwrap();
                assert_eq!(cp.size, size + k);
                assert_eq!(env.entry().unwrap(), r.entry);
            }
            table.extend(sealed.hashes);
            size = sealed.head.size;
            notes.push(sealed.head.note);
        }
        assert_eq!(frontier(size).len() as u32, size.count_ones());
        assert_eq!(notes.len(), 20, "one checkpoint per batch");
    }
}
