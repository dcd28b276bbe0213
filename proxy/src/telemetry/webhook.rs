//! The webhook drift sink (SPEC §8): events POSTed in batches as a JSON array, retried with
//! exponential backoff, bounded everywhere.
//!
//! - **Never blocks the data path**: the drift writer task offers each event with `try_send`
//!   to this sink's own queue ([`QUEUE`] events); a full queue drops the event and counts it in
//!   `palisade_drift_events_dropped_total`, as the main queue does.
//! - **Batches**: the first event opens a batch, which closes after [`WINDOW`] or at
//!   [`MAX_BATCH`] events.
//! - **Retries**: connect errors, timeouts, 5xx, 408 and 429 are retried up to [`ATTEMPTS`]
//!   times, waiting 200 ms, 400 ms, … (capped at 10 s, ±25 % jitter). Other 4xx answers are a
//!   permanent refusal: the batch is dropped at once. A dropped batch counts its events as
//!   dropped. While a batch is retried new events wait in the queue, so a receiver that is
//!   down costs memory bounded by the queue, and the order of events is kept.
//! - Delivery is at least once: a batch whose answer was lost is sent again. Receivers
//!   deduplicate by `eventId`.

use std::time::Duration;

use http::{header, HeaderValue, Request, StatusCode, Uri};
use tokio::sync::mpsc;

use crate::net::body;
use crate::net::upstream::Upstream;

/// Events waiting for the webhook.
pub const QUEUE: usize = 8_192;
/// Events per POST at most.
pub const MAX_BATCH: usize = 100;
/// How long a batch stays open for more events.
pub const WINDOW: Duration = Duration::from_millis(200);
/// Tries per batch, the first one included.
pub const ATTEMPTS: u32 = 6;
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const POST_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct Webhook {
    tx: mpsc::Sender<serde_json::Value>,
    dropped: metrics::Counter,
}

impl Webhook {
    /// Starts the delivery task for `url` on the current runtime.
    pub fn start(url: &str, dropped: metrics::Counter) -> Result<Self, String> {
        Self::start_shaped(url, dropped, false)
    }

    /// As [`Webhook::start`]; `single`: each message is POSTed alone as it is (a Slack
    /// incoming webhook takes one JSON object a request), not in a batch.
    pub fn start_shaped(
        url: &str,
        dropped: metrics::Counter,
        single: bool,
    ) -> Result<Self, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("drift.sinks.webhook: {e}"))?;
        // The client's base is unused: every request carries the full webhook URI.
        let client = Upstream::with_base(uri.clone(), CONNECT_TIMEOUT, POST_TIMEOUT, None)
            .map_err(|e| format!("drift.sinks.webhook: {e}"))?;
        let (tx, rx) = mpsc::channel(QUEUE);
        tokio::spawn(run(uri, client, rx, dropped.clone(), single));
        Ok(Self { tx, dropped })
    }

    /// Queues `event` for delivery without waiting.
    pub fn offer(&self, event: serde_json::Value) {
        if self.tx.try_send(event).is_err() {
            self.dropped.increment(1);
        }
    }
}

fn delivered(result: &'static str) {
    metrics::counter!("palisade_drift_webhook_batches_total", "result" => result).increment(1);
}

async fn run(
    uri: Uri,
    client: Upstream,
    mut rx: mpsc::Receiver<serde_json::Value>,
    dropped: metrics::Counter,
    single: bool,
) {
    metrics::describe_counter!(
        "palisade_drift_webhook_batches_total",
        "Drift event batches POSTed to the webhook sink, by result (delivered, retried, dropped)."
    );
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        let closes = tokio::time::Instant::now() + WINDOW;
        while !single && batch.len() < MAX_BATCH {
            match tokio::time::timeout_at(closes, rx.recv()).await {
                Ok(Some(e)) => batch.push(e),
                // The window closed, or every sender is gone: send what there is.
                Ok(None) | Err(_) => break,
            }
        }
        let n = batch.len() as u64;
        let body = match if single {
            serde_json::to_vec(&batch[0])
        } else {
            serde_json::to_vec(&batch)
        } {
            Ok(b) => bytes::Bytes::from(b),
            Err(_) => {
                dropped.increment(n);
                continue;
            }
        };
        if deliver(&uri, &client, body).await {
            delivered("delivered");
        } else {
            delivered("dropped");
            dropped.increment(n);
        }
    }
}

/// What a try's result means for the batch.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Done,
    Retry,
    GiveUp,
}

fn verdict(status: StatusCode) -> Verdict {
    if status.is_success() {
        Verdict::Done
    } else if status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
    {
        Verdict::Retry
    } else {
        Verdict::GiveUp
    }
}

/// The wait before try `attempt` + 1 (`attempt` ≥ 1), with ±25 % jitter so that sidecars
/// restarted together do not retry together.
fn backoff(attempt: u32) -> Duration {
    let base = FIRST_BACKOFF
        .saturating_mul(1 << attempt.saturating_sub(1).min(16))
        .min(MAX_BACKOFF);
    let jitter = (uuid::Uuid::new_v4().as_u128() % 501) as f64 / 1000.0 + 0.75;
    base.mul_f64(jitter)
}

/// POSTs `body` until it is accepted, refused for good, or [`ATTEMPTS`] are spent.
async fn deliver(uri: &Uri, client: &Upstream, body: bytes::Bytes) -> bool {
    for attempt in 1..=ATTEMPTS {
        let req = Request::post(uri.clone())
            .header(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            )
            .body(body::full(body.clone()));
        let Ok(req) = req else {
            return false;
        };
        let v = match client.send(req).await {
            Ok(resp) => {
                let status = resp.status();
                // Drain (bounded) so the connection goes back to the pool.
                let _ = body::collect_limited(resp.into_body(), 64 * 1024).await;
                verdict(status)
            }
            Err(e) => {
                tracing::debug!(error = %e, "drift webhook POST failed");
                Verdict::Retry
            }
        };
        match v {
            Verdict::Done => return true,
            Verdict::GiveUp => {
                tracing::warn!(url = %uri, "drift webhook refused a batch; dropped");
                return false;
            }
            Verdict::Retry if attempt < ATTEMPTS => {
                delivered("retried");
                tokio::time::sleep(backoff(attempt)).await;
            }
            Verdict::Retry => {}
        }
    }
    tracing::warn!(url = %uri, attempts = ATTEMPTS, "drift webhook unreachable; batch dropped");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_answers_are_retried() {
        assert_eq!(verdict(StatusCode::OK), Verdict::Done);
        assert_eq!(verdict(StatusCode::ACCEPTED), Verdict::Done);
        assert_eq!(verdict(StatusCode::SERVICE_UNAVAILABLE), Verdict::Retry);
        assert_eq!(verdict(StatusCode::TOO_MANY_REQUESTS), Verdict::Retry);
        assert_eq!(verdict(StatusCode::REQUEST_TIMEOUT), Verdict::Retry);
        assert_eq!(verdict(StatusCode::BAD_REQUEST), Verdict::GiveUp);
        assert_eq!(verdict(StatusCode::UNAUTHORIZED), Verdict::GiveUp);
    }

    #[test]
    fn backoff_doubles_within_jitter_and_is_capped() {
        for attempt in 1..=20 {
            let nominal = FIRST_BACKOFF
                .saturating_mul(1 << (attempt - 1).min(16))
                .min(MAX_BACKOFF);
            let b = backoff(attempt);
            assert!(
                b >= nominal.mul_f64(0.75) && b <= nominal.mul_f64(1.25),
                "{attempt}: {b:?}"
            );
        }
    }
}
