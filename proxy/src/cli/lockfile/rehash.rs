//! `palisade lock rehash`: after a reviewed edit of a bundle's contract files (a stated
//! reversibility, a tightened schema), each capability's `contractDigest` is recomputed from
//! its file, the file is renamed to its new digest and the lockfile updated. The bundle is
//! compiled from a scratch copy first: a bundle that would not load is reported and nothing of
//! the original is changed.

use std::collections::BTreeMap;
use std::path::Path;

use palisade_policy::digest::{Sha256Digest, Spelling};
use serde_json::Value;

use crate::cli::failure::Failure;

/// Most bytes of a lockfile or a contract read (as the bundle loader reads them).
const MAX_FILE: u64 = 16 << 20;
/// How deep a contract's JSON may nest.
const MAX_DEPTH: usize = 128;

/// A capability whose contract's digest is no longer its file's.
struct Moved {
    capability: String,
    old: String,
    new: Sha256Digest,
    contract: Value,
}

pub fn run(lockfile: &Path, contracts: &Path) -> Result<(), Failure> {
    let fail = |lines: Vec<String>| Failure { code: 1, lines };
    let mut lock = read_json(lockfile).map_err(|e| fail(vec![e]))?;
    let moved = moved(&lock, contracts).map_err(fail)?;
    if moved.is_empty() {
        println!("every contract's digest is its file's: nothing to rehash");
        return Ok(());
    }
    let caps = lock
        .get_mut("capabilities")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| {
            fail(vec![format!(
                "{}: no capabilities object",
                lockfile.display()
            )])
        })?;
    for m in &moved {
        if let Some(cap) = caps.get_mut(&m.capability) {
            cap["contractDigest"] = Value::String(m.new.spelled(Spelling::ShaDash256));
        }
    }
    // The bundle as it would be, compiled from a scratch copy first.
    let scratch = Scratch::new().map_err(|e| fail(vec![format!("a scratch directory: {e}")]))?;
    let (scratch_lock, scratch_contracts) =
        (scratch.0.join("lock.json"), scratch.0.join("contracts"));
    write_bundle(
        &lock,
        &moved,
        contracts,
        &scratch_lock,
        &scratch_contracts,
        true,
    )
    .map_err(|e| fail(vec![e]))?;
    let bundle = crate::control::bundle::load(&scratch_lock, &scratch_contracts, None).map_err(
        |mut lines| {
            lines.insert(
                0,
                "the rehashed bundle does not load; nothing was changed:".into(),
            );
            fail(lines)
        },
    )?;
    write_bundle(&lock, &moved, contracts, lockfile, contracts, false)
        .map_err(|e| fail(vec![e]))?;
    for m in &moved {
        println!(
            "{}: {} -> {}",
            m.capability,
            m.old,
            m.new.spelled(Spelling::ShaDash256)
        );
    }
    println!("{}", crate::control::bundle::summary(&bundle));
    Ok(())
}

/// The capabilities whose contract file's digest is not the one the lockfile names.
fn moved(lock: &Value, contracts: &Path) -> Result<Vec<Moved>, Vec<String>> {
    let caps = lock
        .get("capabilities")
        .and_then(Value::as_object)
        .ok_or_else(|| vec!["the lockfile has no capabilities object".to_owned()])?;
    let (mut moved, mut problems) = (Vec::new(), Vec::new());
    for (name, cap) in caps {
        let Some(old) = cap.get("contractDigest").and_then(Value::as_str) else {
            problems.push(format!("{name}: no contractDigest"));
            continue;
        };
        let Some(hex) = old.strip_prefix("sha-256:").filter(|h| is_hex64(h)) else {
            problems.push(format!(
                "{name}: contractDigest {old:?} is not sha-256: and 64 hex digits"
            ));
            continue;
        };
        let path = contracts.join(format!("{hex}.json"));
        match read_json(&path) {
            Ok(contract) => {
                let new = Sha256Digest::of_json(&contract);
                if new.to_hex() != hex {
                    moved.push(Moved {
                        capability: name.clone(),
                        old: old.to_owned(),
                        new,
                        contract,
                    });
                }
            }
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    if problems.is_empty() {
        Ok(moved)
    } else {
        Err(problems)
    }
}

/// Writes `lock` at `lockfile` and each moved contract under its new name in `to`; a file no
/// capability names any more leaves `to`. With `copy`, `from`'s other contracts are copied to
/// `to` first (the scratch bundle).
fn write_bundle(
    lock: &Value,
    moved: &[Moved],
    from: &Path,
    lockfile: &Path,
    to: &Path,
    copy: bool,
) -> Result<(), String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    if copy {
        std::fs::create_dir_all(to).map_err(|e| io(to, e))?;
        for entry in std::fs::read_dir(from).map_err(|e| io(from, e))? {
            let entry = entry.map_err(|e| io(from, e))?;
            let name = entry.file_name();
            if name.to_string_lossy().ends_with(".json") {
                std::fs::copy(entry.path(), to.join(&name)).map_err(|e| io(&entry.path(), e))?;
            }
        }
    }
    let mut named: BTreeMap<String, ()> = BTreeMap::new();
    if let Some(caps) = lock.get("capabilities").and_then(Value::as_object) {
        for cap in caps.values() {
            if let Some(h) = cap
                .get("contractDigest")
                .and_then(Value::as_str)
                .and_then(|d| d.strip_prefix("sha-256:"))
            {
                named.insert(format!("{h}.json"), ());
            }
        }
    }
    for m in moved {
        let path = to.join(format!("{}.json", m.new.to_hex()));
        let text = serde_json::to_vec_pretty(&m.contract).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| io(&path, e))?;
        let old = format!("{}.json", m.old.trim_start_matches("sha-256:"));
        if !named.contains_key(&old) {
            let gone = to.join(&old);
            match std::fs::remove_file(&gone) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io(&gone, e)),
            }
        }
    }
    // The lockfile last, replaced whole (a rename): a reader sees the old one or the new one.
    let text = serde_json::to_vec_pretty(lock).map_err(|e| e.to_string())?;
    let tmp = lockfile.with_extension("json.rehash");
    std::fs::write(&tmp, text).map_err(|e| io(&tmp, e))?;
    std::fs::rename(&tmp, lockfile).map_err(|e| io(lockfile, e))
}

fn read_json(path: &Path) -> Result<Value, String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(format!("{}: larger than {MAX_FILE} bytes", path.display()));
    }
    palisade_policy::json::parse(&bytes, MAX_DEPTH)
        .map_err(|e| format!("{}: not valid JSON: {e}", path.display()))
}

/// A directory of our own under the system's temporary one, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!("palisade-rehash-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir)?;
        Ok(Self(dir))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn is_hex64(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}
