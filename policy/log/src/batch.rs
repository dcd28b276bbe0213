//! Integrating a batch of entries into the log (SPEC §5.5): the one function both stores call
//! inside the batch's transaction, so that they cannot integrate differently. Pure: the store
//! hands in its stored hashes through a [`HashReader`] and writes back what this returns.
//!
//! ```text
//! (size n, stored hashes, entries e₀…e_k) → new stored hashes (index → hash), size n+k+1,
//!                                            root, each entry's index and inclusion proof
//! ```
//! One checkpoint is then signed over `(size, root)`: every proof here leads to it.

use std::collections::BTreeMap;

use super::error::LogError;
use super::merkle::{self, Hash, HashReader};

/// What a batch adds to the log.
#[derive(Debug, Clone, PartialEq)]
pub struct Integrated {
    /// The stored hashes to write, by stored-hash index.
    pub hashes: BTreeMap<u64, Hash>,
    /// The tree's size after the batch.
    pub size: u64,
    /// The tree's root after the batch.
    pub root: Hash,
    /// Each entry of the batch, in order: its index and its inclusion proof in the new tree.
    pub proofs: Vec<(u64, Vec<Hash>)>,
}

/// The store's hashes with the batch's new ones over them.
struct Overlay<'a, R> {
    stored: &'a R,
    new: &'a BTreeMap<u64, Hash>,
}

impl<R: HashReader> HashReader for Overlay<'_, R> {
    fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
        let missing: Vec<u64> = indexes
            .iter()
            .copied()
            .filter(|i| !self.new.contains_key(i))
            .collect();
        let mut read = if missing.is_empty() {
            Vec::new()
        } else {
            self.stored.read_hashes(&missing)?
        }
        .into_iter();
        indexes
            .iter()
            .map(|i| match self.new.get(i) {
                Some(h) => Ok(*h),
                None => read.next().ok_or(tlog_tiles::Error::IndexesNotInTree),
            })
            .collect()
    }
}

/// The stored-hash indexes of the complete subtrees that tile the tree of `size` entries, largest
/// first (one per bit of `size`, so at most 64): every stored hash that appending to that tree,
/// its new root and its new entries' inclusion proofs read. A store that cannot hand
/// [`integrate`] a reader over its whole table (PostgreSQL, read asynchronously) fetches these
/// and hands them in as a [`super::merkle::Fetched`].
pub fn frontier(size: u64) -> Vec<u64> {
    let mut out = Vec::new();
    let mut start = 0u64;
    for level in (0..64u8).rev() {
        let width = 1u64 << level;
        if size & width != 0 {
            out.push(merkle::stored_hash_index(level, start >> level));
            start += width;
        }
    }
    out
}

/// Appends `entries` (each a receipt's JCS) to the log of `size` entries whose stored hashes
/// `stored` reads.
pub fn integrate<R: HashReader>(
    size: u64,
    stored: &R,
    entries: &[&[u8]],
) -> Result<Integrated, LogError> {
    let mut new = BTreeMap::new();
    let mut n = size;
    for entry in entries {
        let hashes = {
            let view = Overlay { stored, new: &new };
            merkle::append_hashes(n, merkle::leaf_hash(entry), &view)?
        };
        let first = merkle::stored_hash_index(0, n);
        for (k, h) in hashes.into_iter().enumerate() {
            new.insert(first + k as u64, h);
        }
        n += 1;
    }
    let view = Overlay { stored, new: &new };
    let root = merkle::root(n, &view)?;
    let proofs = (size..n)
        .map(|i| Ok((i, merkle::inclusion(i, n, &view)?)))
        .collect::<Result<Vec<_>, LogError>>()?;
    Ok(Integrated {
        hashes: new,
        size: n,
        root,
        proofs,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::merkle::{Fetched as Table, MemoryHashes};

    #[test]
    fn batches_of_any_size_build_the_tree_one_at_a_time_does() {
        let entries: Vec<Vec<u8>> = (0..300)
            .map(|i| format!("{{\"n\":{i}}}").into_bytes())
            .collect();
        let mut one_by_one = MemoryHashes::default();
        for e in &entries {
            one_by_one.append(e).unwrap();
        }
        let mut table = Table::default();
        let mut size = 0u64;
        // Batches of 1, 2, 3, … entries, as group commit makes them.
        let mut k = 1;
        while (size as usize) < entries.len() {
            let end = (size as usize + k).min(entries.len());
            let batch: Vec<&[u8]> = entries[size as usize..end]
                .iter()
                .map(Vec::as_slice)
                .collect();
            let got = integrate(size, &table, &batch).unwrap();
            assert_eq!(got.size, end as u64);
            assert_eq!(got.root, merkle::root(got.size, &one_by_one).unwrap());
            for (i, proof) in &got.proofs {
                let leaf = merkle::leaf_hash(&entries[*i as usize]);
                merkle::verify_inclusion(proof, got.size, got.root, *i, leaf).unwrap();
            }
            table.0.extend(got.hashes);
            size = got.size;
            k += 1;
        }
        // The table holds exactly the hashes appending one by one stores.
        for (i, h) in &table.0 {
            assert_eq!(Some(*h), one_by_one.get(*i), "stored hash {i}");
        }
        assert_eq!(table.0.len() as u64, merkle::stored_hash_count(300));
    }

    #[test]
    fn a_store_missing_a_hash_is_an_error_not_a_panic() {
        let mut table = Table::default();
        let got = integrate(0, &table, &[b"a", b"b", b"c"]).unwrap();
        table.0.extend(got.hashes);
        // The level-1 node over entries 0 and 1: appending entry 3 needs it.
        table.0.remove(&merkle::stored_hash_index(1, 0));
        assert!(matches!(
            integrate(3, &table, &[b"d"]),
            Err(LogError::Hashes(_))
        ));
    }
}
