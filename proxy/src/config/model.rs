//! The validated configuration: what the rest of the sidecar reads.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

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

/// `[rules]`, validated.
#[derive(Debug, Clone)]
pub struct RulesSection {
    /// `rules.file`: hot-swapped like the lockfile (watch, reload, SIGHUP).
    pub file: std::path::PathBuf,
    /// `rules.expose_headers`: lower-case names; never a credential.
    pub expose_headers: Vec<String>,
}

/// `rich.candidate`, validated.
#[derive(Debug, Clone)]
pub struct CandidateSection {
    pub lockfile: PathBuf,
    pub contracts: PathBuf,
    /// Its own rules; without them the rules in force judge it too.
    pub rules: Option<PathBuf>,
}

/// `[escrow]`, validated: who decides held writes and where they are announced.
#[derive(Debug, Clone)]
pub struct EscrowSection {
    /// `escrow.approvals_required` (SPEC §9): distinct approvers before a held write goes.
    pub approvals: usize,
    /// `escrow.webhook`: where a held write is announced (`escrow_held`, no payload).
    pub webhook: Option<String>,
    /// `escrow.webhook_format = "slack"`: one Slack incoming-webhook message per held write
    /// instead of the JSON batches the drift webhook sink sends.
    pub webhook_slack: bool,
    /// `escrow.console_url`: the console as operators reach it, for the announcement's link.
    pub console_url: Option<String>,
}

/// `[listen]`, validated: the data plane's listener.
#[derive(Debug, Clone)]
pub struct ListenSection {
    pub addr: String,
    pub drain_timeout: Duration,
    pub tls: Option<ListenTls>,
}

/// `[admin]`, validated: the admin listener and its credentials.
#[derive(Debug, Clone)]
pub struct AdminSection {
    pub addr: String,
    /// `admin.token_file`: the bearer token mutating and `/admin/v1/*` calls need (SPEC §9).
    pub token_file: Option<PathBuf>,
    /// `admin.tls`: the admin listener over TLS; with `client_ca`, client certificates are
    /// asked for (not required: probes have none) and verified.
    pub tls: Option<ListenTls>,
    /// `admin.allowed_spiffe_ids`: a verified client certificate with one of these URI SANs
    /// is an admin credential, as the token is.
    pub spiffe_ids: Vec<String>,
}

/// `[upstream]`, validated: where the SoR is and how it is reached.
#[derive(Debug, Clone)]
pub struct UpstreamSection {
    pub url: http::Uri,
    pub connect_timeout: Duration,
    pub timeout: Duration,
    /// `upstream.tls.ca`: the roots the upstream's certificate is checked against.
    pub ca: Option<PathBuf>,
    /// `upstream.tls.identity`: the deployment identity the upstream must present.
    pub identity: Option<String>,
    /// `upstream.if_match`: a write goes with `If-Match` naming the strong ETag check 12's
    /// fetch answered with, so the SoR itself refuses it if the resource changed since.
    pub if_match: bool,
}

