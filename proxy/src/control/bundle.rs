//! Loading the RICH bundle (SPEC §7) from disk: the lockfile and every `<64-hex>.json` in the
//! contracts directory, handed to `policy::rich::Bundle::compile`.
//!
//! Kubernetes ConfigMap mounts put the real files under `..<timestamp>` directories behind a
//! `..data` symlink and link each file name to `..data/<name>`; entries whose names start with
//! `..` are skipped and every file is read through its link, so a mount that was swapped
//! atomically is read as one version.

use palisade_rich::WorstCaseBound;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use palisade_rich::Bundle;

/// Largest lockfile read.
const MAX_LOCKFILE_BYTES: u64 = 16 << 20;
/// Largest contract document read (its schemas are limited to 1 MiB each when compiled).
const MAX_CONTRACT_BYTES: u64 = 8 << 20;
/// Most contract files in the directory.
const MAX_CONTRACTS: usize = 10_000;

pub(crate) fn read_bounded(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > limit {
        return Err(format!(
            "{}: {} bytes; the limit is {limit}",
            path.display(),
            meta.len()
        ));
    }
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// Reads and compiles a bundle. Errors are whole lines naming the file and, inside it, the
/// JSON pointer of each problem.
pub fn load(
    lockfile: &Path,
    contracts: &Path,
    expected_digest: Option<&str>,
) -> Result<Bundle, Vec<String>> {
    let lock = read_bounded(lockfile, MAX_LOCKFILE_BYTES).map_err(|e| vec![e])?;
    let dir =
        std::fs::read_dir(contracts).map_err(|e| vec![format!("{}: {e}", contracts.display())])?;
    let mut files = BTreeMap::new();
    let mut errors = Vec::new();
    for entry in dir {
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                errors.push(format!("{}: {e}", contracts.display()));
                continue;
            }
        };
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("..") || !name.ends_with(".json") {
            continue;
        }
        if files.len() >= MAX_CONTRACTS {
            errors.push(format!(
                "{}: more than {MAX_CONTRACTS} contract files",
                contracts.display()
            ));
            break;
        }
        match read_bounded(&entry.path(), MAX_CONTRACT_BYTES) {
            Ok(bytes) => {
                files.insert(name, bytes);
            }
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Connector qualifications must not have expired by now (RICH §8.2 `expiry`).
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    Bundle::compile_at(&lock, &files, expected_digest, Some(now_ms)).map_err(|problems| {
        problems
            .iter()
            .map(|p| {
                let where_ = p
                    .pointer
                    .replacen("lockfile#", &format!("{}#", lockfile.display()), 1)
                    .replacen("contracts/", &format!("{}/", contracts.display()), 1);
                format!("{where_}: {}", p.message)
            })
            .collect()
    })
}

/// The bundle a config names, if any (`rich.lockfile` and `rich.contracts` are set together).
pub fn from_config(config: &crate::config::Config) -> Result<Option<Arc<Bundle>>, Vec<String>> {
    let bundle = match (&config.lockfile, &config.contracts) {
        (Some(l), Some(c)) => load(l, c, config.expected_digest.as_deref())?,
        _ => return Ok(None),
    };
    // A binding that requires admission where none is configured could never be called:
    // refused here, so a reload keeps the bundle in force instead.
    if config.admission.is_none() {
        let needing: Vec<String> = bundle
            .capabilities
            .iter()
            .filter(|c| c.runtime.admission == Some(true))
            .map(|c| {
                format!(
                    "capabilities/{}/runtime/admission: \"required\" needs an [admission] section (issuers, keys)",
                    c.name
                )
            })
            .collect();
        if !needing.is_empty() {
            return Err(needing);
        }
    }
    Ok(Some(Arc::new(bundle)))
}

/// A one-line summary of a bundle for logs and `lock check`.
pub fn summary(b: &Bundle) -> serde_json::Value {
    let caps: Vec<serde_json::Value> = b
        .capabilities
        .iter()
        .map(|c| {
            serde_json::json!({
                "name": c.name,
                "protocol": match c.protocol {
                    palisade_rich::Protocol::Http => "http",
                    palisade_rich::Protocol::Mcp => "mcp",
                },
                "operation": c.operation,
                "contractDigest": c.contract.digest,
                "worstCaseBoundDigest": match &c.contract.worst_case_bound {
                    WorstCaseBound::Bound { digest, .. } => serde_json::json!(digest),
                    WorstCaseBound::NotComputable(_) => serde_json::Value::Null,
                },
            })
        })
        .collect();
    let connections: Vec<serde_json::Value> = b
        .connections
        .iter()
        .map(|c| {
            serde_json::json!({
                "id": c.id,
                "source": b.capabilities[c.source].name,
                "target": b.capabilities[c.target].name,
                "connectorDigest": c.request.digest,
                "class": c.request.class.as_str(),
                "responseConnectorDigest": c.response.as_ref().map(|r| r.digest.clone()),
            })
        })
        .collect();
    let mut v =
        serde_json::json!({"digest": b.digest, "bindingId": b.binding_id, "capabilities": caps});
    if !connections.is_empty() {
        v["connections"] = connections.into();
    }
    v
}

/// `palisade lock bound`: each binding's worst-case bound (RICH §12.2), or the one `only`
/// names; `None` when it names none.
pub fn bounds(b: &Bundle, only: Option<&str>) -> Option<serde_json::Value> {
    let bindings: Vec<serde_json::Value> = b
        .capabilities
        .iter()
        .filter(|c| only.is_none_or(|n| n == c.name))
        .map(|c| {
            let mut v = serde_json::json!({
                "name": c.name,
                "operation": c.operation,
                "contractDigest": c.contract.digest,
            });
            if let (Some(o), serde_json::Value::Object(w)) =
                (v.as_object_mut(), c.contract.worst_case_bound.to_json())
            {
                o.extend(w);
            }
            v
        })
        .collect();
    if only.is_some() && bindings.is_empty() {
        return None;
    }
    Some(
        serde_json::json!({"bindingId": b.binding_id, "lockfileDigest": b.digest,
                            "bindings": bindings}),
    )
}
