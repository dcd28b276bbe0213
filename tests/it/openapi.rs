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
mod swagger2;

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

/// A sidecar in front of a recording upstream, enforcing the bundle `b`.
async fn enforcing(b: &BundleFiles) -> Setup {
    start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &b.rich_toml(""),
    )
}

/// A JSON write of `method` to `target` (path and query, as sent) through `p`, leased by the
/// test agent at `epoch` for that target, with the inverse its lease names.
fn leased(p: &Palisade, method: &str, target: &str, epoch: u64) -> http::request::Builder {
    let agent = KeyPair::from_seed(AGENT_SEED);
    Request::builder()
        .method(method)
        .uri(p.url(target))
        .header("content-type", "application/json")
        .header(
            "agent-compensation-lease",
            lease_for(&agent, target, epoch, |_| {}),
        )
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(target)),
        )
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

/// `doc` imported twice: `operations` operations, the same bytes both times, and a bundle
/// `lock check` passes. The first import's directory (kept alive) and its bundle.
fn imported_twice(doc: &str, operations: usize) -> (tempfile::TempDir, BundleFiles) {
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
    let bundle = BundleFiles::in_dir(a.path());
    (a, bundle)
}

#[test]
fn every_operation_is_imported_deterministically_and_compiles() {
    for (doc, operations) in DOCS {
        let (_dir, bundle) = imported_twice(doc, operations);
        // Provenance: the document's own bytes and version, declared, not qualified.
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

/// How a document's examples fared through a sidecar: forwarded as valid, refused as
/// invalid, and of those the one-property mutations refused at their property.
#[derive(Debug, Default)]
struct Tally {
    forwarded: usize,
    refused: usize,
    mutations: usize,
}

impl Tally {
    fn add(&mut self, other: Tally) {
        self.forwarded += other.forwarded;
        self.refused += other.refused;
        self.mutations += other.mutations;
    }
}

/// Imports `doc` (every write stated compensable: the document cannot say, and the import
/// leaves it `unknown`, which admits no compensating lease), runs a sidecar on the bundle, and
/// sends each request example `tests/openapi/examples.py` finds, and each of its one-property
/// mutations, as a leased write. Python's `jsonschema` judges each body; the sidecar must
/// agree: a valid one reaches the upstream byte for byte, an invalid one is refused 422
/// `ERR_CONTRACT_INPUT` at the broken property, with a rejection receipt and a drift event,
/// and reaches no one.
async fn examples_through_a_sidecar(doc: &Path) -> Tally {
    let client = http1_client();
    let first = tempfile::tempdir().unwrap();
    import(doc, first.path(), &[]);
    let mut args = Vec::new();
    for (name, cap) in BundleFiles::in_dir(first.path()).lock()["capabilities"]
        .as_object()
        .unwrap()
    {
        if !cap["operation"].as_str().unwrap().starts_with("GET ") {
            args.push("--reversibility".to_owned());
            args.push(format!("{name}=compensable"));
        }
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().unwrap();
    import(doc, dir.path(), &args);
    let s = enforcing(&BundleFiles::in_dir(dir.path())).await;
    let judged = Command::new(python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/openapi/examples.py"))
        .arg(doc)
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        judged.status.success(),
        "{}",
        String::from_utf8_lossy(&judged.stderr)
    );
    let cases: Vec<Value> = String::from_utf8(judged.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        !cases.is_empty(),
        "{}: no request examples found",
        doc.display()
    );
    let mut tally = Tally::default();
    let mut epoch = 0u64;
    for case in &cases {
        let path = case["path"].as_str().unwrap().to_owned();
        let target = match case["query"].as_str().unwrap() {
            "" => path.clone(),
            q => format!("{path}?{q}"),
        };
        let mut bodies = vec![(
            case["example"].clone(),
            case["valid"].as_bool().unwrap(),
            None,
        )];
        for m in case["mutations"].as_array().unwrap() {
            bodies.push((m["body"].clone(), false, m["at"].as_str()));
        }
        for (body, valid, at) in bodies {
            epoch += 1;
            let bytes = serde_json::to_vec(&body).unwrap();
            let before = s.upstream.requests().len();
            // The lease names the resource as requested, its query included.
            let mut req = leased(&s.p, case["method"].as_str().unwrap(), &target, epoch);
            for (k, v) in case["headers"].as_object().unwrap() {
                req = req.header(k.as_str(), v.as_str().unwrap());
            }
            let (parts, answer) = send(&client, req.body(full(bytes.clone())).unwrap()).await;
            let name = &case["name"];
            let writes: Vec<_> = s.upstream.requests()[before..]
                .iter()
                .filter(|r| r.method != "GET")
                .cloned()
                .collect();
            if valid {
                tally.forwarded += 1;
                assert_ne!(
                    parts.status,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{name}: {}",
                    String::from_utf8_lossy(&answer)
                );
                assert_eq!(
                    writes.len(),
                    1,
                    "{name}: the write reached the upstream once: {} {}",
                    parts.status,
                    String::from_utf8_lossy(&answer)
                );
                assert_eq!(
                    writes[0].body_sha256,
                    sha256_hex(&bytes),
                    "{name}: byte for byte"
                );
                assert_eq!(writes[0].path_and_query, target);
            } else {
                tally.refused += 1;
                assert_eq!(
                    parts.status,
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "{name}: {body}"
                );
                let problem: Value = serde_json::from_slice(&answer).unwrap();
                assert_eq!(problem["code"], "ERR_CONTRACT_INPUT", "{name}");
                if let Some(at) = at {
                    tally.mutations += 1;
                    assert_eq!(problem["violationLocation"], at, "{name}: {body}");
                }
                assert_receipt_verifies(&problem["receipt"], "rejection");
                assert!(
                    writes.is_empty(),
                    "{name}: a refused write reached the upstream"
                );
            }
        }
    }
    if tally.refused > 0 {
        let events = drift_events(&s.p);
        assert!(
            events.iter().any(|e| e["code"] == "ERR_CONTRACT_INPUT"),
            "{}: a drift event per refusal: {events:?}",
            doc.display()
        );
    }
    tally
}
