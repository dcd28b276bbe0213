//! `[rules]` (SPEC §15): the operator's rules file, and the request headers its rules may read.

use serde::Deserialize;

use super::collector::Collector;
use super::model::RulesSection;

#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRules {
    pub file: Option<std::path::PathBuf>,
    pub expose_headers: Vec<String>,
}

/// Headers no rule may read: credentials, and the sidecar's own lease and inverse (whose
/// facts a rule reads as `lease`).
const NEVER: [&str; 7] = [
    "authorization",
    "proxy-authorization",
    "cookie",
    "set-cookie",
    "agent-compensation-lease",
    "agent-compensation-inverse",
    "x-api-key",
];

impl RawRules {
    /// `unenforced`: `ptcl.writes` is empty, so no write would ever meet a rule.
    pub(super) fn validate(self, c: &mut Collector<'_>, unenforced: bool) -> Option<RulesSection> {
        if unenforced {
            c.push(
                "rules",
                "needs PTCL enforcement (ptcl.writes not empty): rules decide enforced writes",
            );
        }
        let Some(file) = self.file else {
            c.push("rules.file", "required: the rules file (rules.toml)");
            return None;
        };
        let mut expose = Vec::new();
        for (i, h) in self.expose_headers.iter().enumerate() {
            let at = format!("rules.expose_headers[{i}]");
            let lower = h.to_ascii_lowercase();
            if http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
                c.push(&at, format!("{h:?} is not a header name"));
            } else if NEVER.contains(&lower.as_str()) {
                c.push(
                    &at,
                    format!("{h:?} carries a credential; no rule may read it"),
                );
            } else if !expose.contains(&lower) {
                expose.push(lower);
            }
        }
        Some(RulesSection {
            file,
            expose_headers: expose,
        })
    }
}

impl RawCandidate {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Option<super::model::CandidateSection> {
        match (self.lockfile, self.contracts) {
            (Some(lockfile), Some(contracts)) => Some(super::model::CandidateSection {
                lockfile,
                contracts,
                rules: self.rules,
            }),
            _ => {
                c.push("rich.candidate", "needs lockfile and contracts");
                None
            }
        }
    }
}

/// `rich.candidate` (SPEC §15): a bundle (and rules) checked beside the one in force.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawCandidate {
    pub lockfile: Option<std::path::PathBuf>,
    pub contracts: Option<std::path::PathBuf>,
    pub rules: Option<std::path::PathBuf>,
}
