//! `palisade lock compat --from OLD --to NEW`: RICH §15.1 outcomes between two contract
//! revisions (`policy::rich::compat` decides; this reads the files and prints).

use std::path::Path;

use palisade_policy::digest::{Sha256Digest, Spelling};
use serde_json::{json, Value};

use super::failure::Failure;

/// `palisade lock compat --from OLD --to NEW`: prints the verdict; exit 1 unless compatible.
pub(super) fn run(from: &Path, to: &Path) -> Result<(), Failure> {
    let read = |p: &Path| -> Result<Value, Failure> {
        let bytes = std::fs::read(p).map_err(|e| Failure {
            code: 1,
            lines: vec![format!("{}: {e}", p.display())],
        })?;
        serde_json::from_slice(&bytes).map_err(|e| Failure {
            code: 1,
            lines: vec![format!("{}: {e}", p.display())],
        })
    };
    let (old, new) = (read(from)?, read(to)?);
    let verdict = palisade_policy::rich::compat::contracts(&old, &new);
    let outcome = verdict.outcome();
    let findings: Vec<Value> = verdict
        .findings
        .iter()
        .map(|f| json!({"outcome": f.outcome.as_str(), "at": f.at, "why": f.why}))
        .collect();
    println!(
        "{}",
        json!({"outcome": outcome.as_str(),
               "from": Sha256Digest::of_json(&old).spelled(Spelling::ShaDash256),
               "to": Sha256Digest::of_json(&new).spelled(Spelling::ShaDash256),
               "findings": findings})
    );
    if outcome == palisade_policy::rich::compat::Outcome::Compatible {
        Ok(())
    } else {
        Err(Failure {
            code: 1,
            lines: vec![format!("contracts are {}", outcome.as_str())],
        })
    }
}
