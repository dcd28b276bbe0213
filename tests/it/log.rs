//! The receipt log's formats (SPEC §5.5, issue 45) against an implementation that is not ours:
//! a log of receipts built with `palisade_policy::log` (hashes, tiles, entry bundles, signed
//! checkpoints, envelopes), published in the C2SP tlog-tiles layout in a directory, and
//! checked by `tests/log/verify_log.py` (RFC 9162 and C2SP, written from the texts; Ed25519 by
//! pyca/cryptography, JCS by `rfc8785`) and by `palisade receipt verify`. Each kind of
//! tampering the issue names is caught by both, and named.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use palisade_policy::keys::KeyPair;
use palisade_policy::log::checkpoint::{self, Checkpoint, LogKey};
use palisade_policy::log::merkle::{self, MemoryHashes};
use palisade_policy::log::tiles::{self, TileKind, TilePath};
use palisade_policy::log::Envelope;
use serde_json::json;

use crate::support::bin;
use crate::support::log_mirror::python_verdict;

const ORIGIN: &str = "erp.example.com/palisade";

fn receipt(i: u64) -> Vec<u8> {
    let r = json!({
        "receipt_version": "2.0",
        "receipt_id": format!("urn:uuid:00000000-0000-7000-8000-{i:012}"),
        "kind": if i % 5 == 0 { "rejection" } else { "commit" },
        "method": "PUT",
        "sor_target_uri": format!("https://erp.example.com/items/{}", i % 17),
        "cas_fence_epoch": i + 1,
        "caller": "spiffe://erp.example/ns/agents/sa/writer",
        "trace_id": format!("{i:032x}"),
        "at": "2026-12-05T12:00:00.000Z",
    });
    palisade_policy::canon::to_vec(&r)
}

/// A published log of `size` receipts: tiles, bundles, the newest checkpoint, the verifier key.
struct Published {
    dir: tempfile::TempDir,
    log: MemoryHashes,
    entries: Vec<Vec<u8>>,
    key: LogKey,
    pair: KeyPair,
}

impl Published {
    fn new(size: u64, seed: u8) -> Self {
        let pair = KeyPair::from_seed([31; 32]);
        let key = LogKey::of_pair(ORIGIN, &pair).unwrap();
        let mut log = MemoryHashes::default();
        let entries: Vec<Vec<u8>> = (0..size)
            .map(|i| receipt(i * 1000 + u64::from(seed)))
            .collect();
        for e in &entries {
            log.append(e).unwrap();
        }
        let p = Self {
            dir: tempfile::tempdir().unwrap(),
            log,
            entries,
            key,
            pair,
        };
        std::fs::write(p.path("vkey"), p.key.vkey()).unwrap();
        std::fs::write(p.path("checkpoint"), p.checkpoint(size)).unwrap();
        p.write_tiles(size);
        p
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn checkpoint(&self, size: u64) -> String {
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: merkle::root(size, &self.log).unwrap(),
        };
        checkpoint::sign(&cp, &self.key, &self.pair).unwrap()
    }

    fn write(&self, tile: TilePath, data: &[u8]) {
        let path = self.path(&tile.path());
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, data).unwrap();
    }

    fn write_tiles(&self, size: u64) {
        for level in 0..8u8 {
            for n in 0.. {
                let Some(t) = TilePath::in_tree(TileKind::Hashes { level }, n, size) else {
                    break;
                };
                self.write(t, &t.hash_data(&self.log).unwrap());
            }
        }
        for n in 0.. {
            let Some(t) = TilePath::in_tree(TileKind::Entries, n, size) else {
                break;
            };
            let from = (n * tiles::WIDTH) as usize;
            let these = &self.entries[from..from + usize::from(t.width)];
            self.write(t, &tiles::bundle(these.iter().map(Vec::as_slice)).unwrap());
        }
    }

    fn envelope(&self, index: u64, size: u64) -> Envelope {
        let proof = merkle::inclusion(index, size, &self.log).unwrap();
        Envelope::new(
            &self.entries[index as usize],
            index,
            &proof,
            self.checkpoint(size),
        )
        .unwrap()
    }

    fn put_envelope(&self, name: &str, env: &Envelope) -> PathBuf {
        std::fs::create_dir_all(self.path("envelopes")).unwrap();
        let path = self.path(&format!("envelopes/{name}.json"));
        std::fs::write(&path, serde_json::to_vec(env).unwrap()).unwrap();
        path
    }
}

