//! `[rcns]` (SPEC §13): AGTP-RCNS contract negotiation (seed 000; issue 21).

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::collector::Collector;
use super::model::{Delivery, Rcns};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawRcns {
    pub enabled: Option<bool>,
    pub delivery: Option<String>,
    pub callers: Option<String>,
    pub rate_limit: Option<i64>,
    /// Ours (seed 000 §3.8 leaves them open; docs/decisions.md "RCNS").
    pub session_ttl: Option<String>,
    pub session_idle: Option<String>,
    pub persistent: Option<bool>,
    pub persistent_ttl: Option<String>,
    pub max_contracts_per_agent: Option<i64>,
    pub max_contracts: Option<i64>,
}

impl RawRcns {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Rcns {
        let delivery = match self.delivery.as_deref().unwrap_or("confirm-first") {
            "confirm-first" => Delivery::ConfirmFirst,
            "optimistic" => Delivery::Optimistic,
            _ => {
                c.push(
                    "rcns.delivery",
                    "expected \"confirm-first\" or \"optimistic\"",
                );
                Delivery::ConfirmFirst
            }
        };
        let callers = match self.callers {
            Some(p) if !p.is_empty() => PathBuf::from(p),
            _ => {
                c.push(
                    "rcns.callers",
                    "name the callers file: identity → agent id, scopes, trust tier",
                );
                PathBuf::new()
            }
        };
        let mut count = |key: &str, v: Option<i64>, default: u64, max: i64| match v {
            None => default,
            Some(n) if (1..=max).contains(&n) => n as u64,
            Some(_) => {
                c.push(key, format!("expected 1 to {max}"));
                default
            }
        };
        let rate_limit = count("rcns.rate_limit", self.rate_limit, 10, 1_000_000) as u32;
        let max_contracts_per_agent = count(
            "rcns.max_contracts_per_agent",
            self.max_contracts_per_agent,
            100,
            100_000,
        );
        let max_contracts = count(
            "rcns.max_contracts",
            self.max_contracts,
            100_000,
            10_000_000,
        );
        let session_ttl = c.duration("rcns.session_ttl", &self.session_ttl, "1h");
        // Unset, it is 15 minutes or the whole session_ttl if that is shorter.
        let session_idle = match &self.session_idle {
            None => session_ttl.min(Duration::from_secs(15 * 60)),
            given => c.duration("rcns.session_idle", given, "15m"),
        };
        if session_idle.is_zero() || session_idle > session_ttl {
            c.push(
                "rcns.session_idle",
                "must be longer than zero and at most rcns.session_ttl",
            );
        }
        let persistent_ttl = c.duration("rcns.persistent_ttl", &self.persistent_ttl, "24h");
        for (key, d) in [
            ("rcns.session_ttl", session_ttl),
            ("rcns.persistent_ttl", persistent_ttl),
        ] {
            if d.is_zero() || d > Duration::from_secs(366 * 24 * 3600) {
                c.push(key, "must be longer than zero and at most a year");
            }
        }
        Rcns {
            enabled: self.enabled.unwrap_or(true),
            delivery,
            callers,
            rate_limit,
            session_ttl,
            session_idle,
            persistent: self.persistent.unwrap_or(true),
            persistent_ttl,
            max_contracts_per_agent,
            max_contracts,
        }
    }
}
