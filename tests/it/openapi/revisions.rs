//! Revisions of an imported API: compatible or breaking, approval and migration records,
//! qualified connectors.

use super::*;

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
