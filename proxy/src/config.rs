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

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Where `signing.key` is looked for when the config does not say.
pub const DEFAULT_SIGNING_KEY: &str = "/etc/palisade/signing.pem";

/// One thing wrong with a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigProblem {
    pub file: String,
    /// Dotted key path, e.g. `limits.max_body`.
    pub key: String,
    pub reason: String,
}

impl fmt::Display for ConfigProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.file, self.key, self.reason)
    }
}

/// Every problem found in one configuration file.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError(pub Vec<ConfigProblem>);

// ---- pass 1: the file's shape -------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawListen {
    pub addr: Option<String>,
    pub drain_timeout: Option<String>,
    pub tls: Option<RawListenTls>,
    pub public_base: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct RawListenTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    #[serde(default)]
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawAdmin {
    pub addr: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawUpstream {
    pub url: Option<String>,
    pub connect_timeout: Option<String>,
    pub timeout: Option<String>,
    pub tls: Option<RawUpstreamTls>,
    pub shadow_url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawUpstreamTls {
    pub ca: Option<PathBuf>,
    pub identity: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawLimits {
    pub max_body: Option<String>,
    pub max_response: Option<String>,
    pub max_json_depth: Option<i64>,
    pub header_timeout: Option<String>,
    pub max_connections: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawStore {
    pub kind: Option<String>,
    pub path: Option<PathBuf>,
    pub url: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawSigning {
    pub key: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawTrust {
    pub issuers: Option<PathBuf>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawPtcl {
    pub writes: Option<Vec<String>>,
    pub max_clock_skew: Option<String>,
    pub pre_image: Option<String>,
    pub max_grant: Option<String>,
    pub authority: Option<bool>,
    pub idempotency_retention: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawRich {
    pub lockfile: Option<PathBuf>,
    pub contracts: Option<PathBuf>,
    pub expected_digest: Option<String>,
    pub unbound_writes: Option<String>,
    pub watch: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawMcp {
    pub path: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum RawSink {
    Named(String),
    File { file: PathBuf },
    Webhook { webhook: String },
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawDrift {
    pub sinks: Option<Vec<RawSink>>,
    pub quarantine_dir: Option<PathBuf>,
}

/// The file as written, before validation.
#[derive(Debug, Default)]
pub struct RawConfig {
    pub listen: RawListen,
    pub admin: RawAdmin,
    pub upstream: RawUpstream,
    pub limits: RawLimits,
    pub store: RawStore,
    pub signing: RawSigning,
    pub trust: RawTrust,
    pub ptcl: RawPtcl,
    pub rich: RawRich,
    pub mcp: Option<RawMcp>,
    pub drift: RawDrift,
}

// ---- pass 2: validated ---------------------------------------------------------------------

#[derive(Debug, Clone)]
pub struct ListenTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub client_ca: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreKind {
    Embedded,
    Postgres,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnboundWrites {
    Deny,
    Allow,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sink {
    Stdout,
    File(PathBuf),
    Webhook(String),
}

/// A validated configuration. Every field has its SPEC default filled in.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen_addr: String,
    pub drain_timeout: Duration,
    pub listen_tls: Option<ListenTls>,
    pub public_base: Option<String>,
    pub admin_addr: String,
    pub upstream_url: http::Uri,
    pub upstream_connect_timeout: Duration,
    pub upstream_timeout: Duration,
    pub upstream_ca: Option<PathBuf>,
    pub upstream_identity: Option<String>,
    pub shadow_url: Option<http::Uri>,
    pub max_body: u64,
    pub max_response: u64,
    pub max_json_depth: usize,
    pub header_timeout: Duration,
    pub max_connections: usize,
    pub store_kind: StoreKind,
    pub store_path: PathBuf,
    pub store_url: Option<String>,
    pub signing_key: Option<PathBuf>,
    pub trust_issuers: Option<PathBuf>,
    pub writes: Vec<http::Method>,
    pub max_clock_skew: Duration,
    pub pre_image_fetch: bool,
    pub max_grant: Duration,
    pub authority: bool,
    /// How long an Idempotency-Key's outcome is kept (SPEC §5.6: 24 h by default).
    pub idempotency_retention: Duration,
    pub lockfile: Option<PathBuf>,
    pub contracts: Option<PathBuf>,
    pub expected_digest: Option<String>,
    pub unbound_writes: UnboundWrites,
    pub watch: bool,
    pub mcp_path: Option<String>,
    pub drift_sinks: Vec<Sink>,
    pub quarantine_dir: PathBuf,
}

struct Collector<'a> {
    file: &'a str,
    problems: Vec<ConfigProblem>,
}

impl Collector<'_> {
    fn push(&mut self, key: &str, reason: impl Into<String>) {
        self.problems.push(ConfigProblem {
            file: self.file.to_owned(),
            key: key.to_owned(),
            reason: reason.into(),
        });
    }

    fn duration(&mut self, key: &str, v: &Option<String>, default: &str) -> Duration {
        let text = v.as_deref().unwrap_or(default);
        match humantime::parse_duration(text) {
            Ok(d) => d,
            Err(_) => {
                self.push(key, "expected a duration such as \"2s\" or \"150ms\"");
                humantime::parse_duration(default).expect("defaults are valid durations")
            }
        }
    }

    fn size(&mut self, key: &str, v: &Option<String>, default: u64) -> u64 {
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

    fn addr(&mut self, key: &str, v: &Option<String>, default: &str) -> String {
        let text = v.clone().unwrap_or_else(|| default.to_owned());
        if text.parse::<SocketAddr>().is_err() {
            self.push(
                key,
                "expected host:port with an IP address, e.g. \"127.0.0.1:8080\"",
            );
        }
        text
    }

    fn url(&mut self, key: &str, text: &str) -> Option<http::Uri> {
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

fn section<T: DeserializeOwned + Default>(
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

impl Config {
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

impl RawConfig {
    fn validate(self, c: &mut Collector<'_>) -> Config {
        let listen_addr = c.addr("listen.addr", &self.listen.addr, "0.0.0.0:8080");
        let drain_timeout = c.duration("listen.drain_timeout", &self.listen.drain_timeout, "20s");
        let public_base = self.listen.public_base.clone();
        if let Some(base) = &public_base {
            c.url("listen.public_base", base);
        }
        let admin_addr = c.addr("admin.addr", &self.admin.addr, "127.0.0.1:9901");

        let upstream_url = match &self.upstream.url {
            Some(u) => c.url("upstream.url", u),
            None => {
                c.push("upstream.url", "is required");
                None
            }
        }
        .unwrap_or_else(|| http::Uri::from_static("http://127.0.0.1:1"));
        let shadow_url = self
            .upstream
            .shadow_url
            .as_deref()
            .and_then(|u| c.url("upstream.shadow_url", u));
        let upstream_tls = self.upstream.tls.unwrap_or_default();

        let max_json_depth = match self.limits.max_json_depth {
            None => 128,
            Some(d) if (1..=4096).contains(&d) => d as usize,
            Some(_) => {
                c.push("limits.max_json_depth", "must be between 1 and 4096");
                128
            }
        };
        let max_connections = match self.limits.max_connections {
            None => 10_000,
            Some(n) if (1..=1_000_000).contains(&n) => n as usize,
            Some(_) => {
                c.push("limits.max_connections", "must be between 1 and 1000000");
                10_000
            }
        };

        let store_kind = match self.store.kind.as_deref() {
            None | Some("embedded") => StoreKind::Embedded,
            Some("postgres") => StoreKind::Postgres,
            Some(_) => {
                c.push("store.kind", "must be \"embedded\" or \"postgres\"");
                StoreKind::Embedded
            }
        };
        if store_kind == StoreKind::Postgres && self.store.url.is_none() {
            c.push("store.url", "is required when store.kind = \"postgres\"");
        }

        let writes = self
            .ptcl
            .writes
            .unwrap_or_else(|| ["POST", "PUT", "PATCH", "DELETE"].map(String::from).into())
            .iter()
            .filter_map(|m| match http::Method::from_bytes(m.as_bytes()) {
                Ok(method) if m.bytes().all(|b| b.is_ascii_uppercase()) => Some(method),
                _ => {
                    c.push("ptcl.writes", "must list HTTP methods in upper case");
                    None
                }
            })
            .collect();
        let pre_image_fetch = match self.ptcl.pre_image.as_deref() {
            None | Some("fetch") => true,
            Some("off") => false,
            Some(_) => {
                c.push("ptcl.pre_image", "must be \"fetch\" or \"off\"");
                true
            }
        };
        let unbound_writes = match self.rich.unbound_writes.as_deref() {
            None | Some("deny") => UnboundWrites::Deny,
            Some("allow") => UnboundWrites::Allow,
            Some(_) => {
                c.push("rich.unbound_writes", "must be \"deny\" or \"allow\"");
                UnboundWrites::Deny
            }
        };
        if self.rich.lockfile.is_some() != self.rich.contracts.is_some() {
            c.push("rich", "lockfile and contracts must be set together");
        }

        let drift_sinks = self
            .drift
            .sinks
            .unwrap_or_else(|| vec![RawSink::Named("stdout".into())])
            .into_iter()
            .filter_map(|s| match s {
                RawSink::Named(n) if n == "stdout" => Some(Sink::Stdout),
                RawSink::Named(_) => {
                    c.push("drift.sinks", "a named sink must be \"stdout\"");
                    None
                }
                RawSink::File { file } => Some(Sink::File(file)),
                RawSink::Webhook { webhook } => {
                    c.url("drift.sinks.webhook", &origin_of(&webhook));
                    Some(Sink::Webhook(webhook))
                }
            })
            .collect();

        let mcp_path = self.mcp.map(|m| m.path.unwrap_or_else(|| "/mcp".into()));
        if let Some(p) = &mcp_path {
            if !p.starts_with('/') {
                c.push("mcp.path", "must start with '/'");
            }
        }

        Config {
            listen_addr,
            drain_timeout,
            listen_tls: self.listen.tls.map(|t| ListenTls {
                cert: t.cert,
                key: t.key,
                client_ca: t.client_ca,
            }),
            public_base,
            admin_addr,
            upstream_url,
            upstream_connect_timeout: c.duration(
                "upstream.connect_timeout",
                &self.upstream.connect_timeout,
                "2s",
            ),
            upstream_timeout: c.duration("upstream.timeout", &self.upstream.timeout, "30s"),
            upstream_ca: upstream_tls.ca,
            upstream_identity: upstream_tls.identity,
            shadow_url,
            max_body: c.size("limits.max_body", &self.limits.max_body, 1 << 20),
            max_response: c.size("limits.max_response", &self.limits.max_response, 8 << 20),
            max_json_depth,
            header_timeout: c.duration("limits.header_timeout", &self.limits.header_timeout, "10s"),
            max_connections,
            store_kind,
            store_path: self
                .store
                .path
                .unwrap_or_else(|| "/var/lib/palisade/state.redb".into()),
            store_url: self.store.url,
            signing_key: self.signing.key,
            trust_issuers: self.trust.issuers,
            writes,
            max_clock_skew: c.duration("ptcl.max_clock_skew", &self.ptcl.max_clock_skew, "60s"),
            pre_image_fetch,
            max_grant: c.duration("ptcl.max_grant", &self.ptcl.max_grant, "5m"),
            authority: self.ptcl.authority.unwrap_or(true),
            idempotency_retention: c.duration(
                "ptcl.idempotency_retention",
                &self.ptcl.idempotency_retention,
                "24h",
            ),
            lockfile: self.rich.lockfile,
            contracts: self.rich.contracts,
            expected_digest: self.rich.expected_digest,
            unbound_writes,
            watch: self.rich.watch.unwrap_or(true),
            mcp_path,
            drift_sinks,
            quarantine_dir: self
                .drift
                .quarantine_dir
                .unwrap_or_else(|| "/var/lib/palisade/quarantine".into()),
        }
    }
}

/// The origin part of a URL (for validating webhook URLs, which may have a path).
fn origin_of(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => match (u.scheme_str(), u.authority()) {
            (Some(s), Some(a)) => format!("{s}://{a}"),
            _ => url.to_owned(),
        },
        Err(_) => url.to_owned(),
    }
}

#[cfg(test)]
mod tests;
