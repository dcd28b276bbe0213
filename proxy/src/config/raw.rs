//! The configuration file as written: one struct per TOML table, every field optional, so
//! that unknown keys and bad values are all collected before anything is refused.

use std::path::PathBuf;

use serde::Deserialize;

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
    pub token_file: Option<String>,
    pub tls: Option<RawListenTls>,
    pub allowed_spiffe_ids: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawUpstream {
    pub url: Option<String>,
    pub connect_timeout: Option<String>,
    pub timeout: Option<String>,
    pub tls: Option<RawUpstreamTls>,
    pub shadow_url: Option<String>,
    pub if_match: Option<bool>,
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
    pub url_env: Option<String>,
    pub pool_size: Option<i64>,
    pub statement_timeout: Option<String>,
    pub lease_retention: Option<String>,
    pub receipt_retention: Option<String>,
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
    pub reads: Option<Vec<String>>,
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
    pub candidate: Option<super::rules::RawCandidate>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawLog {
    pub access: Option<String>,
    pub access_sample_rate: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawMcp {
    pub path: Option<String>,
    /// SPEC §11: the `Origin` values a request to `mcp.path` may carry (default: none).
    pub allowed_origins: Option<Vec<String>>,
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
    pub log: RawLog,
    pub aip2: Option<super::aip2::RawAip2>,
    pub admission: Option<super::admission::RawAdmission>,
    pub rcns: Option<super::rcns::RawRcns>,
    pub receipts: super::receipts::RawReceipts,
    pub budgets: super::budgets::RawBudgets,
    pub rules: Option<super::rules::RawRules>,
    pub escrow: RawEscrow,
    pub runtime: RawRuntime,
    pub telemetry: super::telemetry::RawTelemetry,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawRuntime {
    pub threads: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawEscrow {
    pub approvals_required: Option<i64>,
    pub webhook: Option<String>,
    pub webhook_format: Option<String>,
    pub console_url: Option<String>,
}
