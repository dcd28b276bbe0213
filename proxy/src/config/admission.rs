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
    pub jwks_refresh: Option<RawRefresh>,
    pub introspection: Option<RawIntrospection>,
}

/// `introspection = { url, client_id, client_secret_file }` (RFC 7662).
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawIntrospection {
    pub url: Option<String>,
    pub client_id: Option<String>,
    pub client_secret_file: Option<String>,
}

/// `jwks_refresh = { min = "1m", max = "24h" }`.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RawRefresh {
    pub min: Option<String>,
    pub max: Option<String>,
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
        // A file, or an issuer's `jwks_uri` (https only: the keys decide who is admitted).
        let (mut jwks, mut jwks_urls) = (Vec::new(), Vec::new());
        for entry in self.jwks.unwrap_or_default() {
            if entry.starts_with("https://") {
                let ok = entry
                    .parse::<http::Uri>()
                    .is_ok_and(|u| u.authority().is_some());
                if !ok {
                    c.push(
                        "admission.jwks",
                        format!("{entry:?} is not an absolute URL"),
                    );
                }
                jwks_urls.push(entry);
            } else if entry.contains("://") {
                c.push(
                    "admission.jwks",
                    format!(
                        "{entry:?}: a JWKS URL must be https:// (the keys decide who is admitted)"
                    ),
                );
            } else {
                jwks.push(PathBuf::from(entry));
            }
        }
        if jwks.is_empty() && jwks_urls.is_empty() && self.introspection.is_none() {
            c.push(
                "admission.jwks",
                "name at least one JWKS file or https:// URL with the issuers' public keys",
            );
        }
        let refresh = self.jwks_refresh.unwrap_or_default();
        let jwks_refresh_min = c.duration("admission.jwks_refresh.min", &refresh.min, "1m");
        let jwks_refresh_max = c.duration("admission.jwks_refresh.max", &refresh.max, "24h");
        if jwks_refresh_min < Duration::from_secs(1) || jwks_refresh_min > jwks_refresh_max {
            c.push(
                "admission.jwks_refresh",
                "min must be at least 1s and at most max",
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
        let introspection = self.introspection.map(|i| {
            let url = i.url.unwrap_or_default();
            if !url.starts_with("https://")
                || !url
                    .parse::<http::Uri>()
                    .is_ok_and(|u| u.authority().is_some())
            {
                c.push(
                    "admission.introspection.url",
                    "expected the issuer's RFC 7662 endpoint, an https:// URL",
                );
            }
            let client_id = i.client_id.unwrap_or_default();
            if client_id.is_empty() || client_id.contains(':') {
                c.push(
                    "admission.introspection.client_id",
                    "expected the sidecar's client id at the issuer (no `:`)",
                );
            }
            let secret = i.client_secret_file.map(PathBuf::from);
            if secret.as_ref().is_none_or(|f| !f.is_file()) {
                c.push(
                    "admission.introspection.client_secret_file",
                    "expected a file holding the client's secret",
                );
            }
            super::model::Introspection {
                url,
                client_id,
                client_secret_file: secret.unwrap_or_default(),
            }
        });
        let max_clock_skew = c.duration("admission.max_clock_skew", &self.max_clock_skew, "60s");
        if max_clock_skew > Duration::from_secs(600) {
            c.push("admission.max_clock_skew", "at most 10 minutes");
        }
        Admission {
            required,
            resource,
            jwks,
            jwks_urls,
            jwks_refresh_min,
            jwks_refresh_max,
            introspection,
            issuers,
            algorithms,
            max_clock_skew,
            forward_token: self.forward_token.unwrap_or(false),
        }
    }
}
