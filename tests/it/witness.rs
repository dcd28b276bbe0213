//! Witnesses (SPEC §5.5, C2SP tlog-witness and tlog-cosignature; issue 45): a sidecar submits
//! its checkpoints to a `palisade witness` run as its own process with its own key and state;
//! the cosignature is served on the checkpoint and checked by `tests/log/verify_log.py`
//! (pyca/cryptography, written from the C2SP text). The witness refuses what the protocol
//! says, keeps its state across a restart, and its absence never holds a write back.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use palisade_policy::log::merkle::Hash;
use serde_json::Value;

use crate::support::log_mirror::{admin_bytes, mirror, python_verdict};
use crate::support::wait;
use crate::support::writes::*;
use crate::support::*;

const ORIGIN: &str = "erp.example.com/palisade";
const NAME: &str = "witness.example/w1";

/// A `palisade witness` process.
struct WitnessProc {
    child: Child,
    addr: SocketAddr,
    vkey: String,
}

impl Drop for WitnessProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a witness of the tests' sidecar log, with its state in `dir` (kept across restarts).
fn witness(dir: &std::path::Path, addr: &str) -> WitnessProc {
    std::fs::write(
        dir.join("witness.pem"),
        KeyPair::from_seed([77; 32]).to_pkcs8_pem(),
    )
    .unwrap();
    let config = dir.join("witness.toml");
    std::fs::write(
        &config,
        format!(
            "[witness]\naddr = \"{addr}\"\nname = \"{NAME}\"\nkey = \"witness.pem\"\nstate = \"state\"\nlogs = [\"{}\"]\n",
            sidecar_log_key(ORIGIN).vkey()
        ),
    )
    .unwrap();
    let mut child = Command::new(bin())
        .args(["witness", "--config"])
        .arg(&config)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: Value = serde_json::from_str(&line).expect("the witness prints its address and key");
    WitnessProc {
        addr: v["addr"].as_str().unwrap().parse().unwrap(),
        vkey: v["vkey"].as_str().unwrap().to_owned(),
        child,
    }
}

