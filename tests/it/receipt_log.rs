//! The receipt log of a running sidecar (SPEC §5.5, §9, §1; issue 45): what its clients got
//! and what its admin listener serves, checked by an implementation that is not ours
//! (`tests/log/verify_log.py`) and by `palisade audit verify --url` from outside; each kind of
//! tampering named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::Value;

use crate::support::log_mirror::{admin_bytes, assert_log_verifies_independently};
use crate::support::writes::*;
use crate::support::*;
use palisade::store::Receipts;

const ORIGIN: &str = "erp.example.com/palisade";

/// `palisade audit verify` with `args`: (exit code, stdout, stderr).
fn audit(args: &[&str]) -> (Option<i32>, String, String) {
    let o = std::process::Command::new(bin())
        .args(["audit", "verify"])
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A leased write to `/items/{item}` at epoch 1: its answer's envelope.
async fn write(s: &Setup, item: usize) -> Value {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = format!("/items/log-{item}");
    let lease = lease_for(&agent, &path, 1, |_| {});
    let (parts, body) = send(
        &http1_client(),
        put(&s.p, &path, Some(&lease), Some(&inverse_for(&path))),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    envelope_of(&parts.headers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_running_sidecars_log_verifies_with_an_implementation_that_is_not_ours() {
    let s = start("").await;
    let mut envelopes = Vec::new();
    // 32 writes at once, then one at a time, and refusals between them.
    let s = std::sync::Arc::new(s);
    let at_once: Vec<_> = (0..32)
        .map(|i| {
            let s = s.clone();
            tokio::spawn(async move { write(&s, i).await })
        })
        .collect();
    for t in at_once {
        envelopes.push(t.await.unwrap());
    }
    for i in 32..40 {
        envelopes.push(write(&s, i).await);
        let (parts, body) = send(&http1_client(), put(&s.p, "/items/no-lease", None, None)).await;
        assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
        let problem: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(problem["receipt"], envelope_of(&parts.headers));
        envelopes.push(problem["receipt"].clone());
    }
    // Every answer verifies alone, and no two checkpoints were signed for one tree size: the
    // 32 concurrent writes shared checkpoints (one per store batch).
    let mut by_size: BTreeMap<u64, String> = BTreeMap::new();
    for e in &envelopes {
        verified_receipt(e);
        let note = e["checkpoint"].as_str().unwrap().to_owned();
        let size: u64 = note.lines().nth(1).unwrap().parse().unwrap();
        let same = by_size.entry(size).or_insert_with(|| note.clone());
        assert_eq!(*same, note, "two checkpoints for the tree of size {size}");
    }
    let concurrent: std::collections::HashSet<&str> = envelopes[..32]
        .iter()
        .map(|e| e["checkpoint"].as_str().unwrap())
        .collect();
    eprintln!("32 concurrent writes: {} checkpoints", concurrent.len());

    // An inclusion proof from the admin listener, for a tree other than the client's.
    let newest =
        String::from_utf8(admin_bytes(s.p.admin, "/admin/v1/log/checkpoint").await.1).unwrap();
    let size: u64 = newest.lines().nth(1).unwrap().parse().unwrap();
    assert_eq!(size, 48, "one entry per write and per refusal");
    let (status, proof) = admin_bytes(
        s.p.admin,
        &format!("/admin/v1/log/proof?index=3&size={size}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let third = envelopes.iter().find(|e| e["index"] == 3).unwrap();
    let mut reproven = third.clone();
    reproven["inclusion"] = serde_json::from_slice(&proof).unwrap();
    reproven["checkpoint"] = Value::from(newest.clone());
    envelopes.push(reproven);

    // Consistency of the earliest checkpoint a client holds with today's tree, as served.
    let (first_size, first_note) = by_size.iter().next().map(|(k, v)| (*k, v.clone())).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (status, consistency) = admin_bytes(
        s.p.admin,
        &format!("/admin/v1/log/consistency?old={first_size}&new={size}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let v = {
        // The mirror with the old checkpoint and its proof, checked by the Python verifier.
        let size = crate::support::log_mirror::mirror(s.p.admin, dir.path(), &envelopes).await;
        std::fs::write(dir.path().join("old-checkpoint"), &first_note).unwrap();
        std::fs::write(dir.path().join("consistency.json"), &consistency).unwrap();
        let v = crate::support::log_mirror::python_verdict(dir.path());
        assert_eq!(
            (v["ok"].as_bool(), v["size"].as_u64()),
            (Some(true), Some(size)),
            "{v}"
        );
        v
    };
    assert_eq!(v["retained"].as_u64(), Some(48), "{v}");
    assert_eq!(v["envelopes"].as_u64(), Some(envelopes.len() as u64), "{v}");

    // From outside with nothing but the verifier key: the whole log, and `--since`.
    let vkey = String::from_utf8(admin_bytes(s.p.admin, "/admin/v1/log/key").await.1).unwrap();
    assert_eq!(vkey.trim(), sidecar_log_key(ORIGIN).vkey());
    let url = format!("http://{}", s.p.admin);
    let since = dir.path().join("since");
    // `audit verify --url --key --json --since <note>`.
    let audit_since = |note: &str| {
        std::fs::write(&since, note).unwrap();
        let args = ["--url", &url, "--key", vkey.trim(), "--json", "--since"];
        audit(&[&args[..], &[since.to_str().unwrap()]].concat())
    };
    let (code, out, err) = audit_since(&first_note);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (doc["size"].as_u64(), doc["retained"].as_u64()),
        (Some(48), Some(48)),
        "{doc}"
    );

    // A checkpoint of another tree, signed with the very key: today's tree does not extend it.
    let other = sidecar_log(ORIGIN)
        .sign(5, palisade_policy::log::merkle::Hash([7; 32]))
        .unwrap();
    let (code, _, err) = audit_since(&other);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("does not extend the checkpoint given (size 5)"),
        "{err}"
    );
    // A forged checkpoint (a size the log never signed, the signature kept).
    let (code, _, err) =
        audit_since(&first_note.replacen(&format!("\n{first_size}\n"), "\n999\n", 1));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("--since: the checkpoint given"), "{err}");
    // Another log's key: the newest checkpoint is refused.
    let foreign =
        palisade_policy::log::LogKey::of_pair(ORIGIN, &KeyPair::from_seed([99; 32])).unwrap();
    let (code, _, err) = audit(&["--url", &url, "--key", &foreign.vkey()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("the newest checkpoint"), "{err}");

    // `--config` while the sidecar runs: its file is locked, so through its admin listener.
    // (Its configuration with the admin port it got, as an operator's names a fixed one.)
    let config = s.p.dir.path().join("audit.toml");
    let text = std::fs::read_to_string(s.p.dir.path().join("palisade.toml")).unwrap();
    let admin_line = format!("[admin]\naddr = \"{}\"", s.p.admin);
    std::fs::write(
        &config,
        text.replace("[admin]\naddr = \"127.0.0.1:0\"", &admin_line),
    )
    .unwrap();
    let (code, out, err) = audit(&["--config", config.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("through its sidecar") && out.contains("receipt log of 48 entries"),
        "{out}"
    );

    // The conveniences refuse what no tree has (SPEC §9).
    for bad in [
        format!("proof?index={size}&size={size}"),
        format!("proof?index=0&size={}", size + 1),
        format!("consistency?old=0&new={size}"),
        format!("consistency?old={size}&new={size}"),
        "proof?index=01&size=3".to_owned(),
        "proof?index=1".to_owned(),
    ] {
        let (status, _) = admin_bytes(s.p.admin, &format!("/admin/v1/log/{bad}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    for missing in [
        "tile/0/001",
        "tile/entries/000.p/49",
        "tile/0/0",
        "tile/0/x000/000",
    ] {
        let (status, _) = admin_bytes(s.p.admin, &format!("/admin/v1/log/{missing}")).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{missing}");
    }
}

/// Entries past `store.receipt_retention` leave the bundles (410); the hash tiles stay, so the
/// tree and every retained entry stay provable, by the Python verifier and `audit verify`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_tree_provable() {
    use palisade::store::embedded::EmbeddedStore;
    use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
    let dir = tempfile::tempdir().unwrap();
    {
        // 256 receipts from two days ago: one full entry bundle.
        let store =
            EmbeddedStore::open(&dir.path().join("state.redb"), sidecar_log(ORIGIN)).unwrap();
        for i in 0..256 {
            let body = ReceiptBody::new(
                format!("urn:uuid:old-{i}"),
                ReceiptKind::Rejection,
                palisade_policy::lease::format_rfc3339_ms(
                    palisade::clock::WallClock::now_ms() - 2 * 86_400_000,
                ),
            );
            store.append_receipt(body).await.unwrap();
        }
    }
    let s = start_in(Upstream::start().await, dir, "receipt_retention = \"1h\"\n");
    let mut envelopes = Vec::new();
    for i in 0..6 {
        envelopes.push(write(&s, i).await);
    }
    let gone = admin_bytes(s.p.admin, "/admin/v1/log/tile/entries/000")
        .await
        .0;
    assert_eq!(gone, StatusCode::GONE);
    let v = assert_log_verifies_independently(s.p.admin, &envelopes).await;
    assert_eq!(
        (v["size"].as_u64(), v["retained"].as_u64()),
        (Some(262), Some(6)),
        "{v}"
    );
    let vkey = sidecar_log_key(ORIGIN).vkey();
    let (code, out, err) = audit(&[
        "--url",
        &format!("http://{}", s.p.admin),
        "--key",
        &vkey,
        "--json",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let doc: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        (doc["size"].as_u64(), doc["retained"].as_u64()),
        (Some(262), Some(6)),
        "{doc}"
    );
}
