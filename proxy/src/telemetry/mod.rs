//! Metrics, logs and drift events: what the sidecar tells the outside about itself.
//!
//! Metrics go through the `metrics` facade into one process-wide Prometheus recorder
//! (`metrics-exporter-prometheus`), rendered by the admin listener's `/metrics`. Labels only
//! ever hold values from closed sets (method, outcome, code): never a path or a payload value.
//!
//! Logs go through `tracing`: JSON lines when stdout is not a terminal (the normal case in a
//! pod), human-readable otherwise. `RUST_LOG` filters as usual; the default is `info`.
//!
//! Drift events ([`drift`]) go to their sinks (stdout, a file, a webhook) through a bounded
//! queue and never block a request. This layer uses only `config` and `net`.

pub mod access_log;
pub mod drift;
pub mod otlp;
pub mod webhook;

use std::io::IsTerminal as _;
use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

// The stores' metrics are named in `palisade-store`, which records them.
pub use palisade_store::metrics::{
    count_sealed, FENCE_ADVANCES, LOG_CHECKPOINTS, LOG_CHECKPOINT_TIME, LOG_ENTRIES, LOG_SIZE,
    STORE_BATCH_JOBS, STORE_OP_DURATION,
};

pub const REQUESTS_TOTAL: &str = "palisade_requests_total";
pub const REQUEST_DURATION: &str = "palisade_request_duration_seconds";
/// Held writes waiting for a decision (SPEC §9's escrow), read from the store when `/metrics`
/// is scraped: an addition to SPEC §9.
pub const ESCROWS_HELD: &str = "palisade_escrows_held";
/// Opaque tokens asked about at the issuer (RFC 7662), by result: `active` (admitted here),
/// `refused` (inactive, or claims that do not admit here), `failed` (no answer).
pub const INTROSPECTIONS: &str = "palisade_token_introspections_total";
pub const UPSTREAM_DURATION: &str = "palisade_upstream_duration_seconds";
pub const INFLIGHT: &str = "palisade_inflight_requests";
pub const REFUSALS_TOTAL: &str = "palisade_refusals_total";
pub const LOCKFILE_RELOADS: &str = "palisade_lockfile_reloads_total";
pub const LOCKFILE_INFO: &str = "palisade_lockfile_info";
pub const RULES_RELOADS: &str = "palisade_rules_reloads_total";
pub const RULES_INFO: &str = "palisade_rules_info";
pub const RULE_DECISIONS: &str = "palisade_rule_decisions_total";
pub const HOLD_EXPIRY_LOOKS: &str = "palisade_hold_expiry_looks_total";
pub const SHADOW_DISAGREEMENTS: &str = "palisade_shadow_disagreements_total";
/// Re-reads of `admission.jwks`, by result; not in SPEC §9, an addition beside the lockfile's.
pub const JWKS_RELOADS: &str = "palisade_jwks_reloads_total";
/// Lease signatures verified together (issue 36); not in SPEC §9, an addition.
pub const LEASE_BATCH_SIZE: &str = "palisade_lease_signature_batch";
/// Buckets of the two batch-size histograms (store jobs, lease signatures).
const BATCH_BUCKETS: [f64; 10] = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];
/// Receipts that could not be stored for a write that was already forwarded (the audit chain
/// log does not show that write): the alert "receipt log failure" watches this.
pub const RECEIPTS_NOT_STORED: &str = "palisade_receipts_not_stored_total";

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Label values of `palisade_requests_total`: closed sets, so every series is registered
/// once at start (and shows as 0 until used) and the data path only bumps an atomic.
pub const KINDS: [&str; 2] = ["read", "write"];
pub const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "other",
];
pub const OUTCOMES: [&str; 4] = ["forwarded", "refused", "error", "replayed"];

/// Metric handles resolved once; the data path never looks a metric up by name.
pub struct Metrics {
    pub inflight: metrics::Gauge,
    /// `palisade_request_duration_seconds{kind}`, by index into [`KINDS`].
    request_durations: Vec<metrics::Histogram>,
    pub upstream_duration: metrics::Histogram,
    requests: Vec<metrics::Counter>,
    refusals: Vec<metrics::Counter>,
}

impl Metrics {
    pub fn register() -> Self {
        metrics_handle();
        let mut requests = Vec::with_capacity(KINDS.len() * METHODS.len() * OUTCOMES.len());
        for kind in KINDS {
            for method in METHODS {
                for outcome in OUTCOMES {
                    requests.push(metrics::counter!(
                        REQUESTS_TOTAL,
                        "kind" => kind,
                        "method" => method,
                        "outcome" => outcome
                    ));
                }
            }
        }
        // Counters a dashboard reads exist from the start, at zero (Prometheus's advice: a
        // series that appears only on its first failure cannot be alerted on before it).
        for name in [RECEIPTS_NOT_STORED, LOG_ENTRIES, LOG_CHECKPOINTS] {
            let _ = metrics::counter!(name);
        }
        let refusals = palisade_policy::ErrorCode::ALL
            .iter()
            .map(|c| metrics::counter!(REFUSALS_TOTAL, "code" => c.as_str()))
            .collect();
        Self {
            inflight: metrics::gauge!(INFLIGHT),
            request_durations: KINDS
                .iter()
                .map(|kind| metrics::histogram!(REQUEST_DURATION, "kind" => *kind))
                .collect(),
            upstream_duration: metrics::histogram!(UPSTREAM_DURATION),
            requests,
            refusals,
        }
    }

    /// `palisade_requests_total{kind,method,outcome}`; indices into [`KINDS`], [`METHODS`],
    /// [`OUTCOMES`].
    pub fn request(&self, kind: usize, method: usize, outcome: usize) {
        let i = (kind * METHODS.len() + method) * OUTCOMES.len() + outcome;
        if let Some(c) = self.requests.get(i) {
            c.increment(1);
        }
    }

