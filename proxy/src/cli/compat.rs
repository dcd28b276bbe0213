//! `palisade lock compat OLD NEW [--connector FILE]… [--qualification FILE]…`: RICH §15.1
//! outcomes between two contract revisions (`policy::rich::compat` decides; this reads the
//! files and prints).
//!
//! With connectors: a connector pinned OLD → NEW bridges the inputs, NEW → OLD the outputs,
//! when it compiles under a profile the sidecar runs (T0, T1/T2 JMESPath) and one of the
//! `--qualification` records qualifies it (§8.2, unexpired). If every breaking finding is on a
//! bridged side, the outcome is `compatible-with-connector`.

use std::path::Path;

use palisade_policy::digest::{Sha256Digest, Spelling};
use palisade_rich::compat::Outcome;
use palisade_rich::connector::Connector;
use serde_json::{json, Value};

use super::failure::Failure;

/// Exit code of each outcome, so a script can tell them apart from each other and from a
/// file that could not be read (1) or a usage error (2).
fn exit_code(outcome: Outcome) -> u8 {
    match outcome {
        Outcome::Compatible => 0,
        Outcome::Breaking => 3,
        Outcome::Unknown => 4,
        Outcome::CompatibleWithConnector => 5,
    }
}

fn read(p: &Path) -> Result<(Vec<u8>, Value), Failure> {
    let fail = |e: String| Failure {
        code: 1,
        lines: vec![format!("{}: {e}", p.display())],
    };
    let bytes = std::fs::read(p).map_err(|e| fail(e.to_string()))?;
    let v = serde_json::from_slice(&bytes).map_err(|e| fail(e.to_string()))?;
    Ok((bytes, v))
}

/// Which side a connector bridges, if any, and why not.
struct Bridge {
    report: Value,
    request: bool,
    response: bool,
}

fn bridge(
    path: &Path,
    (old, new): (&str, &str),
    records: &[Value],
    now_ms: i64,
) -> Result<Bridge, Failure> {
    let (bytes, doc) = read(path)?;
    let name = format!("{}.json", Sha256Digest::of_json(&doc).to_hex());
    let mut problems: Vec<String> = Vec::new();
    let conn = match Connector::compile(&name, &bytes) {
        Ok(c) => Some(c),
        Err(ps) => {
            problems.extend(ps.iter().map(|p| p.message.clone()));
            None
        }
    };
    let (mut request, mut response) = (false, false);
    if let Some(c) = &conn {
        match (c.source_digest.as_str(), c.target_digest.as_str()) {
            (s, t) if s == old && t == new => request = true,
            (s, t) if s == new && t == old => response = true,
            _ => problems.push("it pins other contracts than OLD and NEW".into()),
        }
        let record = records
            .iter()
            .find(|r| r.get("subjectDigest").and_then(Value::as_str) == Some(c.digest.as_str()));
        match record {
            None => problems.push("no --qualification record names it: unqualified".into()),
            Some(r) => problems.extend(
                c.qualified_by(r, Some(now_ms))
                    .into_iter()
                    .map(|(member, why)| format!("qualification {member}: {why}")),
            ),
        }
    }
    let ok = problems.is_empty();
    Ok(Bridge {
        report: json!({
            "file": path.display().to_string(),
            "digest": conn.as_ref().map(|c| c.digest.clone()),
            "bridges": match (ok, request, response) {
                (true, true, _) => "input",
                (true, _, true) => "output",
                _ => "nothing",
            },
            "problems": problems,
        }),
        request: ok && request,
        response: ok && response,
    })
}

/// `palisade lock compat OLD NEW`: prints the verdict; exits with the outcome's code.
pub(super) fn run(
    from: &Path,
    to: &Path,
    connectors: &[std::path::PathBuf],
    qualifications: &[std::path::PathBuf],
) -> Result<(), Failure> {
    let ((_, old), (_, new)) = (read(from)?, read(to)?);
    let verdict = palisade_rich::compat::contracts(&old, &new);
    let (old_d, new_d) = (
        Sha256Digest::of_json(&old).spelled(Spelling::ShaDash256),
        Sha256Digest::of_json(&new).spelled(Spelling::ShaDash256),
    );
    let records = qualifications
        .iter()
        .map(|p| read(p).map(|(_, v)| v))
        .collect::<Result<Vec<_>, _>>()?;
    let now_ms = crate::clock::WallClock::now_ms();
    let (mut request, mut response, mut reports) = (false, false, Vec::new());
    for path in connectors {
        let b = bridge(path, (&old_d, &new_d), &records, now_ms)?;
        request |= b.request;
        response |= b.response;
        reports.push(b.report);
    }
    let outcome = verdict.outcome_with(request, response);
    let findings: Vec<Value> = verdict
        .findings
        .iter()
        .map(|f| json!({"outcome": f.outcome.as_str(), "at": f.at, "why": f.why}))
        .collect();
    let mut out = json!({"outcome": outcome.as_str(), "from": old_d, "to": new_d,
                         "findings": findings});
    if !connectors.is_empty() {
        out["connectors"] = reports.into();
    }
    println!("{out}");
    match exit_code(outcome) {
        0 => Ok(()),
        code => Err(Failure {
            code,
            lines: vec![format!("contracts are {}", outcome.as_str())],
        }),
    }
}
