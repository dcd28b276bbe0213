//! The traced requests' spans on their way out: a batch of requests' spans written as one
//! OTLP request ([`super::encode`]) and posted to `<endpoint>/v1/traces`.

use super::client::Collector;
use super::queue::{next_batch, Drain, Warned, MAX_BATCH};
use super::span::Span;

/// Exports the traced requests' spans until the queue closes: each batch encoded as one
/// OTLP request and posted to `<endpoint>/v1/traces`.
pub(super) async fn export(
    collector: Collector,
    uri: http::Uri,
    headers: Vec<(http::HeaderName, http::HeaderValue)>,
    mut rx: Drain<Vec<Span>>,
    failed: metrics::Counter,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut warned = Warned::default();
    while next_batch(&mut rx, &mut batch).await {
        let n: usize = batch.iter().map(Vec::len).sum();
        let body = super::encode::request(&batch);
        batch.clear();
        if let Err(e) = collector.post(&uri, &headers, body).await {
            failed.increment(n as u64);
            warned.warn("spans", n, &e);
        }
    }
}
