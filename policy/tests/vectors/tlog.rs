#![allow(clippy::unwrap_used)]
//! RFC 6962 / RFC 9162 §2.1 hashing and proofs as transparency-dev/merkle publishes them, and
//! the C2SP signed-note specification's own example, through `palisade_policy::log`.

use std::path::PathBuf;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use palisade_policy::log::checkpoint::{self, LogKey};
use palisade_policy::log::merkle::{self, Hash, MemoryHashes};
use serde_json::Value;

fn load(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/tlog")
        .join(name);
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn proof(v: &Value) -> Vec<Hash> {
    let strings: Vec<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_owned())
        .collect();
    merkle::decode_proof(&strings).unwrap()
}

fn vectors() -> (Value, MemoryHashes) {
    let v = load("rfc6962-vectors.json");
    let mut log = MemoryHashes::default();
    for leaf in v["leaf_inputs_hex"].as_array().unwrap() {
        log.append(&hex::decode(leaf.as_str().unwrap()).unwrap())
            .unwrap();
    }
    (v, log)
}

#[test]
fn roots_of_every_size_match_the_published_ones() {
    let (v, log) = vectors();
    for (size, root) in v["roots_hex_by_tree_size"].as_object().unwrap() {
        let size: u64 = size.parse().unwrap();
        let got = merkle::root(size, &log).unwrap();
        assert_eq!(hex::encode(got.0), root.as_str().unwrap(), "size {size}");
    }
}

#[test]
fn published_inclusion_proofs_are_ours_and_verify() {
    let (v, log) = vectors();
    let leaves = v["leaf_inputs_hex"].as_array().unwrap();
    for p in v["inclusion_proofs_base64"].as_array().unwrap() {
        let (index, size) = (
            p["leaf_index"].as_u64().unwrap(),
            p["tree_size"].as_u64().unwrap(),
        );
        let want = proof(&p["proof"]);
        assert_eq!(
            merkle::inclusion(index, size, &log).unwrap(),
            want,
            "{index}/{size}"
        );
        let leaf =
            merkle::leaf_hash(&hex::decode(leaves[index as usize].as_str().unwrap()).unwrap());
        let root = merkle::root(size, &log).unwrap();
        merkle::verify_inclusion(&want, size, root, index, leaf).unwrap();
        // The same proof for a neighbour's leaf does not verify.
        let other = merkle::leaf_hash(b"not the leaf");
        assert!(merkle::verify_inclusion(&want, size, root, index, other).is_err());
    }
}

#[test]
fn published_consistency_proofs_are_ours_and_verify() {
    let (v, log) = vectors();
    for p in v["consistency_proofs_base64"].as_array().unwrap() {
        let (old, new) = (
            p["old_size"].as_u64().unwrap(),
            p["new_size"].as_u64().unwrap(),
        );
        let want = proof(&p["proof"]);
        assert_eq!(
            merkle::consistency(old, new, &log).unwrap(),
            want,
            "{old}→{new}"
        );
        let (old_root, new_root) = (
            merkle::root(old, &log).unwrap(),
            merkle::root(new, &log).unwrap(),
        );
        merkle::verify_consistency(&want, old, old_root, new, new_root).unwrap();
        assert!(
            merkle::verify_consistency(&want, old, new_root, new, new_root).is_err() || old == new
        );
    }
}

#[test]
fn the_signed_note_specifications_example_verifies_and_a_changed_one_does_not() {
    let v = load("signed-note-example.json");
    let key = LogKey::parse(v["vkey"].as_str().unwrap()).unwrap();
    assert_eq!(key.vkey(), v["vkey"].as_str().unwrap());
    let note = v["note"].as_str().unwrap();
    let (text, others) = checkpoint::verify_note(note.as_bytes(), &key).unwrap();
    assert_eq!(text, "This is an example message.\n");
    assert!(others.is_empty());
    let changed = note.replacen("example", "exemple", 1);
    assert!(checkpoint::verify_note(changed.as_bytes(), &key).is_err());
    // The key ID is the first four bytes of SHA-256(name ‖ 0x0A ‖ 0x01 ‖ key).
    use sha2::Digest as _;
    let typed = STANDARD
        .decode(v["vkey"].as_str().unwrap().rsplit('+').next().unwrap())
        .unwrap();
    let digest = sha2::Sha256::new()
        .chain_update(b"example.com/foo\n")
        .chain_update(&typed)
        .finalize();
    assert_eq!(hex::encode(&digest[..4]), format!("{:08x}", key.id()));
}
