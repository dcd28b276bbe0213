//! RFC 9162 §2.1 Merkle hashing over the log's stored hashes, through `tlog_tiles` (a port of
//! Go's `golang.org/x/mod/sumdb/tlog`).
//!
//! The stored-hash layout is Go tlog's: appending entry `n` stores its leaf hash and the root of
//! every complete subtree it closes, at [`stored_hash_index`]`(0, n)` onward; any tree's root and
//! any proof are computed from those. A store keeps them in a table keyed by that index and
//! answers [`HashReader::read_hashes`]; it must return exactly one hash per index or an error
//! (the library checks this with an assertion, so a reader that cannot read answers `Err`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
pub use tlog_tiles::{stored_hash_count, stored_hash_index, Hash, HashReader, EMPTY_HASH};

use super::error::LogError;

/// The leaf hash of an entry: `SHA-256(0x00 ‖ entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    tlog_tiles::record_hash(entry)
}

fn hashes_error(e: tlog_tiles::Error) -> LogError {
    LogError::Hashes(e.to_string())
}

/// The hashes to store when entry `n` (0-based) with leaf hash `leaf` is appended, from
/// `stored_hash_index(0, n)` on. Reads up to log₂ n earlier hashes from `r`.
pub fn append_hashes<R: HashReader>(n: u64, leaf: Hash, r: &R) -> Result<Vec<Hash>, LogError> {
    tlog_tiles::stored_hashes_for_record_hash(n, leaf, r).map_err(hashes_error)
}

/// The root of the tree of the first `size` entries.
pub fn root<R: HashReader>(size: u64, r: &R) -> Result<Hash, LogError> {
    tlog_tiles::tree_hash(size, r).map_err(hashes_error)
}

/// The inclusion proof of entry `index` in the tree of size `size` (RFC 9162 §2.1.3.1).
pub fn inclusion<R: HashReader>(index: u64, size: u64, r: &R) -> Result<Vec<Hash>, LogError> {
    if index >= size {
        return Err(LogError::IndexBeyondTree { index, size });
    }
    tlog_tiles::prove_record(size, index, r).map_err(hashes_error)
}

/// The consistency proof from the tree of size `old` to the tree of size `new` (RFC 9162
/// §2.1.4.1); `1 ≤ old ≤ new`.
pub fn consistency<R: HashReader>(old: u64, new: u64, r: &R) -> Result<Vec<Hash>, LogError> {
    if old == 0 || old > new {
        return Err(LogError::Consistency { old, new });
    }
    tlog_tiles::prove_tree(new, old, r).map_err(hashes_error)
}

/// Checks that `proof` shows entry `index` with leaf hash `leaf` in the tree of size `size`
/// whose root is `root`.
pub fn verify_inclusion(
    proof: &[Hash],
    size: u64,
    root: Hash,
    index: u64,
    leaf: Hash,
) -> Result<(), LogError> {
    if index >= size {
        return Err(LogError::IndexBeyondTree { index, size });
    }
    // A proof is at most one hash a level; a longer one cannot be right (and is not walked).
    if proof.len() > 64 {
        return Err(LogError::Inclusion { index });
    }
    tlog_tiles::check_record(&proof.to_vec(), size, root, index, leaf)
        .map_err(|_| LogError::Inclusion { index })
}

/// Checks that `proof` shows the tree of size `new` (root `new_root`) extends the tree of size
/// `old` (root `old_root`).
pub fn verify_consistency(
    proof: &[Hash],
    old: u64,
    old_root: Hash,
    new: u64,
    new_root: Hash,
) -> Result<(), LogError> {
    let inconsistent = LogError::Consistency { old, new };
    if old == 0 || old > new || proof.len() > 128 {
        return Err(inconsistent);
    }
    tlog_tiles::check_tree(&proof.to_vec(), new, new_root, old, old_root).map_err(|_| inconsistent)
}

/// A proof as the wire carries it: standard base64 of each hash (RFC 4648 §4).
pub fn encode_proof(proof: &[Hash]) -> Vec<String> {
    proof.iter().map(|h| STANDARD.encode(h.0)).collect()
}

