//! Auditing a whole log (SPEC §1 `audit verify`): from its stored hashes (read from the store,
//! or from hash tiles) and its retained entries, check that every stored hash is what the
//! leaves make, that each retained entry is its leaf, and that the newest checkpoint is signed
//! by the log's key over exactly that tree; and, given an older checkpoint, that today's tree
//! extends it. Each failure names the entry, stored hash or checkpoint at fault.

use std::cell::RefCell;

use super::checkpoint::{self, Checkpoint, LogKey};
use super::error::LogError;
use super::merkle::{self, Fetched, Hash, HashReader, MemoryHashes};

/// What a verified log is.
#[derive(Debug, Clone)]
pub struct Audited {
    pub size: u64,
    pub root: Hash,
    /// Entries retained (the others left under `store.receipt_retention`; their leaves are
    /// still in the tree).
    pub retained: u64,
    /// The tree, rebuilt: for `--since` and for proofs.
    pub hashes: MemoryHashes,
}

/// Why a log does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuditError {
    #[error("the newest checkpoint: {0}")]
    Checkpoint(LogError),
    #[error("entry {index}: its leaf hash is not the tree's (the entry or the tree was changed)")]
    Entry { index: u64 },
    #[error("entry {index} is beyond the checkpoint's tree of size {size}")]
    EntryBeyond { index: u64, size: u64 },
    #[error(
        "stored hash {index} (level {level}, node {node}) is not what the leaves below it make"
    )]
    StoredHash { index: u64, level: u8, node: u64 },
    #[error("the log has {found} stored hashes; a tree of {size} entries has {expected}")]
    HashCount {
        size: u64,
        expected: u64,
        found: u64,
    },
    #[error("the stored tree's root is not the root the newest checkpoint signed")]
    Root,
    #[error("the checkpoint given: {0}")]
    Since(LogError),
    #[error("today's tree of size {size} does not extend the checkpoint given (size {old})")]
    NotExtending { old: u64, size: u64 },
}

/// Verifies a log of the newest checkpoint `note` under `key`. `hashes` are every stored hash
/// of its tree in index order (`stored_hash_count(size)` of them); `entries` the retained ones,
/// `(index, bytes)`.
pub fn verify_log<'a>(
    note: &[u8],
    key: &LogKey,
    hashes: &[Hash],
    entries: impl IntoIterator<Item = (u64, &'a [u8])>,
) -> Result<Audited, AuditError> {
    let cp = checkpoint::open(note, key)
        .map_err(AuditError::Checkpoint)?
        .checkpoint;
    let expected = merkle::stored_hash_count(cp.size);
    if hashes.len() as u64 != expected {
        return Err(AuditError::HashCount {
            size: cp.size,
            expected,
            found: hashes.len() as u64,
        });
    }
    // Rebuild the tree from the leaves; every stored hash must be the rebuilt one.
    let mut rebuilt = MemoryHashes::default();
    for i in 0..cp.size {
        let at = merkle::stored_hash_index(0, i);
        rebuilt
            .append_leaf(hashes[at as usize])
            .map_err(AuditError::Checkpoint)?;
    }
    for (index, h) in hashes.iter().enumerate() {
        if rebuilt.get(index as u64) != Some(*h) {
            let (level, node) = tlog_tiles::split_stored_hash_index(index as u64);
            return Err(AuditError::StoredHash {
                index: index as u64,
                level,
                node,
            });
        }
    }
    let mut retained = 0;
    for (index, entry) in entries {
        if index >= cp.size {
            return Err(AuditError::EntryBeyond {
                index,
                size: cp.size,
            });
        }
        if hashes[merkle::stored_hash_index(0, index) as usize] != merkle::leaf_hash(entry) {
            return Err(AuditError::Entry { index });
        }
        retained += 1;
    }
    let root = merkle::root(cp.size, &rebuilt).map_err(AuditError::Checkpoint)?;
    if root != cp.root {
        return Err(AuditError::Root);
    }
    Ok(Audited {
        size: cp.size,
        root,
        retained,
        hashes: rebuilt,
    })
}

/// Checks that the audited tree extends the older checkpoint `note` (signed by `key`): its
/// tree is a prefix of today's (RFC 9162 §2.1.4, checked directly on the rebuilt tree).
pub fn verify_extends(
    audited: &Audited,
    note: &[u8],
    key: &LogKey,
) -> Result<Checkpoint, AuditError> {
    let old = checkpoint::open(note, key)
        .map_err(AuditError::Since)?
        .checkpoint;
    let not_extending = || AuditError::NotExtending {
        old: old.size,
        size: audited.size,
    };
    if old.size > audited.size {
        return Err(not_extending());
    }
    let root = merkle::root(old.size, &audited.hashes).map_err(|_| not_extending())?;
    if root != old.root {
        return Err(not_extending());
    }
    Ok(old)
}

/// A reader for stores that read asynchronously. Which stored hashes a proof or a tile needs
/// depends only on sizes and indexes, never on hash values; so a computation is run once over
/// a [`Prefetch::recording`] reader (which notes what is asked and answers zeros), the store
/// fetches [`Prefetch::asked`], and the computation runs again over
/// [`Prefetch::answering`] with what was fetched.
#[derive(Default)]
pub struct Prefetch {
    recording: bool,
    asked: RefCell<Vec<u64>>,
    known: Fetched,
}

impl Prefetch {
    pub fn recording() -> Self {
        Self {
            recording: true,
            ..Self::default()
        }
    }