/// `[limits]`, validated: the bounds on what a client or an upstream can make the sidecar hold.
#[derive(Debug, Clone)]
pub struct LimitsSection {
    pub max_body: u64,
    pub max_response: u64,
    pub max_json_depth: usize,
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// `[store]`, validated: where fences, leases and receipts are kept.
#[derive(Debug, Clone)]
pub struct StoreSection {
    pub kind: StoreKind,
    pub path: PathBuf,
    pub url: Option<String>,
    /// `store.url_env`: the variable that holds the URL (wins over `store.url`).
    pub url_env: Option<String>,
    pub pool_size: usize,
    pub statement_timeout: Duration,
    /// `store.lease_retention` and `store.receipt_retention` (docs/decisions.md).
    pub retention: Retention,
}

/// A validated configuration. Every field has its SPEC default filled in.
#[derive(Debug, Clone)]
pub struct Config {
    /// `[telemetry] otlp` (SPEC §16): none unless configured.
    pub otlp: Option<Otlp>,
    /// `[escrow]`.
    pub escrow: EscrowSection,
    /// `runtime.threads`: data-plane runtimes (`None`: one per available CPU).
    pub runtime_threads: Option<usize>,
    /// `[budgets] rules` (SPEC §14): none unless configured.
    pub budgets: Vec<palisade_policy::budget::Rule>,
    /// `[rules]` (SPEC §15): the operator's rules, when the section is present.
    pub rules: Option<RulesSection>,
    /// `[aip2]`: the AIP-2.1 quote-channel guard, when the section is present.
    pub aip2: Option<Aip2>,
    /// `[admission]`: RICH admission, when the section is present.
    pub admission: Option<Admission>,
    /// `[rcns]`: contract negotiation, when the section is present.
    pub rcns: Option<Rcns>,
    /// `[receipts]`: the receipt log's origin and witnesses.
    pub receipts: Receipts,
    /// `[listen]`.
    pub listen: ListenSection,
    pub public_base: Option<String>,
    /// `[admin]`.
    pub admin: AdminSection,
    /// `[upstream]`.
    pub upstream: UpstreamSection,
    pub shadow_url: Option<http::Uri>,
    /// `[limits]`.
    pub limits: LimitsSection,
    /// `[store]`.
    pub store: StoreSection,
    /// `log.access`, `log.access_sample_rate`.
    pub access_log: AccessLog,
    pub signing_key: Option<PathBuf>,
    pub trust_issuers: Option<PathBuf>,
    /// `ptcl.reads`: the safe methods; every other method is a write (SPEC §4, fail-closed).
    pub reads: Vec<http::Method>,
    pub writes: Vec<http::Method>,
    pub max_clock_skew: Duration,
    pub pre_image_fetch: bool,
    pub max_grant: Duration,
    pub authority: bool,
    /// How long an Idempotency-Key's outcome is kept (SPEC §5.6: 24 h by default).
    pub idempotency_retention: Duration,
    pub lockfile: Option<PathBuf>,
    pub contracts: Option<PathBuf>,
    /// `rich.candidate` (SPEC §15): checked beside the bundle in force on every write, without
    /// effect.
    pub candidate: Option<CandidateSection>,
    pub expected_digest: Option<String>,
    pub unbound_writes: UnboundWrites,
    pub watch: bool,
    pub mcp_path: Option<String>,
    /// `mcp.allowed_origins`, each normalised (`palisade_policy::target::normalize_origin`).
    pub mcp_allowed_origins: Vec<String>,
    pub drift_sinks: Vec<Sink>,
    pub quarantine_dir: PathBuf,
}

/// Which requests get an access-log line (`log.access`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessLog {
    Off,
    /// Every request.
    Full,
    /// One successful request in `every`; every refusal, error and 5xx.
    Sampled {
        every: u64,
    },
}

// The store keeps and sweeps by it, so it is defined there.
pub use palisade_store::Retention;

/// The quote channel's settings, validated.
#[derive(Debug, Clone)]
pub struct Aip2 {
    /// Path prefix: `POST {quote_channel}/{chainId}/{txId}` is guarded.
    pub quote_channel: String,
    /// EIP-712 `verifyingContract` (the ACTP kernel) per accepted chain id.
    pub kernels: std::collections::BTreeMap<u64, [u8; 20]>,
    pub grace: Duration,
    pub max_ttl: Duration,
    pub dedup_ttl: Duration,
    /// Requests per minute per client address (quote channel; relay posts have their own
    /// window of the same size).
    pub rate_limit: u32,
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The one header the trusted proxies set (`aip2.trusted_proxy_header`).
    pub trusted_proxy_header: ProxyHeader,
    /// Serve the negotiation relay (seed §6.3) at `/api/v1/negotiations/…`.
    pub relay: bool,
    pub relay_ttl: Duration,
    pub relay_max_per_tx: u64,
    pub relay_max_messages: u64,
}

/// The forwarding header a trusted proxy writes the client's address into. Only that one is
/// read: a proxy passes the other through as the client sent it (nginx appends to
/// `X-Forwarded-For` and forwards a client's `Forwarded` untouched), so believing it would let
/// the client choose its own address (issue 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ProxyHeader {
    /// `X-Forwarded-For` (nginx, Envoy, HAProxy, cloud load balancers): the default.
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239), its `for=` parameters.
    Forwarded,
}

