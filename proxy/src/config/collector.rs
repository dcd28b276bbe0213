//! The problem collector that validation threads through every table, and the value parsers
//! (durations, sizes, addresses, URLs) it reports failures for.

use std::net::SocketAddr;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::model::ConfigProblem;

pub(super) struct Collector<'a> {
    pub(super) file: &'a str,
    pub(super) problems: Vec<ConfigProblem>,
}

impl Collector<'_> {
    pub(super) fn push(&mut self, key: &str, reason: impl Into<String>) {
        self.problems.push(ConfigProblem {
            file: self.file.to_owned(),
            key: key.to_owned(),
            reason: reason.into(),
        });
    }

    pub(super) fn duration(&mut self, key: &str, v: &Option<String>, default: &str) -> Duration {
        let text = v.as_deref().unwrap_or(default);
        match humantime::parse_duration(text) {
            Ok(d) => d,
            Err(_) => {
                self.push(key, "expected a duration such as \"2s\" or \"150ms\"");
                humantime::parse_duration(default).expect("defaults are valid durations")
            }
        }
    }

    pub(super) fn size(&mut self, key: &str, v: &Option<String>, default: u64) -> u64 {
        match v {
            None => default,
            Some(text) => parse_size(text).unwrap_or_else(|| {
                self.push(
                    key,
                    "expected a size such as \"1MiB\", \"512KiB\" or \"4096\"",
                );
                default
            }),
        }
    }

    pub(super) fn addr(&mut self, key: &str, v: &Option<String>, default: &str) -> String {
        let text = v.clone().unwrap_or_else(|| default.to_owned());
        if text.parse::<SocketAddr>().is_err() {
            self.push(
                key,
                "expected host:port with an IP address, e.g. \"127.0.0.1:8080\"",
            );
        }
        text
    }

    pub(super) fn url(&mut self, key: &str, text: &str) -> Option<http::Uri> {
        match text.parse::<http::Uri>() {
            Ok(u)
                if matches!(u.scheme_str(), Some("http" | "https")) && u.authority().is_some() =>
            {
                if u.path() != "/" && !u.path().is_empty() {
                    self.push(key, "must be an origin (scheme://host:port) without a path");
                }
                Some(u)
            }
            _ => {
                self.push(key, "expected an absolute http:// or https:// URL");
                None
            }
        }
    }
}

/// Parses `"1MiB"`, `"512KiB"`, `"10MB"`, `"4096"` (bytes).
pub fn parse_size(text: &str) -> Option<u64> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult)
}

pub(super) fn section<T: DeserializeOwned + Default>(
    table: &mut toml::Table,
    name: &str,
    c: &mut Collector<'_>,
) -> T {
    let Some(value) = table.remove(name) else {
        return T::default();
    };
    let mut unknown = Vec::new();
    let result = serde_ignored::deserialize(value, |path| unknown.push(path.to_string()));
    for key in unknown {
        // serde_ignored marks a step through an `Option` with `?`: not part of the key.
        let key = key.replace("?.", "");
        c.push(&format!("{name}.{key}"), "unknown key");
    }
    match result {
        Ok(v) => v,
        Err(e) => {
            c.push(name, e.to_string());
            T::default()
        }
    }
}
