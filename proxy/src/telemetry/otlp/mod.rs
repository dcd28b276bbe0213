//! OTLP/HTTP export (SPEC §16): a server span per request with children for the upstream
//! call, the store waits and the lease's signature check, joined to the client's
//! `traceparent`; and, with `receipts = true`, every receipt as a log record.
//!
//! ```text
//! pipeline::handle ─ span::server (parent: the client's traceparent, else a new root)
//!   └ the request's future runs with its record as a task-local: span::Child (upstream,
//!     store, lease) and span::note_* (code, receipt facts) find it there
//! exchange::finish ─ the answer noted; the body's end ends the server span
//!   → the request's spans queued at once (bounded, try_send) → one task → encode (OTLP
//!     protobuf, written directly) → client::Collector → <endpoint>/v1/traces
//! Enforcement::seal ─ records::emit → the OpenTelemetry SDK's logger → RecordQueue → one
//!   task → opentelemetry-otlp → <endpoint>/v1/logs
//! ```
//! Off (no `[telemetry] otlp`) nothing here runs: `Plane::otlp` is `None` and each hook is
//! one `Option` check or one task-local read that finds no request.

mod client;
mod encode;
mod queue;
pub mod records;
pub mod span;
mod traces;
pub mod upstream;

use std::sync::Arc;

use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::Resource;

use crate::config::Otlp;

pub use queue::{RECORDS_DROPPED, SPANS_DROPPED};

/// The exporters in force: the queue every traced request's spans go into, and the receipts'
/// logger when `receipts = true`.
pub struct Exporters {
    spans: Arc<queue::Feed<Vec<span::Span>>>,
    records: Option<records::Records>,
    /// `telemetry.otlp.sample`: the share of new traces recorded.
    sample: f64,
}

impl Exporters {
    /// Builds the exporters and spawns their export tasks on the current runtime.
    pub fn start(config: &Otlp) -> Result<Arc<Self>, String> {
        let traces: http::Uri = format!("{}/v1/traces", config.endpoint)
            .parse()
            .map_err(|e| format!("telemetry.otlp.endpoint: {e}"))?;
        let dropped = queue::Dropped::register(SPANS_DROPPED);
        let (feed, drain) = queue::channel(dropped.queue_full);
        tokio::spawn(traces::export(
            client::Collector::new(config.timeout)?,
            traces,
            config.headers.clone(),
            drain,
            dropped.export_failed,
        ));
        let records = if config.receipts {
            let resource = Resource::builder()
                .with_service_name("palisade")
                .with_attribute(opentelemetry::KeyValue::new(
                    "service.version",
                    env!("CARGO_PKG_VERSION"),
                ))
                .build();
            let exporter = opentelemetry_otlp::LogExporter::builder()
                .with_http()
                .with_http_client(client::Collector::new(config.timeout)?)
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(format!("{}/v1/logs", config.endpoint))
                .with_timeout(config.timeout)
                .with_headers(headers(config))
                .build()
                .map_err(|e| format!("telemetry.otlp: {e}"))?;
            Some(records::Records::start(exporter, resource))
        } else {
            None
        };
        Ok(Arc::new(Self {
            spans: Arc::new(feed),
            records,
            sample: config.sample,
        }))
    }

    /// Starts a request's server span ([`span::server`]): the trace id, and the span when the
    /// request is recorded.
    pub fn server_span(
        &self,
        parts: &mut http::request::Parts,
    ) -> (Option<span::Traced>, std::sync::Arc<str>) {
        span::server(&self.spans, self.sample, parts)
    }

    /// The receipts' logger, when `receipts = true`.
    pub fn records(&self) -> Option<&records::Records> {
        self.records.as_ref()
    }
}

fn headers(config: &Otlp) -> std::collections::HashMap<String, String> {
    config
        .headers
        .iter()
        .filter_map(|(n, v)| Some((n.as_str().to_owned(), v.to_str().ok()?.to_owned())))
        .collect()
}