/// `POST /add-checkpoint`: status, content type, body.
async fn add_checkpoint(w: SocketAddr, body: String) -> (StatusCode, String, String) {
    let req = Request::post(format!("http://{w}/add-checkpoint"))
        .body(full(body))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let ct = parts
        .headers
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (
        parts.status,
        ct,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

async fn leased_write(s: &Setup, item: usize) -> StatusCode {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = format!("/items/w-{item}");
    let lease = lease_for(&agent, &path, 1, |_| {});
    send(
        &http1_client(),
        put(&s.p, &path, Some(&lease), Some(&inverse_for(&path))),
    )
    .await
    .0
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_are_cosigned_by_a_witness_in_another_process() {
    let wdir = tempfile::tempdir().unwrap();
    let w = witness(wdir.path(), "127.0.0.1:0");
    let s = start(&format!(
        "[receipts]\nwitnesses = [{{ url = \"http://{}\", vkey = \"{}\" }}]\nwitness_interval = \"1s\"\n",
        w.addr, w.vkey
    ))
    .await;
    for i in 0..5 {
        assert_eq!(leased_write(&s, i).await, StatusCode::OK);
    }
    // Within a few intervals the served checkpoint carries the witness's cosignature.
    let served = || async {
        String::from_utf8(admin_bytes(s.p.admin, "/admin/v1/log/checkpoint").await.1).unwrap()
    };
    let cosigned_at = |size: u64, note: &str| {
        note.contains(&format!("\u{2014} {NAME} ")) && note.contains(&format!("\n{size}\n"))
    };
    wait::until_async(
        "the checkpoint of 5 is cosigned",
        Duration::from_secs(10),
        || async { cosigned_at(5, &served().await) },
    )
    .await;
    let note = served().await;
    assert!(cosigned_at(5, &note), "{note}");
    // Checked by the Python verifier: the log, and the witness's cosignature under its key.
    let dir = tempfile::tempdir().unwrap();
    mirror(s.p.admin, dir.path(), &[]).await;
    std::fs::write(dir.path().join("checkpoint"), &note).unwrap();
    std::fs::write(dir.path().join("witness.vkey"), &w.vkey).unwrap();
    let v = python_verdict(dir.path());
    assert_eq!(v["ok"], true, "{v}");
    // And by another witness key, it is not.
    let other =
        palisade_policy::log::witness::Cosigner::new(NAME, KeyPair::from_seed([78; 32])).unwrap();
    std::fs::write(dir.path().join("witness.vkey"), other.vkey()).unwrap();
    let v = python_verdict(dir.path());
    assert!(v["failures"].to_string().contains("witness"), "{v}");

    // More writes: the witness follows with a consistency proof from the size it holds.
    for i in 5..9 {
        assert_eq!(leased_write(&s, i).await, StatusCode::OK);
    }
    wait::until_async(
        "the checkpoint of 9 is cosigned",
        Duration::from_secs(10),
        || async { cosigned_at(9, &served().await) },
    )
    .await;

    // The protocol's refusals, asked directly.
    let signer = sidecar_log(ORIGIN);
    let stale = format!("old 3\n\n{}", signer.sign(9, Hash([1; 32])).unwrap());
    let (status, ct, body) = add_checkpoint(w.addr, stale).await;
    assert_eq!(
        (status, ct.as_str(), body.as_str()),
        (StatusCode::CONFLICT, "text/x.tlog.size", "9\n")
    );
    let fork = format!("old 9\n\n{}", signer.sign(9, Hash([1; 32])).unwrap());
    assert_eq!(add_checkpoint(w.addr, fork).await.0, StatusCode::CONFLICT);
    let wrong_proof = format!(
        "old 9\n{}\n\n{}",
        palisade_policy::log::merkle::encode_proof(&[Hash([2; 32])])[0],
        signer.sign(12, Hash([1; 32])).unwrap()
    );
    assert_eq!(
        add_checkpoint(w.addr, wrong_proof).await.0,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let foreign =
        palisade_policy::log::Signer::new(ORIGIN, std::sync::Arc::new(KeyPair::from_seed([5; 32])))
            .unwrap();
    let forged = format!("old 9\n\n{}", foreign.sign(10, Hash([1; 32])).unwrap());
    assert_eq!(
        add_checkpoint(w.addr, forged).await.0,
        StatusCode::FORBIDDEN
    );
    let unknown = palisade_policy::log::Signer::new(
        "other.example/log",
        std::sync::Arc::new(KeyPair::from_seed([5; 32])),
    )
    .unwrap();
    let (status, _, _) = add_checkpoint(
        w.addr,
        format!("old 0\n\n{}", unknown.sign(1, Hash([1; 32])).unwrap()),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    for bad in ["old 09\n\nx", "no\n\nx", "old 1\nnot-a-hash\n\nx"] {
        assert_eq!(
            add_checkpoint(w.addr, bad.to_owned()).await.0,
            StatusCode::BAD_REQUEST,
            "{bad}"
        );
    }

    // Restarted on its state, the witness still holds size 9 (persisted before it answered).
    let addr = w.addr.to_string();
    drop(w);
    let w = witness(wdir.path(), &addr);
    let (status, _, body) = add_checkpoint(
        w.addr,
        format!("old 0\n\n{}", signer.sign(9, Hash([1; 32])).unwrap()),
    )
    .await;
    assert_eq!((status, body.as_str()), (StatusCode::CONFLICT, "9\n"));

    // With the witness gone, writes go on at once and the log still verifies.
    drop(w);
    let started = tokio::time::Instant::now();
    for i in 9..15 {
        assert_eq!(leased_write(&s, i).await, StatusCode::OK);
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "writes waited for a witness"
    );
    // The next checkpoint covers all fifteen.
    let admin = s.p.admin;
    let covered = || async move {
        let (_, note) = admin_bytes(admin, "/admin/v1/log/checkpoint").await;
        String::from_utf8_lossy(&note).lines().nth(1) == Some("15")
    };
    wait::until_async(
        "a checkpoint of all 15 entries",
        Duration::from_secs(10),
        covered,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(mirror(s.p.admin, dir.path(), &[]).await, 15);
    assert_eq!(python_verdict(dir.path())["ok"], true);
}
