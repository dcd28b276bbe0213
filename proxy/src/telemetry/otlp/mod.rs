//! OTLP/HTTP export (SPEC §16): a server span per request with children for the upstream
//! call, the store waits and the lease's signature check, joined to the client's
//! `traceparent`; and, with `receipts = true`, every receipt as a log record.
//!
//! ```text
//! pipeline::handle ─ span::server (parent: the client's traceparent, else a new root)
//!   └ the request's future runs in its Context: span::child (upstream, store, lease)
//!     and span::note_* (code, receipt facts) find it there; no parameter carries it
//! exchange::finish ─ the facts and the status onto the span; the body's end ends it
//!   → SpanQueue (bounded, try_send) → one task → opentelemetry-otlp → client::Collector
//! Enforcement::seal ─ records::emit → RecordQueue → one task → the collector's /v1/logs
//! ```
//! Off (no `[telemetry] otlp`) nothing here runs: `Plane::otlp` is `None` and each hook is
//! one `Option` check or one thread-local read that finds no span.

mod client;
mod queue;
pub mod records;
pub mod span;
pub mod upstream;

use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _, WithHttpConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::config::Otlp;

pub use queue::{RECORDS_DROPPED, SPANS_DROPPED};

/// The exporters in force: the tracer every request's span is made with, and the receipts'
/// logger when `receipts = true`.
pub struct Exporters {
    tracer: SdkTracer,
    // Kept so the processors (and the queues' senders) live as long as the sidecar.
    _provider: SdkTracerProvider,
    records: Option<records::Records>,
    /// `telemetry.otlp.sample`: the share of new traces recorded.
    sample: f64,
}

impl Exporters {
    /// Builds the exporters and spawns their export tasks on the current runtime.
    pub fn start(config: &Otlp) -> Result<Arc<Self>, String> {
        let resource = Resource::builder()
            .with_service_name("palisade")
            .with_attribute(opentelemetry::KeyValue::new(
                "service.version",
                env!("CARGO_PKG_VERSION"),
            ))
            .build();
        let mut spans = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client::Collector::new(config.timeout)?)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(format!("{}/v1/traces", config.endpoint))
            .with_timeout(config.timeout)
            .with_headers(headers(config))
            .build()
            .map_err(|e| format!("telemetry.otlp: {e}"))?;
        // The provider gives its resource to its processors; ours hold no exporter, so the
        // exporter is given it here.
        opentelemetry_sdk::trace::SpanExporter::set_resource(&mut spans, &resource);
        let dropped = queue::Dropped::register(SPANS_DROPPED);
        let (feed, drain) = queue::channel(dropped.queue_full);
        tokio::spawn(queue::export_spans(spans, drain, dropped.export_failed));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(queue::SpanQueue(feed))
            // Decided before a span is made (`span::server`): a client's sampled flag for its
            // trace, one draw against `sample` for a new one; the SDK records what it is given.
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::AlwaysOn)))
            .with_resource(resource.clone())
            .build();
        let records = if config.receipts {
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
            tracer: provider.tracer("palisade"),
            _provider: provider,
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
        span::server(&self.tracer, self.sample, parts)
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
