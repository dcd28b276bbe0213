//! `[admission]` (SPEC §13): RICH admission, bearer tokens that name contract digests.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::collector::Collector;
use super::model::Admission;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawAdmission {
    pub mode: Option<String>,
    pub resource: Option<String>,
    pub jwks: Option<Vec<String>>,
    pub issuers: Option<Vec<String>>,
    pub algorithms: Option<Vec<String>>,
    pub max_clock_skew: Option<String>,
    pub forward_token: Option<bool>,
}

impl RawAdmission {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Admission {
        let required = match self.mode.as_deref().unwrap_or("off") {
            "off" => false,
            "required" => true,
            _ => {
                c.push("admission.mode", "expected \"off\" or \"required\"");
                false
            }
        };
        let resource = self.resource.unwrap_or_default();
        let absolute = resource.parse::<http::Uri>().is_ok_and(|u| {
            matches!(u.scheme_str(), Some("https" | "http")) && u.authority().is_some()
        });
        if !absolute {
            c.push(
                "admission.resource",
                "expected this sidecar's resource identifier, an absolute https:// URL (the tokens' aud)",
            );
        }
        let jwks: Vec<PathBuf> = self
            .jwks
            .unwrap_or_default()
            .into_iter()
            .map(PathBuf::from)
            .collect();
        if jwks.is_empty() {
            c.push(
                "admission.jwks",
                "name at least one JWKS file with the issuers' public keys",
            );
        }
        let issuers = self.issuers.unwrap_or_default();
        if issuers.is_empty() || issuers.iter().any(String::is_empty) {
            c.push(
                "admission.issuers",
                "name at least one issuer (the tokens' iss), none empty",
            );
        }
        let algorithms = self
            .algorithms
            .unwrap_or_else(|| vec!["EdDSA".into(), "ES256".into(), "RS256".into()]);
        if algorithms.is_empty() {
            c.push("admission.algorithms", "name at least one algorithm");
        }
        for a in &algorithms {
            if palisade_rich::admission::token::algorithm(a).is_none() {
                c.push(
                    "admission.algorithms",
                    format!(
                        "{a:?} is not accepted: EdDSA, ES256 and RS256 are (never none or HMAC)"
                    ),
                );
            }
        }
        let max_clock_skew = c.duration("admission.max_clock_skew", &self.max_clock_skew, "60s");
        if max_clock_skew > Duration::from_secs(600) {
            c.push("admission.max_clock_skew", "at most 10 minutes");
        }
        Admission {
            required,
            resource,
            jwks,
            issuers,
            algorithms,
            max_clock_skew,
            forward_token: self.forward_token.unwrap_or(false),
        }
    }
}
