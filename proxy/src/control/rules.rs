//! The operator's rules file (SPEC §15): read at start (a file that does not load stops the
//! start, as a bundle that does not compile does) and on every reload, where a file that does
//! not load never replaces the one in force.

use std::sync::Arc;

use palisade_rules::RuleSet;

use crate::config::Config;
use crate::context::Plane;
use crate::telemetry::{RULES_INFO, RULES_RELOADS};

/// Largest rules file read: far beyond 256 rules of 4 KiB expressions.
const MAX_FILE: u64 = 4 << 20;

/// The rules `rules.file` holds; `Ok(None)` without `[rules]`.
pub fn from_config(config: &Config) -> Result<Option<RuleSet>, Vec<String>> {
    config.rules.as_ref().map(|r| load(&r.file)).transpose()
}

/// A rules file, read (bounded) and loaded; each problem names the file. Also the candidate's
/// rules and `palisade simulate --rules`.
pub fn load(path: &std::path::Path) -> Result<RuleSet, Vec<String>> {
    let bytes = crate::control::bundle::read_bounded(path, MAX_FILE).map_err(|e| vec![e])?;
    RuleSet::load(&bytes).map_err(|problems| {
        problems
            .into_iter()
            .map(|p| format!("{}: {p}", path.display()))
            .collect()
    })
}

/// Reads the rules again and publishes them if they load and differ from the ones in force.
pub fn reload(plane: &Plane) -> Result<(), Vec<String>> {
    let loaded = match from_config(&plane.config) {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(()),
        Err(problems) => {
            metrics::counter!(RULES_RELOADS, "result" => "rejected").increment(1);
            tracing::warn!(problems = %problems.join("; "), "rules refused; the previous ones stay in force");
            return Err(problems);
        }
    };
    let old = plane.rules.load_full();
    if old.as_ref().is_some_and(|o| o.digest() == loaded.digest()) {
        metrics::counter!(RULES_RELOADS, "result" => "unchanged").increment(1);
        return Ok(());
    }
    publish(plane, Arc::new(loaded));
    if let Some(o) = old {
        metrics::gauge!(RULES_INFO, "digest" => o.digest().to_string()).set(0.0);
    }
    metrics::counter!(RULES_RELOADS, "result" => "applied").increment(1);
    Ok(())
}

/// Puts `rules` in force.
pub fn publish(plane: &Plane, rules: Arc<RuleSet>) {
    let digest = rules.digest().to_string();
    tracing::info!(digest = %digest, rules = rules.rules().len(), "operator rules in force");
    metrics::gauge!(RULES_INFO, "digest" => digest).set(1.0);
    plane.rules.store(Some(rules));
}

/// `GET /admin/v1/rules`: the rules in force, in order, with what each decided so far in this
/// process (`{"rules_digest": null, "rules": []}` without `[rules]`).
pub fn list(plane: &Plane) -> serde_json::Value {
    let Some(rules) = plane.rules.load_full() else {
        return serde_json::json!({"rules_digest": null, "rules": []});
    };
    let counted = crate::enforce::rules::decisions();
    let list: Vec<serde_json::Value> = rules
        .rules()
        .iter()
        .map(|r| {
            let mut decisions = serde_json::Map::new();
            for (name, action, mode, n) in &counted {
                if *name == r.name {
                    let key = if *mode == "report" {
                        format!("{action} (report)")
                    } else {
                        (*action).to_owned()
                    };
                    decisions.insert(key, (*n).into());
                }
            }
            serde_json::json!({
                "name": r.name,
                "on": r.on,
                "when": r.when_source,
                "action": r.action.as_str(),
                "mode": r.mode.as_str(),
                "approvals": r.approvals,
                "expires_ms": r.expires_ms,
                "reason": r.reason,
                "decisions": decisions,
            })
        })
        .collect();
    serde_json::json!({"rules_digest": rules.digest_text(), "rules": list})
}