/// A proof from the wire; each element must be the base64 of exactly 32 bytes.
pub fn decode_proof(proof: &[String]) -> Result<Vec<Hash>, LogError> {
    proof
        .iter()
        .enumerate()
        .map(|(position, s)| {
            decode_hash(s).map_err(|why| LogError::ProofEncoding { position, why })
        })
        .collect()
}

/// One hash from standard base64.
pub fn decode_hash(s: &str) -> Result<Hash, String> {
    let bytes = STANDARD.decode(s).map_err(|e| e.to_string())?;
    let array: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| format!("{} bytes, not 32", b.len()))?;
    Ok(Hash(array))
}

/// Stored hashes fetched ahead, by stored-hash index, as a reader: any other index is an
/// error, never a guess (a batch's frontier, a proof's or a tile's hashes).
#[derive(Debug, Clone, Default)]
pub struct Fetched(pub std::collections::BTreeMap<u64, Hash>);

impl FromIterator<(u64, Hash)> for Fetched {
    fn from_iter<I: IntoIterator<Item = (u64, Hash)>>(pairs: I) -> Self {
        Self(pairs.into_iter().collect())
    }
}

impl HashReader for Fetched {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|i| {
                self.0
                    .get(i)
                    .copied()
                    .ok_or(tlog_tiles::Error::IndexesNotInTree)
            })
            .collect()
    }
}

/// A log's stored hashes in memory: for tests, and for a verifier that rebuilds a log from its
/// entries.
#[derive(Debug, Default, Clone)]
pub struct MemoryHashes {
    hashes: Vec<Hash>,
    size: u64,
}

impl MemoryHashes {
    /// Appends an entry; its index.
    pub fn append(&mut self, entry: &[u8]) -> Result<u64, LogError> {
        self.append_leaf(leaf_hash(entry))
    }

    /// Appends a leaf hash; its index.
    pub fn append_leaf(&mut self, leaf: Hash) -> Result<u64, LogError> {
        let n = self.size;
        let new = append_hashes(n, leaf, self)?;
        self.hashes.extend(new);
        self.size += 1;
        Ok(n)
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// The stored hash at `index`.
    pub fn get(&self, index: u64) -> Option<Hash> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.hashes.get(i).copied())
    }
}

impl HashReader for MemoryHashes {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        indexes
            .iter()
            .map(|&i| self.get(i).ok_or(tlog_tiles::Error::IndexesNotInTree))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn log(n: u64) -> MemoryHashes {
        let mut m = MemoryHashes::default();
        for i in 0..n {
            m.append(format!("entry {i}").as_bytes()).unwrap();
        }
        m
    }

    #[test]
    fn every_inclusion_and_consistency_proof_of_small_trees_verifies() {
        let m = log(40);
        for size in 1..=40 {
            let r = root(size, &m).unwrap();
            for index in 0..size {
                let p = inclusion(index, size, &m).unwrap();
                let leaf = leaf_hash(format!("entry {index}").as_bytes());
                verify_inclusion(&p, size, r, index, leaf).unwrap();
                assert!(verify_inclusion(&p, size, r, index, leaf_hash(b"other")).is_err());
            }
            for old in 1..=size {
                let p = consistency(old, size, &m).unwrap();
                let old_root = root(old, &m).unwrap();
                verify_consistency(&p, old, old_root, size, r).unwrap();
                if old < size {
                    let wrong = root(old + 1, &m).unwrap();
                    assert!(verify_consistency(&p, old, wrong, size, r).is_err());
                }
            }
        }
    }

    #[test]
    fn impossible_requests_are_errors_not_panics() {
        let m = log(5);
        assert!(inclusion(5, 5, &m).is_err());
        assert!(consistency(0, 5, &m).is_err());
        assert!(consistency(6, 5, &m).is_err());
        // Hashes the reader does not have.
        assert!(root(9, &m).is_err());
        let r = root(5, &m).unwrap();
        let long = vec![EMPTY_HASH; 65];
        assert!(verify_inclusion(&long, 5, r, 1, EMPTY_HASH).is_err());
        assert!(verify_inclusion(&[], 5, r, 7, EMPTY_HASH).is_err());
        assert!(decode_proof(&["AAAA".into()]).is_err());
    }
}
