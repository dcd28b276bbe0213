//! `palisade lock rehash` (issue 59, item 4): a reviewed edit of a contract file, its digest
//! recomputed, the file renamed and the lockfile updated; `lock check` then loads the bundle
//! as written. A file that is not JSON, or an edit that would not load, changes nothing.

use super::*;

/// The example bundle copied into a directory of the test's own.
fn example_bundle() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/erp");
    std::fs::create_dir(dir.path().join("contracts")).unwrap();
    std::fs::copy(root.join("lock.json"), dir.path().join("lock.json")).unwrap();
    for e in std::fs::read_dir(root.join("contracts")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.path().join("contracts").join(e.file_name())).unwrap();
    }
    dir
}

fn lock_args<'a>(cmd: &'a str, dir: &'a Path) -> Vec<String> {
    vec![
        "lock".into(),
        cmd.into(),
        "--lockfile".into(),
        dir.join("lock.json").display().to_string(),
        "--contracts".into(),
        dir.join("contracts").display().to_string(),
    ]
}

fn run(cmd: &str, dir: &Path) -> Output {
    let args = lock_args(cmd, dir);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    palisade(&args, b"")
}

/// Every file of the bundle, by name, with its bytes.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![(
        "lock.json".to_owned(),
        std::fs::read(dir.join("lock.json")).unwrap(),
    )];
    let mut contracts: Vec<_> = std::fs::read_dir(dir.join("contracts"))
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    contracts.sort();
    files.extend(contracts);
    files
}

fn digest_of(dir: &Path, capability: &str) -> String {
    let lock: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("lock.json")).unwrap()).unwrap();
    lock["capabilities"][capability]["contractDigest"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_reviewed_edit_is_rehashed_and_the_bundle_loads_as_written() {
    let b = example_bundle();
    let dir = b.path();
    // Nothing edited: nothing to do, nothing written.
    let before = snapshot(dir);
    let o = run("rehash", dir);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("nothing to rehash"), "{}", stdout(&o));
    assert_eq!(snapshot(dir), before);

    // The reviewer states the reversibility the import could not know.
    let old = digest_of(dir, "items.delete");
    let untouched = digest_of(dir, "items.create");
    let file = dir
        .join("contracts")
        .join(format!("{}.json", old.trim_start_matches("sha-256:")));
    let mut contract: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(contract["operational"]["reversibility"], "compensable");
    contract["operational"]["reversibility"] = "reversible".into();
    std::fs::write(&file, serde_json::to_vec_pretty(&contract).unwrap()).unwrap();
    let o = run("check", dir);
    assert_eq!(o.status.code(), Some(1), "an edited file is not its digest");

    let o = run("rehash", dir);
    assert!(o.status.success(), "{}", stderr(&o));
    let new = digest_of(dir, "items.delete");
    assert_ne!(new, old);
    assert!(
        stdout(&o).contains(&format!("items.delete: {old} -> {new}")),
        "{}",
        stdout(&o)
    );
    assert_eq!(digest_of(dir, "items.create"), untouched);
    // The file is under its new name (its JCS digest), the old name gone.
    let renamed = dir
        .join("contracts")
        .join(format!("{}.json", new.trim_start_matches("sha-256:")));
    let written: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&renamed).unwrap()).unwrap();
    assert_eq!(written["operational"]["reversibility"], "reversible");
    assert!(!file.exists());
    let o = run("check", dir);
    assert!(o.status.success(), "{}", stderr(&o));
    // Again: nothing to do.
    assert!(stdout(&run("rehash", dir)).contains("nothing to rehash"));
}

#[test]
fn a_file_that_is_not_json_or_a_bundle_that_would_not_load_changes_nothing() {
    let b = example_bundle();
    let dir = b.path();
    let digest = digest_of(dir, "items.delete");
    let file = dir
        .join("contracts")
        .join(format!("{}.json", digest.trim_start_matches("sha-256:")));
    let good = std::fs::read(&file).unwrap();

    std::fs::write(&file, b"{\"operational\": ").unwrap();
    let before = snapshot(dir);
    let o = run("rehash", dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("items.delete") && stderr(&o).contains("not valid JSON"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(dir), before, "nothing changed");

    // Valid JSON, but no contract the bundle can load.
    let mut contract: serde_json::Value = serde_json::from_slice(&good).unwrap();
    contract["operational"]["reversibility"] = "sometimes".into();
    std::fs::write(&file, serde_json::to_vec_pretty(&contract).unwrap()).unwrap();
    let before = snapshot(dir);
    let o = run("rehash", dir);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("does not load; nothing was changed"),
        "{}",
        stderr(&o)
    );
    assert_eq!(snapshot(dir), before, "nothing changed");
}
