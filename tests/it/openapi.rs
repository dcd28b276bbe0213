//! `palisade lock import-openapi` on real documents (`testdata/openapi/`, Xero's
//! assets and projects APIs): every operation imported, deterministic, the bundle compiles and
//! loads into a running sidecar, and requests built from the document's own examples meet the
//! imported contracts through a real upstream. Whether an example is valid is decided by an
//! independent validator (Python's `jsonschema`, `tests/openapi/examples.py`), never by us.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::{lock_check, BundleFiles};
use support::writes::*;
use support::*;

mod refs;
mod revisions;
mod running;

const DOCS: [(&str, usize); 2] = [("xero_assets.yaml", 6), ("xero-projects.yaml", 16)];

/// Every Xero operation requires the `Xero-Tenant-Id` header (a header parameter).
const TENANT: &str = "00000000-0000-0000-0000-00000000000a";

fn testdata(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata/openapi")
        .join(name)
}

fn python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pyenv/bin/python")
}

fn import(doc: &Path, out: &Path, args: &[&str]) -> Value {
    let run = Command::new(bin())
        .args(["lock", "import-openapi"])
        .arg(doc)
        .arg("--out")
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

/// Every file under `dir`, by relative path, with its bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in walk(dir) {
        out.push((
            entry.strip_prefix(dir).unwrap().to_owned(),
            std::fs::read(&entry).unwrap(),
        ));
    }
    out.sort();
    out
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn every_operation_is_imported_deterministically_and_compiles() {
    for (doc, operations) in DOCS {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let summary = import(&testdata(doc), a.path(), &[]);
        import(&testdata(doc), b.path(), &[]);
        assert_eq!(summary["operations"], operations, "{doc}: {summary}");
        assert_eq!(
            files(a.path()),
            files(b.path()),
            "{doc}: the same input gives the same bytes"
        );
        let check = lock_check(&a.path().join("lock.json"), &a.path().join("contracts"));
        assert!(
            check.status.success(),
            "{doc}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
        // Provenance: the document's own bytes and version, declared, not qualified.
        let bundle = BundleFiles::in_dir(a.path());
        let bytes = std::fs::read(testdata(doc)).unwrap();
        let want = format!("sha-256:{}", sha256_hex(&bytes));
        for (name, cap) in bundle.lock()["capabilities"].as_object().unwrap() {
            let c = bundle.contract(name);
            let p = &c["provenance"];
            assert_eq!(p["documentDigest"], want.as_str(), "{name}");
            assert_eq!(p["infoVersion"], "16.1.0", "{name}");
            assert_eq!(
                (p["evidence"].as_str(), p["qualified"].as_bool()),
                (Some("declared"), Some(false))
            );
            assert_eq!(
                c["operational"]["reversibility"], "unknown",
                "{name}: OpenAPI does not say"
            );
            let method = cap["operation"]
                .as_str()
                .unwrap()
                .split(' ')
                .next()
                .unwrap();
            let effect = c["operational"]["sideEffect"].as_str().unwrap();
            let want_effect = match method {
                "GET" => "read",
                "PUT" | "DELETE" => "idempotent",
                _ => "write",
            };
            assert_eq!(effect, want_effect, "{name}");
        }
    }
    // The base path comes from `servers` unless given; reversibility is the operator's to set.
    let d = tempfile::tempdir().unwrap();
    import(
        &testdata("xero_assets.yaml"),
        d.path(),
        &[
            "--base-path",
            "/erp/",
            "--reversibility",
            "createAsset=compensable",
        ],
    );
    assert_eq!(
        BundleFiles::in_dir(d.path()).lock()["capabilities"]["createAsset"]["operation"],
        "POST /erp/Assets"
    );
    // A selection by operationId or by route; formats asserted on request.
    let sel = tempfile::tempdir().unwrap();
    let summary = import(
        &testdata("xero-projects.yaml"),
        sel.path(),
        &[
            "--operations",
            "get*",
            "--operations",
            "DELETE /Projects/*",
            "--assert-formats",
        ],
    );
    assert_eq!(summary["operations"], 9, "{summary}");
    let selected = BundleFiles::in_dir(sel.path());
    for (name, cap) in selected.lock()["capabilities"].as_object().unwrap() {
        let op = cap["operation"].as_str().unwrap();
        assert!(
            name.starts_with("get") || op.starts_with("DELETE "),
            "{name} {op}"
        );
        assert_eq!(
            selected.contract(name)["structural"]["formats"],
            "assert",
            "{name}"
        );
    }
    // A reversibility for an operation that does not exist is refused, not ignored.
    let run = Command::new(bin())
        .args(["lock", "import-openapi"])
        .arg(testdata("xero_assets.yaml"))
        .arg("--out")
        .arg(d.path().join("x"))
        .args(["--reversibility", "createAssett=reversible"])
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("createAssett"));
}
