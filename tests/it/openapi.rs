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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_meet_the_imported_contracts_through_a_running_sidecar() {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    let mut epoch = 0u64;
    let (mut forwarded, mut refused, mut mutations) = (0, 0, 0);
    for (doc, _) in DOCS {
        // OpenAPI does not say whether a write can be undone, so the import leaves it
        // `unknown`, which admits no compensating lease (check 8). The operator states it:
        // every write operation compensable, by name.
        let first = tempfile::tempdir().unwrap();
        import(&testdata(doc), first.path(), &[]);
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
        import(&testdata(doc), dir.path(), &args);
        let b = BundleFiles::in_dir(dir.path());
        let s = start_configured(
            Upstream::start().await,
            tempfile::tempdir().unwrap(),
            "",
            &b.rich_toml(""),
        );
        let judged = Command::new(python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/openapi/examples.py"))
            .arg(testdata(doc))
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
        assert!(!cases.is_empty(), "{doc}: no request examples found");
        for case in &cases {
            let path = case["template"]
                .as_str()
                .unwrap()
                .split('/')
                .map(|seg| {
                    if seg.starts_with('{') {
                        "00000000-0000-0000-0000-000000000001"
                    } else {
                        seg
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
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
                let req = Request::builder()
                    .method(case["method"].as_str().unwrap())
                    .uri(s.p.url(&path))
                    .header("content-type", "application/json")
                    .header("xero-tenant-id", TENANT)
                    .header(
                        "agent-compensation-lease",
                        lease_for(&agent, &path, epoch, |_| {}),
                    )
                    .header(
                        "agent-compensation-inverse",
                        URL_SAFE_NO_PAD.encode(inverse_for(&path)),
                    )
                    .body(full(bytes.clone()))
                    .unwrap();
                let (parts, answer) = send(&client, req).await;
                let name = &case["name"];
                let writes: Vec<_> = s.upstream.requests()[before..]
                    .iter()
                    .filter(|r| r.method != "GET")
                    .cloned()
                    .collect();
                if valid {
                    forwarded += 1;
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
                    assert_eq!(writes[0].path_and_query, path);
                } else {
                    refused += 1;
                    assert_eq!(
                        parts.status,
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "{name}: {body}"
                    );
                    let problem: Value = serde_json::from_slice(&answer).unwrap();
                    assert_eq!(problem["code"], "ERR_CONTRACT_INPUT", "{name}");
                    if let Some(at) = at {
                        mutations += 1;
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
        let events = drift_events(&s.p);
        assert!(
            events.iter().any(|e| e["code"] == "ERR_CONTRACT_INPUT"),
            "{doc}: a drift event per refusal: {events:?}"
        );
    }
    // The documents' examples include both kinds; the test must have seen both.
    assert!(
        forwarded >= 4 && refused >= 4 && mutations >= 20,
        "forwarded {forwarded}, refused {refused}, one-property mutations {mutations}"
    );
    eprintln!("Xero examples: {forwarded} forwarded, {refused} refused ({mutations} one-property mutations, each at its location)");
}

/// `--assert-formats` reaches the data plane: a malformed uuid in a body is refused only when
/// the contract asserts formats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asserted_formats_are_checked_by_the_sidecar() {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let client = http1_client();
    // The document's own example for createAssetType, with one account id malformed.
    let body = serde_json::json!({
        "assetTypeName": "Machinery11004",
        "fixedAssetAccountId": "not-a-uuid",
        "depreciationExpenseAccountId": "d1602f69-f900-4616-8d34-90af393fa368",
        "accumulatedDepreciationAccountId": "9195cadd-8645-41e6-9f67-7bcd421defe8",
        "bookDepreciationSetting": {"depreciationMethod": "DiminishingValue100",
            "averagingMethod": "ActualDays", "depreciationRate": 0.05,
            "depreciationCalculationMethod": "None"}
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    for (assert_formats, want) in [
        (false, StatusCode::OK),
        (true, StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--reversibility",
            "createAssetType=compensable",
            "--operations",
            "createAssetType",
        ];
        if assert_formats {
            args.push("--assert-formats");
        }
        import(&testdata("xero_assets.yaml"), dir.path(), &args);
        let b = BundleFiles::in_dir(dir.path());
        let s = start_configured(
            Upstream::start().await,
            tempfile::tempdir().unwrap(),
            "",
            &b.rich_toml(""),
        );
        let path = "/assets.xro/1.0/AssetTypes";
        let req = Request::post(s.p.url(path))
            .header("content-type", "application/json")
            .header("xero-tenant-id", TENANT)
            .header(
                "agent-compensation-lease",
                lease_for(&agent, path, 1, |_| {}),
            )
            .header(
                "agent-compensation-inverse",
                URL_SAFE_NO_PAD.encode(inverse_for(path)),
            )
            .body(full(bytes.clone()))
            .unwrap();
        let (parts, answer) = send(&client, req).await;
        let writes = s
            .upstream
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count();
        if assert_formats {
            assert_eq!(parts.status, want, "{}", String::from_utf8_lossy(&answer));
            let problem: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(problem["code"], "ERR_CONTRACT_INPUT");
            assert_eq!(problem["violationLocation"], "/fixedAssetAccountId");
            assert_eq!(writes, 0, "nothing forwarded");
        } else {
            assert_ne!(
                parts.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{}",
                String::from_utf8_lossy(&answer)
            );
            assert_eq!(writes, 1, "a format is an annotation by default: forwarded");
        }
    }
}

/// Xero's `createAssetType` imported into `dir`: its contract's file and document.
fn imported_create_asset_type(dir: &Path) -> (PathBuf, Value) {
    import(
        &testdata("xero_assets.yaml"),
        dir,
        &["--operations", "createAssetType"],
    );
    let bundle = BundleFiles::in_dir(dir);
    (
        bundle.contract_path("createAssetType"),
        bundle.contract("createAssetType"),
    )
}

/// `palisade lock compat` on an imported contract and edited revisions of it.
#[test]
fn compat_tells_compatible_from_breaking_revisions() {
    let dir = tempfile::tempdir().unwrap();
    let (old_path, old) = imported_create_asset_type(dir.path());
    let compat = |new: &Value| {
        let p = dir.path().join("new.json");
        std::fs::write(&p, serde_json::to_vec(new).unwrap()).unwrap();
        let run = Command::new(bin())
            .args(["lock", "compat"])
            .arg(&old_path)
            .arg(&p)
            .output()
            .unwrap();
        let v: Value = serde_json::from_slice(&run.stdout).unwrap();
        // The flag spelling says the same.
        let flags = Command::new(bin())
            .args(["lock", "compat", "--from"])
            .arg(&old_path)
            .arg("--to")
            .arg(&p)
            .output()
            .unwrap();
        assert_eq!(flags.status.code(), run.status.code());
        assert_eq!(flags.stdout, run.stdout);
        (run.status.code(), v)
    };
    let ok = Some(0);
    // Unchanged: compatible, exit 0.
    let (code, v) = compat(&old);
    assert_eq!(code, ok, "{v}");
    assert_eq!(v["outcome"], "compatible");
    // A new required request member breaks old callers; the finding says where.
    let mut stricter = old.clone();
    stricter["structural"]["input"]["$defs"]["AssetType"]["required"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!("fixedAssetAccountId"));
    let (code, v) = compat(&stricter);
    assert_eq!(code, Some(3), "breaking exits 3: {v}");
    assert_eq!(v["outcome"], "breaking", "{v}");
    assert!(
        v["findings"].to_string().contains("fixedAssetAccountId"),
        "{v}"
    );
    // Dropping a required request member accepts more: compatible.
    let mut looser = old.clone();
    looser["structural"]["input"]["$defs"]["AssetType"]["required"] =
        serde_json::json!(["assetTypeName"]);
    let (code, v) = compat(&looser);
    assert_eq!(code, ok, "{v}");
    // A construct outside the decided fragment: unknown, never compatible.
    let mut opaque = old.clone();
    opaque["structural"]["input"]["$defs"]["AssetType"]["properties"]["assetTypeName"]["pattern"] =
        serde_json::json!("^[A-Z]");
    let (code, v) = compat(&opaque);
    assert_eq!(code, Some(4), "unknown exits 4: {v}");
    assert_eq!(v["outcome"], "unknown", "{v}");
    // A file that is not JSON: exit 1, nothing on stdout.
    let junk = dir.path().join("junk.json");
    std::fs::write(&junk, b"{not json").unwrap();
    let run = Command::new(bin())
        .args(["lock", "compat"])
        .arg(&old_path)
        .arg(&junk)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(run.stdout.is_empty());
    assert!(String::from_utf8_lossy(&run.stderr).contains("junk.json"));
}

/// Re-importing an edited revision of a real document into the same directory: a breaking
/// update is refused (exit 3, nothing written) until `--approve`, which writes a migration
/// record per breaking capability and pins them in the new lockfile (RICH §15.2).
#[test]
fn a_breaking_reimport_needs_approval_and_leaves_a_migration_record() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    let first = import(&testdata("xero_assets.yaml"), &out, &[]);
    assert_eq!(first["changes"], serde_json::json!([]));
    // The same document again: nothing changed, nothing to approve.
    let again = import(&testdata("xero_assets.yaml"), &out, &[]);
    assert_eq!(again["digest"], first["digest"]);

    // Revision 2 requires fixedAssetAccountId when an asset type is created.
    let text = std::fs::read_to_string(testdata("xero_assets.yaml")).unwrap();
    let edited = text.replacen(
        "        - bookDepreciationSetting\n      properties:\n        assetTypeId:",
        "        - bookDepreciationSetting\n        - fixedAssetAccountId\n      properties:\n        assetTypeId:",
        1,
    );
    assert_ne!(edited, text, "the edit applies");
    let v2 = dir.path().join("xero_assets_v2.yaml");
    std::fs::write(&v2, edited).unwrap();
    let before = files(&out);
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(["lock", "import-openapi"])
            .arg(&v2)
            .arg("--out")
            .arg(&out)
            .args(args)
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(3), "{err}");
    assert!(err.contains("createAssetType: breaking"), "{err}");
    assert!(err.contains("fixedAssetAccountId"), "{err}");
    assert!(err.contains("--approve"), "{err}");
    assert_eq!(files(&out), before, "nothing written without approval");

    let approved = run(&["--approve"]);
    assert!(
        approved.status.success(),
        "{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    let summary: Value = serde_json::from_slice(&approved.stdout).unwrap();
    let changes = summary["changes"].as_array().unwrap();
    let created = changes
        .iter()
        .find(|c| c["capability"] == "createAssetType")
        .unwrap();
    assert_eq!(created["outcome"], "breaking");
    assert_eq!(created["approved"], true);
    // The new lockfile pins each record; each record names both contracts and the lockfile
    // to roll back to, which is kept beside it.
    let lock: Value =
        serde_json::from_slice(&std::fs::read(out.join("lock.json")).unwrap()).unwrap();
    let entries = lock["migrations"].as_array().unwrap();
    assert_eq!(
        entries.len(),
        changes.iter().filter(|c| c["approved"] == true).count()
    );
    let entry = entries
        .iter()
        .find(|e| e["capability"] == "createAssetType")
        .unwrap();
    let hex = entry["recordDigest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha-256:");
    let record: Value = serde_json::from_slice(
        &std::fs::read(out.join("migrations").join(format!("{hex}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(
        palisade_policy::digest::Sha256Digest::of_json(&record).to_hex(),
        hex,
        "the record is what the lockfile pins"
    );
    assert_eq!(record["outcome"], "breaking");
    assert_eq!(record["sourceDigest"], created["from"]);
    assert_eq!(record["targetDigest"], created["to"]);
    assert_eq!(record["rollback"]["lockfileDigest"], first["digest"]);
    let old_hex = first["digest"]
        .as_str()
        .unwrap()
        .trim_start_matches("sha-256:");
    assert!(out
        .join("migrations")
        .join(format!("lock-{old_hex}.json"))
        .exists());
    // And the new bundle compiles.
    let check = lock_check(&out.join("lock.json"), &out.join("contracts"));
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
}

/// `lock compat --connector`: a breaking revision of an imported Xero contract becomes
/// `compatible-with-connector` (exit 5) only with a qualified connector pinned OLD → NEW.
#[test]
fn a_qualified_connector_makes_a_breaking_revision_compatible_with_connector() {
    use palisade_policy::digest::Sha256Digest;
    use serde_json::json;
    let dir = tempfile::tempdir().unwrap();
    let (old_path, old) = imported_create_asset_type(dir.path());
    let mut new = old.clone();
    new["structural"]["input"]["$defs"]["AssetType"]["required"]
        .as_array_mut()
        .unwrap()
        .push(json!("fixedAssetAccountId"));
    let new_path = dir.path().join("new.json");
    std::fs::write(&new_path, serde_json::to_vec(&new).unwrap()).unwrap();
    let pin = |v: &Value| format!("sha-256:{}", Sha256Digest::of_json(v).to_hex());
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
        p
    };
    // Old callers do not send the account: the connector supplies the default one.
    let connector = |source: &Value, target: &Value| {
        json!({"id": "urn:test:c/asset-type-v2", "class": "T1", "purpose": "structural-adaptation",
               "sourceDigest": pin(source), "targetDigest": pin(target),
               "transform": {"lang": "jmespath",
                             "expr": "merge(@, {fixedAssetAccountId: '24e260f1-bfc4-4766-ad7f-8a8ce01de879'})"},
               "preconditions": {}, "postconditions": {}, "qualification": "urn:test:q"})
    };
    let forward = connector(&old, &new);
    let qualification = |c: &Value, expiry: &str| {
        json!({"subjectUri": "urn:test:c/asset-type-v2", "subjectDigest": pin(c),
               "profile": "urn:test:profile", "evidence": [], "scope": "test", "findings": [],
               "decision": "qualified", "qualifier": "urn:test:qualifier", "expiry": expiry})
    };
    let run = |conn: &Value, qual: Option<&Value>| {
        let mut cmd = Command::new(bin());
        cmd.args(["lock", "compat"])
            .arg(&old_path)
            .arg(&new_path)
            .arg("--connector")
            .arg(write("conn.json", conn));
        if let Some(q) = qual {
            cmd.arg("--qualification").arg(write("qual.json", q));
        }
        let out = cmd.output().unwrap();
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        (out.status.code(), v)
    };
    let (code, v) = run(
        &forward,
        Some(&qualification(&forward, "2099-01-01T00:00:00Z")),
    );
    assert_eq!(code, Some(5), "{v}");
    assert_eq!(v["outcome"], "compatible-with-connector");
    assert_eq!(v["connectors"][0]["bridges"], "input");
    // Unqualified, expired, or pinned the other way: it bridges nothing; still breaking.
    let (code, v) = run(&forward, None);
    assert_eq!(code, Some(3), "{v}");
    assert!(
        v["connectors"][0]["problems"]
            .to_string()
            .contains("unqualified"),
        "{v}"
    );
    let (code, v) = run(
        &forward,
        Some(&qualification(&forward, "2020-01-01T00:00:00Z")),
    );
    assert_eq!(code, Some(3), "{v}");
    assert!(
        v["connectors"][0]["problems"]
            .to_string()
            .contains("expired"),
        "{v}"
    );
    let backward = connector(&new, &old);
    let (code, v) = run(
        &backward,
        Some(&qualification(&backward, "2099-01-01T00:00:00Z")),
    );
    assert_eq!(code, Some(3), "an output bridge does not fix an input: {v}");
    assert_eq!(v["connectors"][0]["bridges"], "output");
}

/// The imported path and query parameters (`structural.parameters`) are checked on the data
/// plane: a read with a query value its schema refuses, or a write whose path parameter is not
/// a uuid when formats are asserted, is 422 with the parameter's location, and reaches no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_parameters_are_checked_on_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    import(
        &testdata("xero-projects.yaml"),
        dir.path(),
        &[
            "--assert-formats",
            "--reversibility",
            "patchProject=compensable",
        ],
    );
    let b = BundleFiles::in_dir(dir.path());
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &b.rich_toml(""),
    );
    let client = http1_client();
    let get = |pq: &str| {
        Request::get(s.p.url(&format!("/projects.xro/2.0/Projects{pq}")))
            .header("xero-tenant-id", TENANT)
            .body(full(""))
            .unwrap()
    };
    // Within the schemas: forwarded as sent, query and all.
    let ok = "?pageSize=50&page=2&states=INPROGRESS&contactID=00000000-0000-0000-0000-000000000001";
    let (parts, _) = send(&client, get(ok)).await;
    assert_eq!(parts.status, StatusCode::OK);
    let seen = s.upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path_and_query,
        format!("/projects.xro/2.0/Projects{ok}")
    );
    for (pq, location) in [
        ("?pageSize=abc", "/query/pageSize"),
        ("?pageSize=501", "/query/pageSize"),
        ("?pageSize=0", "/query/pageSize"),
        ("?page=1&page=2", "/query/page"),
        ("?contactID=not-a-uuid", "/query/contactID"),
    ] {
        let (parts, answer) = send(&client, get(pq)).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            parts.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{pq}: {doc}"
        );
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{pq}");
        assert_eq!(doc["violationLocation"], location, "{pq}");
        assert!(
            !doc.to_string().contains("not-a-uuid"),
            "no value echoed: {doc}"
        );
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    // The required header parameter: missing, or given twice (a scalar), refused with its
    // lower-case location, whatever spelling the request used.
    let url = s.p.url(&format!("/projects.xro/2.0/Projects{ok}"));
    let missing = Request::get(&url).body(full("")).unwrap();
    let twice = Request::get(&url)
        .header("Xero-Tenant-Id", TENANT)
        .header("XERO-TENANT-ID", "another")
        .body(full(""))
        .unwrap();
    // Bytes that are not text (obs-text, which HTTP/1.1 still carries): refused, not read lossily.
    let opaque = Request::get(&url)
        .header(
            "xero-tenant-id",
            http::HeaderValue::from_bytes(b"t\xfa\xfb").unwrap(),
        )
        .body(full(""))
        .unwrap();
    for req in [missing, twice, opaque] {
        let (parts, answer) = send(&client, req).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT");
        assert_eq!(doc["violationLocation"], "/header/xero-tenant-id", "{doc}");
        assert!(!doc.to_string().contains(TENANT) && !doc.to_string().contains("another"));
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "refused reads reached no one"
    );

    // A write: the path parameter is a uuid (formats asserted), the body is fine.
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = "/projects.xro/2.0/Projects/not-a-uuid";
    let req = Request::patch(s.p.url(path))
        .header("content-type", "application/json")
        .header("xero-tenant-id", TENANT)
        .header(
            "agent-compensation-lease",
            lease_for(&agent, path, 1, |_| {}),
        )
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        )
        .body(full(r#"{"status":"INPROGRESS"}"#))
        .unwrap();
    let (parts, answer) = send(&client, req).await;
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{doc}");
    assert_eq!(doc["violationLocation"], "/path/projectId", "{doc}");
    assert!(
        !doc.to_string().contains("not-a-uuid"),
        "no value echoed: {doc}"
    );
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "the refused write reached no one"
    );
    let events = drift_events(&s.p);
    for location in [
        "/query/pageSize",
        "/path/projectId",
        "/header/xero-tenant-id",
    ] {
        assert!(
            events.iter().any(|e| e["violationLocation"] == location),
            "{location}: {events:?}"
        );
    }
}

/// Issue 37: a document using every `$ref` form (`tests/openapi/refs.yaml`) imports with no
/// operation unchecked because of a `$ref` it could follow; the two it cannot follow (another
/// document, a dangling ref) are listed with their reason; the summary line says so; and an
/// operation whose body, parameters and responses all come by `$ref` is checked end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ref_form_is_followed_and_what_cannot_be_is_named() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/openapi/refs.yaml");
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(bin())
        .args(["lock", "import-openapi"])
        .arg(&doc)
        .arg("--out")
        .arg(dir.path())
        .args(["--reversibility", "putStock=compensable"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    let line = summary["summary"].as_str().unwrap();
    assert!(
        line.starts_with("imported 5 operations: 3 checked fully, 0 checked partly, 2 unchecked"),
        "{line}"
    );
    assert!(
        stderr.trim_end().ends_with(line),
        "the summary is printed last: {stderr}"
    );
    assert!(line.contains("postElsewhere: its request body: `$ref` other.yaml#/components/requestBodies/Thing names another document"), "{line}");
    assert!(line.contains("postDangling: its request body: `$ref` #/components/requestBodies/Nothing names nothing in the document"), "{line}");
    let untranslated = summary["untranslated"].to_string();
    assert!(
        !untranslated.contains("putStock") && !untranslated.contains("/stock"),
        "{untranslated}"
    );

    let b = BundleFiles::in_dir(dir.path());
    let put = b.contract("putStock");
    // The body came through a chain of two request-body refs, its schema through a schema ref.
    let input = &put["structural"]["input"];
    assert_eq!(input["$ref"], "#/$defs/Stock");
    assert_eq!(
        input["$defs"]["Stock"]["required"],
        json!(["qty", "warehouse"])
    );
    assert_eq!(
        put["structural"]["parameters"]["query"]["warehouse"]["schema"]["$ref"],
        "#/$defs/Warehouse"
    );
    assert_eq!(
        put["structural"]["parameters"]["path"]["sku"]["required"],
        true
    );
    assert_eq!(put["structural"]["output"]["$ref"], "#/$defs/Stock");
    assert!(
        put["error"]["responses"]["422"].is_object(),
        "{}",
        put["error"]
    );
    // The recursive schema and the percent-encoded one.
    assert_eq!(
        b.contract("postTree")["structural"]["input"]["$defs"]["Node"]["properties"]["children"]
            ["items"]["$ref"],
        "#/$defs/Node"
    );
    assert_eq!(
        b.contract("postItems")["structural"]["input"]["$ref"],
        "#/$defs/Stock%20Line"
    );

    // Through a running sidecar: valid forwarded, each one-property mutation refused 422 with
    // its location, and nothing of them forwarded.
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &b.rich_toml(""),
    );
    let client = http1_client();
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut epoch = 0;
    let mut put_stock = |pq: &str, body: &str| {
        epoch += 1;
        let path = format!("/api/v2{pq}");
        Request::put(s.p.url(&path))
            .header("content-type", "application/json")
            .header(
                "agent-compensation-lease",
                lease_for(&agent, &path, epoch, |_| {}),
            )
            .header(
                "agent-compensation-inverse",
                URL_SAFE_NO_PAD.encode(inverse_for(&path)),
            )
            .body(full(body.to_owned()))
            .unwrap()
    };
    let valid = r#"{"qty":5,"warehouse":"BER-1"}"#;
    // A valid write is forwarded as sent; the test upstream's fixed answer is not a `Stock`,
    // and the output contract (a `$ref`'d response's `$ref`'d schema) catches it.
    let (parts, answer) = send(&client, put_stock("/stock/BOLT-9?warehouse=HAM-2", valid)).await;
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_OUTPUT", "{doc}");
    let puts = || -> Vec<String> {
        s.upstream
            .requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .map(|r| r.path_and_query)
            .collect()
    };
    assert_eq!(puts(), ["/api/v2/stock/BOLT-9?warehouse=HAM-2"]);
    for (pq, body, location) in [
        ("/stock/BOLT-9", r#"{"qty":-1,"warehouse":"BER-1"}"#, "/qty"),
        (
            "/stock/BOLT-9",
            r#"{"qty":5,"warehouse":"PAR-3"}"#,
            "/warehouse",
        ),
        ("/stock/BOLT-9", r#"{"qty":5}"#, ""),
        (
            "/stock/BOLT-9",
            r#"{"qty":5,"warehouse":"BER-1","extra":1}"#,
            "",
        ),
        ("/stock/bolt_9", valid, "/path/sku"),
        ("/stock/BOLT-9?warehouse=PAR-3", valid, "/query/warehouse"),
    ] {
        let (parts, answer) = send(&client, put_stock(pq, body)).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            parts.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{pq} {body}: {doc}"
        );
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{doc}");
        assert_eq!(doc["violationLocation"], location, "{pq} {body}: {doc}");
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert_eq!(puts().len(), 1, "a refused write reached the upstream");
    let events = drift_events(&s.p);
    assert!(
        events
            .iter()
            .any(|e| e["violationLocation"] == "/query/warehouse"),
        "{events:?}"
    );
}
