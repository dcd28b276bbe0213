//! A running sidecar's receipt log, mirrored as a monitor would fetch it (SPEC §9: checkpoint,
//! key, hash tiles, entry bundles) into a directory, and checked there by
//! `tests/log/verify_log.py`: RFC 9162 and C2SP written from the texts, Ed25519 by
//! pyca/cryptography, JCS by `rfc8785`; none of our code.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use http::{Request, StatusCode};
use palisade_policy::log::tiles::{TileKind, TilePath};
use serde_json::Value;

use super::{full, http1_client, send};

/// `GET` an admin path: status and body bytes.
pub async fn admin_bytes(admin: SocketAddr, path: &str) -> (StatusCode, Vec<u8>) {
    let req = Request::get(format!("http://{admin}{path}"))
        .body(full(""))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    (parts.status, body.to_vec())
}

/// Mirrors the log the admin listener at `admin` serves into `dir`, with `envelopes` (as
/// clients received them) under `envelopes/`; the size of the tree mirrored. A bundle answered
/// 410 (gone under retention) is listed in `gone`.
pub async fn mirror(admin: SocketAddr, dir: &Path, envelopes: &[Value]) -> u64 {
    let (status, note) = admin_bytes(admin, "/admin/v1/log/checkpoint").await;
    assert_eq!(status, StatusCode::OK);
    std::fs::write(dir.join("checkpoint"), &note).unwrap();
    let (status, vkey) = admin_bytes(admin, "/admin/v1/log/key").await;
    assert_eq!(status, StatusCode::OK);
    std::fs::write(dir.join("vkey"), &vkey).unwrap();
    let size: u64 = String::from_utf8_lossy(&note)
        .lines()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let mut gone = String::new();
    let mut kinds = vec![TileKind::Entries];
    kinds.extend((0..8).map(|level| TileKind::Hashes { level }));
    for kind in kinds {
        for tile in (0..).map_while(|i| TilePath::in_tree(kind, i, size)) {
            let path = tile.path();
            let (status, data) = admin_bytes(admin, &format!("/admin/v1/log/{path}")).await;
            match status {
                StatusCode::OK => {
                    let file = dir.join(&path);
                    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
                    std::fs::write(file, data).unwrap();
                }
                StatusCode::GONE if kind == TileKind::Entries => {
                    gone.push_str(&path);
                    gone.push('\n');
                }
                other => panic!("{path}: {other}"),
            }
        }
    }
    std::fs::write(dir.join("gone"), gone).unwrap();
    let env_dir = dir.join("envelopes");
    std::fs::create_dir_all(&env_dir).unwrap();
    for (i, e) in envelopes.iter().enumerate() {
        std::fs::write(
            env_dir.join(format!("{i:05}.json")),
            serde_json::to_vec(e).unwrap(),
        )
        .unwrap();
    }
    size
}

/// What `tests/log/verify_log.py` says of the log mirrored in `dir` (one JSON line).
pub fn python_verdict(dir: &Path) -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(python.exists(), "run scripts/test.sh: it makes the venv");
    let out = Command::new(python)
        .arg(repo.join("tests/log/verify_log.py"))
        .arg(dir)
        .output()
        .unwrap();
    let line = String::from_utf8_lossy(&out.stdout);
    let v: Value = serde_json::from_str(line.trim()).unwrap_or_else(|_| {
        panic!(
            "verify_log.py: {line} {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(out.status.success(), v["ok"] == true, "{v}");
    v
}

/// Mirrors the log and asserts that the independent verifier accepts all of it; its verdict.
pub async fn assert_log_verifies_independently(admin: SocketAddr, envelopes: &[Value]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let size = mirror(admin, dir.path(), envelopes).await;
    let v = python_verdict(dir.path());
    assert_eq!(v["ok"], true, "{v}");
    assert_eq!(v["size"].as_u64(), Some(size), "{v}");
    assert_eq!(v["envelopes"].as_u64(), Some(envelopes.len() as u64), "{v}");
    v
}
