//! `palisade lock compat OLD NEW`: RICH §15.1 outcomes between two contract revisions
//! (`policy::rich::compat` decides; this reads the files and prints).

use std::path::Path;

use palisade_policy::digest::{Sha256Digest, Spelling};
use serde_json::{json, Value};

use super::failure::Failure;

/// Exit code of each outcome other than `compatible` (0), so a script can tell them apart
/// from each other and from a file that could not be read (1) or a usage error (2). 5 is
/// kept for `compatible-with-connector`, which needs connectors (issue 23).
fn exit_code(outcome: palisade_policy::rich::compat::Outcome) -> u8 {
    use palisade_policy::rich::compat::Outcome;
    match outcome {
        Outcome::Compatible => 0,
        Outcome::Breaking => 3,
        Outcome::Unknown => 4,
    }
}

/// `palisade lock compat OLD NEW`: prints the verdict; exits with the outcome's code.
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
    match exit_code(outcome) {
        0 => Ok(()),
        code => Err(Failure {
            code,
            lines: vec![format!("contracts are {}", outcome.as_str())],
        }),
    }
}
