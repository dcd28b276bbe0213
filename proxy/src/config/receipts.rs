//! `[receipts]` (SPEC §2, §5.5): the receipt log's origin and its witnesses. `[log]` is the
//! access log.

use std::time::Duration;

use palisade_policy::log::checkpoint::WitnessKey;
use serde::Deserialize;

use super::collector::Collector;
use super::model::{Receipts, Witness};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawReceipts {
    pub origin: Option<String>,
    pub witnesses: Option<Vec<RawWitness>>,
    pub witness_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawWitness {
    pub url: Option<String>,
    pub vkey: Option<String>,
}

/// Most witnesses a log submits each checkpoint to.
const MAX_WITNESSES: usize = 16;

impl RawReceipts {
    /// `public_base`: `listen.public_base`, whose host names the log by default.
    pub(super) fn validate(self, c: &mut Collector<'_>, public_base: Option<&str>) -> Receipts {
        let origin = match self.origin {
            Some(o) => {
                if !signed_note_name(&o) {
                    c.push(
                        "receipts.origin",
                        "must be a signed-note key name: not empty, no spaces, no '+'",
                    );
                }
                o
            }
            None => default_origin(public_base),
        };
        let raw = self.witnesses.unwrap_or_default();
        if raw.len() > MAX_WITNESSES {
            c.push(
                "receipts.witnesses",
                format!("at most {MAX_WITNESSES} witnesses"),
            );
        }
        let mut witnesses = Vec::new();
        for (i, w) in raw.into_iter().take(MAX_WITNESSES).enumerate() {
            let at = format!("receipts.witnesses[{i}]");
            let url = match w.url {
                Some(u) if u.starts_with("https://") || u.starts_with("http://") => u,
                _ => {
                    c.push(&format!("{at}.url"), "expected an http:// or https:// URL");
                    continue;
                }
            };
            let key = match w.vkey.as_deref().map(WitnessKey::parse) {
                Some(Ok(k)) => k,
                Some(Err(e)) => {
                    c.push(&format!("{at}.vkey"), e.to_string());
                    continue;
                }
                None => {
                    c.push(
                        &format!("{at}.vkey"),
                        "is required: the witness's verifier key of type 0x04",
                    );
                    continue;
                }
            };
            witnesses.push(Witness { url, key });
        }
        let witness_interval =
            c.duration("receipts.witness_interval", &self.witness_interval, "10s");
        if witness_interval < Duration::from_secs(1) {
            c.push("receipts.witness_interval", "must be at least 1s");
        }
        Receipts {
            origin,
            witnesses,
            witness_interval,
        }
    }
}

fn signed_note_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

/// `<public_base host>/palisade`, or `palisade` when no public base is set.
fn default_origin(public_base: Option<&str>) -> String {
    public_base
        .and_then(|b| b.parse::<http::Uri>().ok())
        .and_then(|u| u.host().map(str::to_owned))
        .map_or_else(|| "palisade".to_owned(), |h| format!("{h}/palisade"))
}
