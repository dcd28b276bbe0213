//! `palisade simulate` (SPEC §15): recorded traffic through a bundle's contracts and an
//! operator's rules, offline. Lease signatures and fences are not judged (there is no store and
//! no clock of the recording's); what a write's own shape and the rules decide is. Per
//! operation: how many writes would be allowed, held (by rule) and refused (by code or rule),
//! and one example of each by its request's index in the recording, never by a value.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use palisade_rich::Bundle;
use palisade_rules::RuleSet;
use serde_json::{json, Value};

use crate::enforce::verdict::{self, Judges, Shape};

use super::failure::Failure;
use super::replay::har::{self, Recorded};
use super::replay::lease::is_write;
use super::simulate_receipts as receipts;

#[derive(clap::Args, Debug)]
pub(crate) struct SimulateArgs {
    /// A bundle: a directory with `lock.json` and `contracts/`.
    #[arg(long)]
    bundle: PathBuf,
    /// An operator's rules file (rules.toml) to decide the writes by too.
    #[arg(long)]
    rules: Option<PathBuf>,
    /// The recorded traffic: HAR 1.2, or the JSON lines of `palisade audit export` (each
    /// write known by its receipt: contracts on its body and parameters are not judged).
    #[arg(long)]
    traffic: PathBuf,
    /// `table` (for people) or `json`.
    #[arg(long, default_value = "table", value_parser = ["table", "json"])]
    format: String,
}

pub(crate) use crate::enforce::verdict::Verdict as Outcome;

/// Per operation: the count of each outcome and the index of its first request.
pub(crate) type Tally = BTreeMap<String, BTreeMap<Outcome, (u64, usize)>>;

