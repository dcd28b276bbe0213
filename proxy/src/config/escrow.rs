//! `[escrow]` (SPEC §9): who decides held writes and where they are announced.

use super::collector::Collector;
use super::model::EscrowSection;
use super::raw::RawEscrow;

impl RawEscrow {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> EscrowSection {
        let approvals = match self.approvals_required {
            None => 1,
            Some(n) if (1..=16).contains(&n) => n as usize,
            Some(_) => {
                c.push(
                    "escrow.approvals_required",
                    "expected 1 to 16 distinct approvers",
                );
                1
            }
        };
        let webhook_slack = match self.webhook_format.as_deref() {
            None | Some("json") => false,
            Some("slack") => true,
            Some(other) => {
                c.push(
                    "escrow.webhook_format",
                    format!("{other:?}: expected \"json\" or \"slack\""),
                );
                false
            }
        };
        EscrowSection {
            approvals,
            webhook_slack,
            webhook: url_of("escrow.webhook", self.webhook, c),
            console_url: url_of("escrow.console_url", self.console_url, c),
        }
    }
}

fn url_of(key: &str, value: Option<String>, c: &mut Collector<'_>) -> Option<String> {
    let v = value?;
    match v.parse::<http::Uri>() {
        Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => Some(v),
        _ => {
            c.push(key, "expected an absolute http(s) URL");
            None
        }
    }
}
