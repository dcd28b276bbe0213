//! The TOML configuration of SPEC §2, typed and validated.
//!
//! Loading happens in two passes so that one run reports every problem at once:
//! 1. each top-level table is deserialised on its own, with `serde_ignored` collecting unknown
//!    keys (typos must not silently disable enforcement) instead of stopping at the first;
//! 2. [`RawConfig::validate`] parses durations, sizes, addresses and URLs, collecting every
//!    failure as a [`ConfigProblem`] naming the file, the key and the reason.
//!
//! Not here: reading the files a config names (keys, bundles); `run` does that and reports
//! their problems the same way.

pub mod admission;
pub mod aip2;
mod budgets;
mod collector;
mod escrow;
mod model;
pub mod raw;
pub mod rcns;
pub mod receipts;
pub mod rules;
pub mod telemetry;
mod validate;

use std::path::Path;

pub use collector::parse_size;
use collector::{section, Collector};
pub use model::{
    AccessLog, AdminSection, Admission, Aip2, Config, ConfigError, ConfigProblem, Delivery,
    EscrowSection, Introspection, LimitsSection, ListenSection, ListenTls, Otlp, ProxyHeader, Rcns,
    Retention, RulesSection, Sink, StoreKind, StoreSection, UnboundWrites, UpstreamSection,
    Witness, DEFAULT_SIGNING_KEY,
};
use raw::RawConfig;

impl Config {
    /// PTCL write enforcement is on: `ptcl.writes` names at least one method. Off, the sidecar
    /// is a plain proxy for the SoR, though a guard of its own (`[aip2]`) may still run on
    /// the enforcement handles (store, key, drift sink).
    pub fn enforcing(&self) -> bool {
        !self.writes.is_empty()
    }

    /// The enforcement handles are needed: PTCL is on, or a guard that keeps state and
    /// receipts in the store is configured.
    pub fn needs_store(&self) -> bool {
        self.enforcing() || self.aip2.is_some()
    }

    /// Reads and validates `path`; every problem found is in the error.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError(vec![ConfigProblem {
                file: file.clone(),
                key: "-".into(),
                reason: format!("cannot read: {e}"),
            }])
        })?;
        Self::parse(&text, &file)
    }

    /// Validates configuration text; `file` names it in problems.
    pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
        let mut c = Collector {
            file,
            problems: Vec::new(),
        };
        let mut table: toml::Table = match text.parse() {
            Ok(t) => t,
            Err(e) => {
                let key = e
                    .span()
                    .map(|s| format!("byte {}", s.start))
                    .unwrap_or_else(|| "-".into());
                c.push(&key, e.message().to_owned());
                return Err(ConfigError(c.problems));
            }
        };
        let raw = RawConfig {
            listen: section(&mut table, "listen", &mut c),
            admin: section(&mut table, "admin", &mut c),
            upstream: section(&mut table, "upstream", &mut c),
            limits: section(&mut table, "limits", &mut c),
            store: section(&mut table, "store", &mut c),
            signing: section(&mut table, "signing", &mut c),
            trust: section(&mut table, "trust", &mut c),
            ptcl: section(&mut table, "ptcl", &mut c),
            rich: section(&mut table, "rich", &mut c),
            mcp: table
                .contains_key("mcp")
                .then(|| section(&mut table, "mcp", &mut c)),
            drift: section(&mut table, "drift", &mut c),
            aip2: table
                .contains_key("aip2")
                .then(|| section(&mut table, "aip2", &mut c)),
            admission: table
                .contains_key("admission")
                .then(|| section(&mut table, "admission", &mut c)),
            rcns: table
                .contains_key("rcns")
                .then(|| section(&mut table, "rcns", &mut c)),
            log: section(&mut table, "log", &mut c),
            receipts: section(&mut table, "receipts", &mut c),
            budgets: section(&mut table, "budgets", &mut c),
            rules: table
                .contains_key("rules")
                .then(|| section(&mut table, "rules", &mut c)),
            escrow: section(&mut table, "escrow", &mut c),
            runtime: section(&mut table, "runtime", &mut c),
            telemetry: section(&mut table, "telemetry", &mut c),
        };
        for key in table.keys() {
            c.push(key, "unknown key");
        }
        let config = raw.validate(&mut c);
        if c.problems.is_empty() {
            Ok(config)
        } else {
            Err(ConfigError(c.problems))
        }
    }
}

#[cfg(test)]
mod tests;