    /// `palisade_request_duration_seconds{kind}`; `kind` an index into [`KINDS`].
    pub fn duration(&self, kind: usize, seconds: f64) {
        if let Some(h) = self.request_durations.get(kind) {
            h.record(seconds);
        }
    }

    pub fn refusal(&self, code: palisade_policy::ErrorCode) {
        if let Some(i) = palisade_policy::ErrorCode::ALL
            .iter()
            .position(|c| *c == code)
        {
            self.refusals[i].increment(1);
        }
    }
}

/// Installs the process-wide recorder once and returns its handle (later calls, e.g. a second
/// server in one test process, share it).
pub fn metrics_handle() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("duration_seconds".into()),
                    &[
                        0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                        0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                    ],
                )
                .expect("bucket list is not empty")
                .set_buckets_for_metric(Matcher::Full(STORE_BATCH_JOBS.into()), &BATCH_BUCKETS)
                .expect("bucket list is not empty")
                .set_buckets_for_metric(Matcher::Full(LEASE_BATCH_SIZE.into()), &BATCH_BUCKETS)
                .expect("bucket list is not empty")
                .build_recorder();
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("a metrics recorder was already installed; /metrics may be empty");
            }
            describe();
            handle
        })
        .clone()
}

fn describe() {
    metrics::describe_counter!(
        REQUESTS_TOTAL,
        "Requests handled, by kind, method and outcome."
    );
    metrics::describe_histogram!(
        REQUEST_DURATION,
        metrics::Unit::Seconds,
        "Time from request head to response head."
    );
    metrics::describe_histogram!(
        UPSTREAM_DURATION,
        metrics::Unit::Seconds,
        "Time the upstream took to answer with a response head."
    );
    metrics::describe_gauge!(INFLIGHT, "Requests currently being handled.");
    metrics::describe_counter!(REFUSALS_TOTAL, "Requests refused, by error code.");
    metrics::describe_histogram!(
        STORE_OP_DURATION,
        metrics::Unit::Seconds,
        "State store operations: `commit` is one durable transaction (fsync included); the \
         others are what a caller waited for."
    );
    metrics::describe_counter!(FENCE_ADVANCES, "Fence epochs advanced durably.");
    metrics::describe_counter!(
        JWKS_RELOADS,
        "Re-reads of the admission JWKS files, by result (applied, rejected)."
    );
    metrics::describe_counter!(
        LOCKFILE_RELOADS,
        "Bundle reloads by result: applied, unchanged or rejected."
    );
    metrics::describe_gauge!(LOCKFILE_INFO, "1 for the lockfile digest in force.");
    metrics::describe_counter!(
        RULES_RELOADS,
        "Operator rules file reloads by result: applied, unchanged or rejected."
    );
    metrics::describe_gauge!(RULES_INFO, "1 for the rules file digest in force.");
    metrics::describe_counter!(
        SHADOW_DISAGREEMENTS,
        "Writes the candidate bundle (rich.candidate) would have decided otherwise."
    );
    metrics::describe_counter!(
        HOLD_EXPIRY_LOOKS,
        "Looks for held writes past their rule's expires (one a second with [rules])."
    );
    metrics::describe_counter!(
        RULE_DECISIONS,
        "Writes an operator rule matched, by rule, action (hold, deny, allow) and mode (enforce, report)."
    );
    metrics::describe_histogram!(STORE_BATCH_JOBS, "Jobs committed per store transaction.");
    metrics::describe_histogram!(
        LEASE_BATCH_SIZE,
        "Lease signatures verified together in one batch."
    );
    metrics::describe_counter!(LOG_ENTRIES, "Receipts integrated into the receipt log.");
    metrics::describe_counter!(
        LOG_CHECKPOINTS,
        "Checkpoints signed by this sidecar (one per store batch with receipts)."
    );
    metrics::describe_gauge!(
        LOG_SIZE,
        "Entries in the receipt log after this sidecar's newest batch."
    );
    metrics::describe_gauge!(
        LOG_CHECKPOINT_TIME,
        metrics::Unit::Seconds,
        "When this sidecar signed its newest checkpoint (Unix time)."
    );
    metrics::describe_counter!(
        INTROSPECTIONS,
        "Opaque tokens introspected at their issuer, by result (active, refused, failed)."
    );
    metrics::describe_gauge!(
        ESCROWS_HELD,
        "Held writes waiting for a decision, counted when /metrics is read (at most 1,000)."
    );
    metrics::describe_counter!(
        RECEIPTS_NOT_STORED,
        "Forwarded writes whose commit receipt could not be stored."
    );
}

/// Starts the log subscriber. Safe to call more than once (later calls do nothing).
pub fn init_logging() {
    if std::io::stdout().is_terminal() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter_from_env())
            .with_writer(std::io::stdout)
            .try_init();
    } else {
        use tracing_subscriber::util::SubscriberInitExt as _;
        if json_subscriber(filter_from_env(), std::io::stdout)
            .try_init()
            .is_ok()
        {
            access_log::use_json_stdout();
        }
    }
}

fn filter_from_env() -> tracing_subscriber::EnvFilter {
    tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
}

/// The JSON log subscriber: one object per line, the event's fields at the top level. One
/// definition, so that the test comparing `access_log`'s hand-written line with this
/// formatter's output compares against what production installs.
fn json_subscriber<W>(
    filter: tracing_subscriber::EnvFilter,
    writer: W,
) -> impl tracing::Subscriber + Send + Sync
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .finish()
}