    /// The indexes asked while recording, sorted, once each.
    pub fn asked(self) -> Vec<u64> {
        let mut wanted = self.asked.into_inner();
        wanted.sort_unstable();
        wanted.dedup();
        wanted
    }

    /// A reader over fetched `(index, hash)` pairs; any other index is an error.
    pub fn answering(pairs: impl IntoIterator<Item = (u64, Hash)>) -> Self {
        Self {
            known: pairs.into_iter().collect(),
            ..Self::default()
        }
    }
}

impl HashReader for Prefetch {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        if self.recording {
            self.asked.borrow_mut().extend_from_slice(indexes);
            return Ok(vec![Hash([0; 32]); indexes.len()]);
        }
        self.known.read_hashes(indexes)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::Arc;

    use super::*;
    use crate::batch::frontier;
    use crate::receipt::{entry, ReceiptBody, ReceiptKind};
    use crate::seal::{seal, Signer};
    use palisade_core::keys::KeyPair;
    use std::collections::BTreeMap;

    struct Log {
        signer: Signer,
        hashes: Vec<Hash>,
        entries: Vec<Vec<u8>>,
        notes: Vec<String>,
    }

    fn log(n: u64) -> Log {
        let signer = Signer::new(
            "audit.example/palisade",
            Arc::new(KeyPair::from_seed([5; 32])),
        )
        .unwrap();
        let mut table = BTreeMap::new();
        let (mut entries, mut notes) = (Vec::new(), Vec::new());
        let mut size = 0;
        while size < n {
            let k = (n - size).min(3);
            let batch = (size..size + k)
                .map(|i| {
                    entry(&ReceiptBody::new(
                        format!("urn:uuid:{i}"),
                        ReceiptKind::Commit,
                        "2026-12-06T00:00:00.000Z".into(),
                    ))
                    .unwrap()
                })
                .collect();
            let front: Fetched = frontier(size).into_iter().map(|i| (i, table[&i])).collect();
            let sealed = seal(size, &front, batch, &signer).unwrap();
            table.extend(sealed.hashes);
            entries.extend(sealed.receipts.into_iter().map(|r| r.entry));
            size = sealed.head.size;
            notes.push(sealed.head.note);
        }
        Log {
            signer,
            hashes: table.into_values().collect(),
            entries,
            notes,
        }
    }

    fn run(l: &Log, hashes: &[Hash], entries: &[Vec<u8>]) -> Result<Audited, AuditError> {
        verify_log(
            l.notes.last().unwrap().as_bytes(),
            l.signer.key(),
            hashes,
            entries
                .iter()
                .enumerate()
                .map(|(i, e)| (i as u64, e.as_slice())),
        )
    }

    #[test]
    fn a_sealed_log_verifies_and_extends_each_of_its_checkpoints() {
        let l = log(40);
        let a = run(&l, &l.hashes, &l.entries).unwrap();
        assert_eq!((a.size, a.retained), (40, 40));
        for note in &l.notes {
            verify_extends(&a, note.as_bytes(), l.signer.key()).unwrap();
        }
    }

    #[test]
    fn each_tampering_is_named() {
        let l = log(40);
        let mut entries = l.entries.clone();
        entries[7] = String::from_utf8(entries[7].clone())
            .unwrap()
            .replace("commit", "rejection")
            .into_bytes();
        assert_eq!(
            run(&l, &l.hashes, &entries).unwrap_err(),
            AuditError::Entry { index: 7 }
        );
        // A leaf hash changed with its entry: the level above no longer matches.
        let mut hashes = l.hashes.clone();
        let at = merkle::stored_hash_index(0, 7) as usize;
        hashes[at] = merkle::leaf_hash(&entries[7]);
        assert!(matches!(
            run(&l, &hashes, &entries).unwrap_err(),
            AuditError::StoredHash { level: 1, .. }
        ));
        // The whole tree rebuilt over a changed entry: the signed root does not match.
        let mut mem = MemoryHashes::default();
        for e in &entries {
            mem.append(e).unwrap();
        }
        let rebuilt: Vec<Hash> = (0..l.hashes.len() as u64)
            .map(|i| mem.get(i).unwrap())
            .collect();
        assert_eq!(run(&l, &rebuilt, &entries).unwrap_err(), AuditError::Root);
        // A checkpoint from another key, and one of another tree.
        let other = log(41);
        let a = run(&l, &l.hashes, &l.entries).unwrap();
        assert!(matches!(
            verify_extends(&a, other.notes.last().unwrap().as_bytes(), l.signer.key()),
            Err(AuditError::NotExtending { old: 41, size: 40 })
        ));
        let foreign = Signer::new(
            "audit.example/palisade",
            Arc::new(KeyPair::from_seed([6; 32])),
        )
        .unwrap()
        .sign(3, Hash([1; 32]))
        .unwrap();
        assert!(matches!(
            verify_extends(&a, foreign.as_bytes(), l.signer.key()),
            Err(AuditError::Since(_))
        ));
    }

    #[test]
    fn the_hashes_a_proof_needs_are_known_before_reading_them() {
        let l = log(100);
        let mut mem = MemoryHashes::default();
        for e in &l.entries {
            mem.append(e).unwrap();
        }
        let recording = Prefetch::recording();
        let _ = merkle::inclusion(37, 100, &recording);
        let wanted = recording.asked();
        let fetched = Prefetch::answering(wanted.iter().map(|i| (*i, mem.get(*i).unwrap())));
        assert_eq!(
            merkle::inclusion(37, 100, &fetched).unwrap(),
            merkle::inclusion(37, 100, &mem).unwrap()
        );
    }
}