pub(crate) fn run(args: SimulateArgs) -> Result<(), Failure> {
    let bundle = crate::control::bundle::load(
        &args.bundle.join("lock.json"),
        &args.bundle.join("contracts"),
        None,
    )
    .map_err(|p| Failure::usage(format!("bundle refused:\n{}", p.join("\n"))))?;
    let rules = match &args.rules {
        None => None,
        Some(path) => Some(
            crate::control::rules::load(path)
                .map_err(|p| Failure::usage(format!("rules refused:\n{}", p.join("\n"))))?,
        ),
    };
    let traffic = read(&args.traffic)?;
    let (tally, skipped, receipts) = if receipts::is_export(&traffic) {
        let (writes, skipped) = receipts::writes(&traffic);
        let judges = judges(&bundle, rules.as_ref());
        let decided = writes
            .iter()
            .map(|w| (w.index, verdict::of(judges, &w.shape())));
        (tally(decided), skipped, true)
    } else {
        let recording = har::parse(&traffic)
            .map_err(|e| Failure::usage(format!("{}: {e}", args.traffic.display())))?;
        let skipped = recording.skipped_malformed + recording.skipped_unreplayable;
        (
            simulate(&bundle, rules.as_ref(), &recording.entries),
            skipped,
            false,
        )
    };
    if args.format == "json" {
        let mut doc = to_json(&tally, skipped);
        if receipts {
            doc["not_judged"] = json!(["input contracts", "parameters"]);
        }
        println!("{doc}");
    } else {
        print!("{}", to_table(&tally, skipped));
        if receipts {
            println!("(from receipts: input contracts and parameters are not judged)");
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

/// Decides every write of `entries` (reads are not decided: they need no lease).
pub(crate) fn simulate(bundle: &Bundle, rules: Option<&RuleSet>, entries: &[Recorded]) -> Tally {
    tally(
        entries
            .iter()
            .enumerate()
            .filter(|(_, e)| is_write(&e.method))
            .map(|(i, e)| (i, decide(bundle, rules, e))),
    )
}

/// Counts each operation's outcomes, keeping the index of each outcome's first write.
fn tally(decided: impl Iterator<Item = (usize, (String, Outcome))>) -> Tally {
    let mut tally = Tally::new();
    for (i, (operation, outcome)) in decided {
        let slot = tally
            .entry(operation)
            .or_default()
            .entry(outcome)
            .or_insert((0, i));
        slot.0 += 1;
    }
    tally
}

/// The judges of an offline run: the bundle, the rules, the defaults a sidecar has.
fn judges<'a>(bundle: &'a Bundle, rules: Option<&'a RuleSet>) -> Judges<'a> {
    Judges {
        bundle: Some(bundle),
        rules,
        // `rich.unbound_writes` defaults to deny when a bundle is configured.
        unbound_denied: true,
        // `limits.max_json_depth`'s default.
        depth: 64,
        now_ms: crate::clock::WallClock::now_ms(),
    }
}

/// One write: its operation, and what the bundle's checks on its shape and the rules decide.
fn decide(bundle: &Bundle, rules: Option<&RuleSet>, e: &Recorded) -> (String, Outcome) {
    let mut headers = http::HeaderMap::new();
    for (k, v) in &e.headers {
        headers.append(k.clone(), v.clone());
    }
    let judges = judges(bundle, rules);
    let shape = Shape::Http {
        method: e.method.as_str(),
        target: &e.path_and_query,
        headers: &headers,
        body: &e.body,
    };
    verdict::of(judges, &shape)
}

pub(crate) fn to_json(tally: &Tally, skipped: usize) -> Value {
    let mut ops = serde_json::Map::new();
    for (op, outcomes) in tally {
        let mut o =
            json!({"allowed": 0, "held": {}, "refused": {}, "unjudged": {}, "examples": {}});
        for (outcome, (n, first)) in outcomes {
            let key = match outcome {
                Outcome::Allowed => {
                    o["allowed"] = json!(n);
                    "allowed".to_owned()
                }
                Outcome::Held(rule) => {
                    o["held"][rule] = json!(n);
                    format!("held:{rule}")
                }
                Outcome::Refused(why) => {
                    o["refused"][why] = json!(n);
                    format!("refused:{why}")
                }
                Outcome::Unjudged(rule) => {
                    o["unjudged"][rule] = json!(n);
                    format!("unjudged:{rule}")
                }
            };
            o["examples"][key] = json!(first);
        }
        ops.insert(op.clone(), o);
    }
    json!({"operations": ops, "skipped": skipped})
}

fn to_table(tally: &Tally, skipped: usize) -> String {
    let mut out = format!(
        "{:<40} {:<36} {:>6}  {}\n",
        "operation", "outcome", "writes", "first (request index)"
    );
    for (op, outcomes) in tally {
        for (outcome, (n, first)) in outcomes {
            let what = match outcome {
                Outcome::Allowed => "allowed".to_owned(),
                Outcome::Held(rule) => format!("held by {rule}"),
                Outcome::Refused(why) => match why.strip_prefix("rule:") {
                    Some(rule) => format!("refused by {rule}"),
                    None => format!("refused {why}"),
                },
                Outcome::Unjudged(rule) => format!("unjudged: {rule} reads what a receipt lacks"),
            };
            out.push_str(&format!("{op:<40} {what:<36} {n:>6}  #{first}\n"));
        }
    }
    if skipped > 0 {
        out.push_str(&format!(
            "({skipped} entries could not be read as one exchange)\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_table_names_outcomes_and_first_indexes() {
        let mut t = Tally::new();
        t.entry("POST /x".into())
            .or_default()
            .insert(Outcome::Held("big".into()), (3, 7));
        t.entry("POST /x".into())
            .or_default()
            .insert(Outcome::Refused("rule:no".into()), (1, 9));
        let table = to_table(&t, 0);
        assert!(table.contains("held by big"), "{table}");
        assert!(table.contains("refused by no"), "{table}");
        assert!(table.contains("#7"), "{table}");
        let j = to_json(&t, 2);
        assert_eq!(j["operations"]["POST /x"]["held"]["big"], 3);
        assert_eq!(j["operations"]["POST /x"]["examples"]["refused:rule:no"], 9);
        assert_eq!(j["skipped"], 2);
    }
}