/// `palisade receipt verify`: (exit code, what it printed).
fn receipt_verify(key: &str, file: &Path) -> (i32, String) {
    let out = Command::new(bin())
        .args(["receipt", "verify", "--key", key, "--file"])
        .arg(file)
        .output()
        .unwrap();
    let printed =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), printed)
}

#[test]
fn a_published_log_verifies_with_an_implementation_that_is_not_ours() {
    // 600 entries: two full level-0 tiles and a partial one, a partial level-1 tile.
    let p = Published::new(600, 0);
    std::fs::write(p.path("old-checkpoint"), p.checkpoint(300)).unwrap();
    let proof = merkle::consistency(300, 600, &p.log).unwrap();
    std::fs::write(
        p.path("consistency.json"),
        serde_json::to_vec(&merkle::encode_proof(&proof)).unwrap(),
    )
    .unwrap();
    let mut files = Vec::new();
    for index in (0..600).step_by(37).chain([255, 256, 511, 512, 599]) {
        // Each against the checkpoint it was answered with: the tree of its batch.
        let size = (index + 1).max(index / 64 * 64 + 64).min(600);
        files.push(p.put_envelope(&format!("{index:04}"), &p.envelope(index, size)));
    }
    let v = python_verdict(p.dir.path());
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(
        (v["size"].as_u64(), v["entries"].as_u64()),
        (Some(600), Some(600))
    );
    assert_eq!(v["envelopes"].as_u64(), Some(files.len() as u64));
    // And ours, on every receipt, with the verifier key as served.
    for f in &files {
        let (code, printed) = receipt_verify(&p.key.vkey(), f);
        assert_eq!(code, 0, "{printed}");
        assert!(printed.starts_with("ok: entry "), "{printed}");
    }
}

#[test]
fn tampering_is_caught_and_named_by_both_verifiers() {
    let p = Published::new(300, 1);
    let vkey = p.key.vkey();

    // A receipt with one field changed.
    let mut env = p.envelope(42, 300);
    env.receipt["cas_fence_epoch"] = json!(43_000);
    let changed = p.put_envelope("changed", &env);
    let v = python_verdict(p.dir.path());
    assert!(
        v["failures"]
            .to_string()
            .contains("changed.json: the inclusion proof of entry 42"),
        "{v}"
    );
    let (code, printed) = receipt_verify(&vkey, &changed);
    assert_eq!(code, 1, "{printed}");
    assert!(printed.contains("inclusion proof of entry 42"), "{printed}");
    std::fs::remove_file(&changed).unwrap();

    // A forged checkpoint: a size the log never signed.
    let mut env = p.envelope(7, 300);
    env.checkpoint = env.checkpoint.replacen("\n300\n", "\n301\n", 1);
    let forged = p.put_envelope("forged", &env);
    let v = python_verdict(p.dir.path());
    assert!(
        v["failures"]
            .to_string()
            .contains("forged.json: checkpoint"),
        "{v}"
    );
    let (code, printed) = receipt_verify(&vkey, &forged);
    assert_eq!(code, 1, "{printed}");
    assert!(printed.contains("checkpoint signature"), "{printed}");
    std::fs::remove_file(&forged).unwrap();
    assert_eq!(python_verdict(p.dir.path())["ok"], true);

    // A checkpoint from another tree (same key, other entries): not consistent.
    let other = Published::new(200, 2);
    std::fs::write(p.path("old-checkpoint"), other.checkpoint(200)).unwrap();
    let proof = merkle::consistency(200, 300, &p.log).unwrap();
    std::fs::write(
        p.path("consistency.json"),
        serde_json::to_vec(&merkle::encode_proof(&proof)).unwrap(),
    )
    .unwrap();
    let v = python_verdict(p.dir.path());
    assert!(
        v["failures"]
            .to_string()
            .contains("not consistent with the tree of size 200"),
        "{v}"
    );
    std::fs::remove_file(p.path("old-checkpoint")).unwrap();

    // Entry bytes changed where they are stored.
    let bundle = p.path("tile/entries/001.p/44");
    let mut data = std::fs::read(&bundle).unwrap();
    let at = data.windows(6).position(|w| w == b"commit").unwrap();
    data[at..at + 6].copy_from_slice(b"COMMIT");
    std::fs::write(&bundle, data).unwrap();
    let v = python_verdict(p.dir.path());
    assert!(
        v["failures"]
            .to_string()
            .contains("do not hash to the checkpoint's root"),
        "{v}"
    );
}
