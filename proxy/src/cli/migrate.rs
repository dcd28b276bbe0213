//! A lockfile update that loses something needs approval (RICH §15.2): `lock import-openapi`
//! into a directory that already holds a lockfile compares the two, capability by capability
//! (`policy::rich::migration` decides). Breaking, lossy (unknown) and removed changes are
//! refused — exit 3, nothing written — unless `--approve` is given; then each gets a migration
//! record in `migrations/<hex>.json`, the previous lockfile is kept there for rollback, and the
//! new lockfile names the records in `migrations`, so its digest pins the approval.

use std::path::Path;

use palisade_policy::digest::{Sha256Digest, Spelling};
use palisade_rich::migration::{self, Bound, Change};
use serde_json::{json, Value};

use super::failure::Failure;

/// What writing the new lockfile entails.
pub(super) struct Plan {
    /// (file name, document) to write under `migrations/` before the lockfile.
    files: Vec<(String, Value)>,
    /// `{capability, recordDigest}` for the lockfile's `migrations`.
    entries: Vec<Value>,
    pub changes: Vec<Change>,
}

fn read_json(path: &Path) -> Option<Value> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Compares `out/lock.json` (when there is one) with `new_lock`; refuses a lossy update
/// without `approve`.
pub(super) fn plan(
    out: &Path,
    new_lock: &Value,
    new_contracts: &[(Sha256Digest, Value)],
    approve: bool,
    now_rfc3339: &str,
) -> Result<Plan, Failure> {
    let empty = Plan {
        files: Vec::new(),
        entries: Vec::new(),
        changes: Vec::new(),
    };
    let Some(old_lock) = read_json(&out.join("lock.json")) else {
        return Ok(empty);
    };
    let old_files: Vec<(String, String, Option<Value>)> = bindings(&old_lock)
        .map(|(name, digest)| {
            let file = out
                .join("contracts")
                .join(format!("{}.json", digest.trim_start_matches("sha-256:")));
            (name, digest, read_json(&file))
        })
        .collect();
    let new_files: Vec<(String, String, Option<&Value>)> = bindings(new_lock)
        .map(|(name, digest)| {
            let doc = new_contracts
                .iter()
                .find(|(d, _)| d.spelled(Spelling::ShaDash256) == digest)
                .map(|(_, v)| v);
            (name, digest, doc)
        })
        .collect();
    let old: Vec<Bound<'_>> = old_files
        .iter()
        .map(|(n, d, c)| Bound {
            capability: n,
            digest: d.clone(),
            contract: c.as_ref(),
        })
        .collect();
    let new: Vec<Bound<'_>> = new_files
        .iter()
        .map(|(n, d, c)| Bound {
            capability: n,
            digest: d.clone(),
            contract: *c,
        })
        .collect();
    let changes = migration::changes(&old, &new);
    let needing: Vec<&Change> = changes.iter().filter(|c| c.needs_approval()).collect();
    if needing.is_empty() {
        return Ok(Plan { changes, ..empty });
    }
    if !approve {
        let mut lines = vec![format!(
            "{}: this update is breaking or lossy for {} capabilities; nothing was written",
            out.display(),
            needing.len()
        )];
        for c in &needing {
            let first = c
                .findings
                .iter()
                .find(|f| f["outcome"] != "compatible")
                .map(|f| {
                    format!(
                        " ({} at {})",
                        f["why"].as_str().unwrap_or(""),
                        f["at"].as_str().unwrap_or("")
                    )
                })
                .unwrap_or_default();
            lines.push(format!("  {}: {}{first}", c.capability, c.outcome));
        }
        lines.push(
            "review with `palisade lock compat OLD NEW`, then re-run with --approve to write the lockfile and a migration record for each (RICH §15.2)".into(),
        );
        return Err(Failure { code: 3, lines });
    }
    let old_digest = Sha256Digest::of_json(&old_lock);
    let old_spelled = old_digest.spelled(Spelling::ShaDash256);
    // The lockfile that will be written names the records, so the records name the lockfile
    // they replace rather than the one they are part of.
    let mut files = vec![(format!("lock-{}.json", old_digest.to_hex()), old_lock)];
    let mut entries = Vec::new();
    for c in &needing {
        let record = migration::record(c, &old_spelled, now_rfc3339);
        let digest = migration::digest(&record);
        entries.push(json!({"capability": c.capability, "recordDigest": digest}));
        files.push((
            format!("{}.json", digest.trim_start_matches("sha-256:")),
            record,
        ));
    }
    Ok(Plan {
        files,
        entries,
        changes,
    })
}

impl Plan {
    /// Writes the records (before the lockfile, so a failure leaves the old one in force) and
    /// returns the lockfile to write.
    pub(super) fn apply(&self, out: &Path, mut lock: Value) -> Result<Value, String> {
        if self.entries.is_empty() {
            return Ok(lock);
        }
        let dir = out.join("migrations");
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, doc) in &self.files {
            let mut text = serde_json::to_vec_pretty(doc).map_err(|e| e.to_string())?;
            text.push(b'\n');
            let path = dir.join(name);
            std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        }
        lock["migrations"] = Value::Array(self.entries.clone());
        Ok(lock)
    }

    /// The summary line's `changes`.
    pub(super) fn summary(&self) -> Vec<Value> {
        self.changes
            .iter()
            .map(|c| {
                json!({"capability": c.capability, "from": c.from, "to": c.to,
                       "outcome": c.outcome, "approved": c.needs_approval()})
            })
            .collect()
    }
}

/// (capability, contractDigest) of a lockfile.
fn bindings(lock: &Value) -> impl Iterator<Item = (String, String)> + '_ {
    lock["capabilities"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, cap)| {
            let d = cap.get("contractDigest")?.as_str()?;
            Some((name.clone(), d.to_owned()))
        })
}
