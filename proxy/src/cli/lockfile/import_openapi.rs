//! `palisade lock import-openapi SPEC --out DIR`: an OpenAPI 3.x or Swagger 2.0 document (YAML
//! or JSON) → a bundle for review (`lockfile::openapi` does the mapping; this reads and writes
//! files).
//!
//! YAML through `serde-saphyr`: pure Rust, panic-free on any input, maintained (serde_yaml is
//! archived and its forks are stale or bind libyaml), and it deserialises straight into a
//! `serde_json::Value`, so YAML and JSON documents meet the importer in one form.

use std::path::Path;

use super::openapi::{self, ImportOptions};
use palisade_policy::digest::{Sha256Digest, Spelling};
use serde_json::{json, Value};

use crate::cli::failure::Failure;

/// Largest document read: real API descriptions run to a few MiB.
const MAX_DOCUMENT: u64 = 32 << 20;

/// `approve`: write the lockfile even when it is breaking or lossy against the one in `out`
/// (with a migration record each, see [`crate::cli::migrate`]).
pub(crate) fn run(
    spec: &Path,
    out: &Path,
    opts: &ImportOptions,
    approve: bool,
) -> Result<(), Failure> {
    let fail = |line: String| Failure {
        code: 1,
        lines: vec![line],
    };
    let size = std::fs::metadata(spec)
        .map_err(|e| fail(format!("{}: {e}", spec.display())))?
        .len();
    if size > MAX_DOCUMENT {
        return Err(fail(format!(
            "{}: {size} bytes is over the {MAX_DOCUMENT}-byte limit",
            spec.display()
        )));
    }
    let bytes = std::fs::read(spec).map_err(|e| fail(format!("{}: {e}", spec.display())))?;
    let text =
        std::str::from_utf8(&bytes).map_err(|_| fail(format!("{}: not UTF-8", spec.display())))?;
    let doc: Value = if text.trim_start().starts_with('{') {
        serde_json::from_str(text).map_err(|e| fail(format!("{}: {e}", spec.display())))?
    } else {
        serde_saphyr::from_str(text).map_err(|e| fail(format!("{}: {e}", spec.display())))?
    };
    let imported = openapi::import(&doc, &Sha256Digest::of(&bytes), opts)
        .map_err(|e| fail(format!("{}: {e}", spec.display())))?;
    let summary = imported.summary();
    let now = palisade_policy::lease::format_rfc3339_ms(crate::clock::WallClock::now_ms());
    let plan =
        crate::cli::migrate::plan(out, &imported.lockfile, &imported.contracts, approve, &now)?;
    let contracts = out.join("contracts");
    std::fs::create_dir_all(&contracts)
        .map_err(|e| fail(format!("{}: {e}", contracts.display())))?;
    for (digest, contract) in &imported.contracts {
        let path = contracts.join(format!("{}.json", digest.to_hex()));
        write_json(&path, contract).map_err(fail)?;
    }
    // The lockfile last: until it is replaced, the one in force stays whole.
    let lock = plan.apply(out, imported.lockfile).map_err(fail)?;
    let lockfile = out.join("lock.json");
    write_json(&lockfile, &lock).map_err(fail)?;
    let operations = lock["capabilities"].as_object().map_or(0, |c| c.len());
    println!(
        "{}",
        json!({"lockfile": lockfile.display().to_string(),
               "digest": Sha256Digest::of_json(&lock).spelled(Spelling::ShaDash256),
               "changes": plan.summary(),
               "operations": operations,
               "warnings": imported.warnings,
               "untranslated": imported.untranslated,
               "summary": summary})
    );
    for w in &imported.warnings {
        eprintln!("warning: {w}");
    }
    for u in &imported.untranslated {
        eprintln!("untranslated: {u}");
    }
    // Last, so that it is what a user reads first when the output scrolls by.
    eprintln!("{summary}");
    Ok(())
}

fn write_json(path: &Path, v: &Value) -> Result<(), String> {
    let mut text = serde_json::to_vec_pretty(v).map_err(|e| e.to_string())?;
    text.push(b'\n');
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}
