//! `[budgets]` (SPEC §14): write budgets, each a sliding window over a key of `caller`,
//! `operation` and `resource`.

use palisade_policy::budget::{self, Dim, Rule};
use serde::Deserialize;

use super::collector::Collector;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawBudgets {
    pub rules: Vec<RawRule>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawRule {
    pub name: Option<String>,
    pub per: Vec<String>,
    pub limit: Option<i64>,
    pub window: Option<String>,
}

impl RawBudgets {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Vec<Rule> {
        if self.rules.len() > budget::MAX_RULES {
            c.push(
                "budgets.rules",
                format!("at most {} rules", budget::MAX_RULES),
            );
        }
        let mut out: Vec<Rule> = Vec::new();
        for (i, r) in self.rules.into_iter().take(budget::MAX_RULES).enumerate() {
            let at = format!("budgets.rules[{i}]");
            let name = r.name.unwrap_or_default();
            if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_graphic()) {
                c.push(
                    &format!("{at}.name"),
                    "expected 1 to 64 visible ASCII characters",
                );
            } else if out.iter().any(|o| o.name == name) {
                c.push(&format!("{at}.name"), "another rule has this name");
            }
            let mut per = Vec::new();
            for p in &r.per {
                match Dim::parse(p) {
                    Some(d) if !per.contains(&d) => per.push(d),
                    Some(_) => c.push(&format!("{at}.per"), format!("{p:?} is listed twice")),
                    None => c.push(
                        &format!("{at}.per"),
                        format!("{p:?}: expected \"caller\", \"operation\" or \"resource\""),
                    ),
                }
            }
            if r.per.is_empty() {
                c.push(
                    &format!("{at}.per"),
                    "name what the rule counts by: caller, operation, resource",
                );
            }
            let limit = match r.limit {
                Some(n) if (1..=i64::from(budget::MAX_LIMIT)).contains(&n) => n as u32,
                _ => {
                    c.push(
                        &format!("{at}.limit"),
                        format!("expected 1 to {}", budget::MAX_LIMIT),
                    );
                    1
                }
            };
            if r.window.is_none() {
                c.push(
                    &format!("{at}.window"),
                    "is required: a duration such as \"1m\"",
                );
            }
            let window = c.duration(&format!("{at}.window"), &r.window, "1m");
            let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX);
            if !(1_000..=budget::MAX_WINDOW_MS).contains(&window_ms) {
                c.push(&format!("{at}.window"), "expected 1s to 24h");
            }
            out.push(Rule {
                name,
                per,
                limit,
                window_ms,
            });
        }
        out
    }
}
