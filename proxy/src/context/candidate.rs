//! A candidate bundle in shadow (SPEC §15, `rich.candidate`): compiled beside the bundle in
//! force, judged on every write, never acted on. What it would have decided differently is a
//! `shadow` drift event; every decision pair is counted here, per operation, since the
//! candidate loaded (`GET /admin/v1/shadow`).

use std::collections::BTreeMap;
use std::sync::Mutex;

use palisade_rich::Bundle;
use palisade_rules::RuleSet;

/// Most (operation, in force, candidate) pairs counted: unbound operations are named by their
/// path, which a client chooses.
pub const MAX_PAIRS: usize = 10_000;

pub struct Candidate {
    pub bundle: Bundle,
    /// Its own rules (`rich.candidate.rules`); without them the rules in force judge it.
    pub rules: Option<RuleSet>,
    /// Unix ms when it was loaded.
    pub loaded_ms: i64,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    pairs: BTreeMap<(String, String, String), u64>,
    compared: u64,
    disagreed: u64,
    /// Pairs not counted because [`MAX_PAIRS`] was reached.
    uncounted: u64,
}

/// What `GET /admin/v1/shadow` shows of the counts.
pub struct Tally {
    pub pairs: Vec<(String, String, String, u64)>,
    pub compared: u64,
    pub disagreed: u64,
    pub uncounted: u64,
}

impl Candidate {
    pub fn new(bundle: Bundle, rules: Option<RuleSet>, loaded_ms: i64) -> Self {
        Self {
            bundle,
            rules,
            loaded_ms,
            counts: Mutex::default(),
        }
    }

    /// Counts one write's pair of decisions.
    pub fn count(&self, operation: &str, in_force: &str, candidate: &str) {
        let Ok(mut c) = self.counts.lock() else {
            return;
        };
        c.compared += 1;
        if in_force != candidate {
            c.disagreed += 1;
        }
        let key = (
            operation.to_owned(),
            in_force.to_owned(),
            candidate.to_owned(),
        );
        if let Some(n) = c.pairs.get_mut(&key) {
            *n += 1;
        } else if c.pairs.len() < MAX_PAIRS {
            c.pairs.insert(key, 1);
        } else {
            c.uncounted += 1;
        }
    }

    pub fn tally(&self) -> Tally {
        let Ok(c) = self.counts.lock() else {
            return Tally {
                pairs: Vec::new(),
                compared: 0,
                disagreed: 0,
                uncounted: 0,
            };
        };
        Tally {
            pairs: c
                .pairs
                .iter()
                .map(|((o, f, k), n)| (o.clone(), f.clone(), k.clone(), *n))
                .collect(),
            compared: c.compared,
            disagreed: c.disagreed,
            uncounted: c.uncounted,
        }
    }
}
