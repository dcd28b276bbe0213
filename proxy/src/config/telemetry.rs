//! `[telemetry]` (SPEC §16): OTLP/HTTP export of traces, and of receipts as log records.

use std::time::Duration;

use serde::Deserialize;

use super::collector::Collector;
use super::model::Otlp;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawTelemetry {
    pub otlp: Option<RawOtlp>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawOtlp {
    pub endpoint: Option<String>,
    pub sample: Option<f64>,
    pub headers: Option<std::collections::BTreeMap<String, String>>,
    pub timeout: Option<String>,
    pub receipts: Option<bool>,
}

/// Most extra headers an export carries.
const MAX_HEADERS: usize = 16;

impl RawTelemetry {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Option<Otlp> {
        let raw = self.otlp?;
        let endpoint = match raw.endpoint.as_deref() {
            None => {
                c.push(
                    "telemetry.otlp.endpoint",
                    "is required, e.g. \"http://collector:4318\"",
                );
                String::new()
            }
            Some(text) => match text.parse::<http::Uri>() {
                Ok(u)
                    if matches!(u.scheme_str(), Some("http" | "https"))
                        && u.authority().is_some()
                        && u.query().is_none() =>
                {
                    text.trim_end_matches('/').to_owned()
                }
                _ => {
                    c.push(
                        "telemetry.otlp.endpoint",
                        "expected an absolute http:// or https:// URL without a query, e.g. \"http://collector:4318\"",
                    );
                    String::new()
                }
            },
        };
        let sample = raw.sample.unwrap_or(1.0);
        if !(0.0..=1.0).contains(&sample) {
            c.push("telemetry.otlp.sample", "expected a share from 0.0 to 1.0");
        }
        let given = raw.headers.unwrap_or_default();
        if given.len() > MAX_HEADERS {
            c.push(
                "telemetry.otlp.headers",
                format!("at most {MAX_HEADERS} headers"),
            );
        }
        let mut headers = Vec::new();
        for (name, value) in given.into_iter().take(MAX_HEADERS) {
            let key = format!("telemetry.otlp.headers.{name}");
            match (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(&value),
            ) {
                (Ok(n), Ok(mut v)) => {
                    v.set_sensitive(true);
                    headers.push((n, v));
                }
                (Err(_), _) => c.push(&key, "is not a valid HTTP header name"),
                // The value is not echoed: it may be a credential.
                (_, Err(_)) => c.push(&key, "its value is not a valid HTTP header value"),
            }
        }
        let timeout = c.duration("telemetry.otlp.timeout", &raw.timeout, "5s");
        if timeout.is_zero() || timeout > Duration::from_secs(60) {
            c.push(
                "telemetry.otlp.timeout",
                "expected more than 0s and at most 60s",
            );
        }
        Some(Otlp {
            endpoint,
            sample: sample.clamp(0.0, 1.0),
            headers,
            timeout,
            receipts: raw.receipts.unwrap_or(false),
        })
    }
}