/// The admission settings, validated.
#[derive(Debug, Clone)]
pub struct Admission {
    /// `mode = "required"`: every call to a bound operation needs a token that admits it.
    pub required: bool,
    /// This sidecar's resource identifier: the tokens' `aud`, and the metadata's `resource`.
    pub resource: String,
    /// JWKS files (any of them may hold keys of any listed issuer, matched by `kid`).
    pub jwks: Vec<std::path::PathBuf>,
    /// Issuers' `jwks_uri`s (https), cached as their `Cache-Control` says within
    /// [`Admission::jwks_refresh_min`, `Admission::jwks_refresh_max`].
    pub jwks_urls: Vec<String>,
    pub jwks_refresh_min: Duration,
    pub jwks_refresh_max: Duration,
    /// Opaque tokens are asked about here (RFC 7662).
    pub introspection: Option<Introspection>,
    pub issuers: Vec<String>,
    /// `EdDSA`, `ES256`, `RS256` (the only ones accepted).
    pub algorithms: Vec<String>,
    pub max_clock_skew: Duration,
    /// Send the bearer token on to the upstream (off: the sidecar removes it).
    pub forward_token: bool,
}

/// An issuer's token introspection endpoint (RFC 7662) and the sidecar's client credentials
/// there (HTTP Basic; the secret re-read from its file at each call, so a rotated Secret
/// takes effect at once).
#[derive(Debug, Clone)]
pub struct Introspection {
    pub url: String,
    pub client_id: String,
    pub client_secret_file: std::path::PathBuf,
}

/// How an unregistered pair addressed directly is answered (seed 000 §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// 461: the agent PROPOSEs first.
    ConfirmFirst,
    /// 263 with `Contract-Synthesized`: the contract is made at once.
    Optimistic,
}

/// The RCNS settings, validated.
#[derive(Debug, Clone)]
pub struct Rcns {
    /// Lock 1 of the four-lock gate.
    pub enabled: bool,
    pub delivery: Delivery,
    /// The callers file (identity → agent id, scopes, trust tier).
    pub callers: std::path::PathBuf,
    /// PROPOSE per minute per agent.
    pub rate_limit: u32,
    /// The longest a session-scoped contract lives.
    pub session_ttl: Duration,
    /// A session-scoped contract unused this long is gone.
    pub session_idle: Duration,
    /// Whether `persistent: true` is honoured.
    pub persistent: bool,
    pub persistent_ttl: Duration,
    pub max_contracts_per_agent: u64,
    pub max_contracts: u64,
}

/// `[receipts]` (SPEC §2, §5.5).
#[derive(Debug, Clone)]
pub struct Receipts {
    /// The checkpoints' origin line and signed-note key name.
    pub origin: String,
    pub witnesses: Vec<Witness>,
    /// How often a checkpoint is submitted to each witness, at most.
    pub witness_interval: std::time::Duration,
}

/// A C2SP tlog-witness the log submits its checkpoints to.
#[derive(Debug, Clone)]
pub struct Witness {
    pub url: String,
    pub key: palisade_policy::log::checkpoint::WitnessKey,
}

/// `telemetry.otlp`: where and what to export.
#[derive(Clone)]
pub struct Otlp {
    /// The collector's base URL without a trailing `/`; `/v1/traces` and `/v1/logs` are
    /// appended, as `OTEL_EXPORTER_OTLP_ENDPOINT` is read (docs/decisions.md).
    pub endpoint: String,
    /// The share of traces without a sampled parent that are recorded (0 to 1); a client's
    /// `traceparent` decides for its own trace (parent-based sampling).
    pub sample: f64,
    /// Sent with every export (a collector's API key): never logged or shown.
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    /// One export's deadline, retries included.
    pub timeout: Duration,
    /// Every receipt also goes out as an OTLP log record.
    pub receipts: bool,
}

impl std::fmt::Debug for Otlp {
    // The headers may hold a credential: their names only.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Otlp")
            .field("endpoint", &self.endpoint)
            .field("sample", &self.sample)
            .field(
                "headers",
                &self.headers.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("receipts", &self.receipts)
            .finish()
    }
}
