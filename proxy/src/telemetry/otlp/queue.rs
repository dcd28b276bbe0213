//! The bounded queues between the data plane and the collector: a span or a receipt's log
//! record is handed over with one `try_send`, never waited for; a full queue drops it and
//! counts it. One task per queue batches and exports, one export at a time, so a collector
//! that is down or slow costs the requests nothing and holds at most the queue's memory.

use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::logs::{LogBatch, LogExporter as _, LogProcessor, SdkLogRecord};
use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

/// Spans dropped before reaching the collector, by `reason` (SPEC §16).
pub const SPANS_DROPPED: &str = "palisade_otlp_spans_dropped_total";
/// Receipt log records dropped before reaching the collector, by `reason`; an addition to
/// SPEC §16 beside the spans' counter (the receipts stay in the log either way).
pub const RECORDS_DROPPED: &str = "palisade_otlp_records_dropped_total";

/// Spans or records a queue holds; past this they are dropped (a few MB at most).
pub(super) const CAPACITY: usize = 4096;
/// Most spans or records one export carries.
pub(super) const MAX_BATCH: usize = 512;
/// How long a batch that is not full waits for more before it goes.
const DELAY: Duration = Duration::from_millis(500);

/// `palisade_otlp_spans_dropped_total` and `palisade_otlp_records_dropped_total`, by reason:
/// `queue_full` (the collector is slower than the traffic) or `export_failed` (the collector
/// refused the batch, or did not answer within `telemetry.otlp.timeout`).
pub(super) struct Dropped {
    pub queue_full: metrics::Counter,
    pub export_failed: metrics::Counter,
}

impl Dropped {
    pub(super) fn register(name: &'static str) -> Self {
        Self {
            queue_full: metrics::counter!(name, "reason" => "queue_full"),
            export_failed: metrics::counter!(name, "reason" => "export_failed"),
        }
    }
}

/// The logger provider's one processor: emitted receipts into the queue.
pub(super) struct RecordQueue(pub Feed<(SdkLogRecord, InstrumentationScope)>);

impl std::fmt::Debug for RecordQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordQueue")
    }
}

impl LogProcessor for RecordQueue {
    fn emit(&self, record: &mut SdkLogRecord, scope: &InstrumentationScope) {
        self.0.push((record.clone(), scope.clone()));
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
}

/// The sending side of a queue: one `try_send`; a full queue drops and counts. Once a batch's
/// worth is waiting, the exporting task is told so; it is never woken for a single item (a
/// wake-up per span cost more than the span).
pub(super) struct Feed<T> {
    tx: mpsc::Sender<T>,
    ready: Arc<Notify>,
    full: metrics::Counter,
}

impl<T> Feed<T> {
    pub(super) fn push(&self, item: T) {
        if self.tx.try_send(item).is_err() {
            self.full.increment(1);
        } else if self.tx.capacity() <= CAPACITY - MAX_BATCH {
            self.ready.notify_one();
        }
    }
}

/// The receiving side: the channel and the batch-ready signal.
pub(super) struct Drain<T> {
    rx: mpsc::Receiver<T>,
    ready: Arc<Notify>,
}

/// A bounded queue of spans or records.
pub(super) fn channel<T>(full: metrics::Counter) -> (Feed<T>, Drain<T>) {
    let (tx, rx) = mpsc::channel(CAPACITY);
    let ready = Arc::new(Notify::new());
    (
        Feed {
            tx,
            ready: ready.clone(),
            full,
        },
        Drain { rx, ready },
    )
}

/// Takes up to [`MAX_BATCH`] items: whatever is queued; when nothing is, waits for a batch's
/// worth or [`DELAY`], whichever comes first. `false` when the queue is closed and empty.
pub(super) async fn next_batch<T>(q: &mut Drain<T>, batch: &mut Vec<T>) -> bool {
    loop {
        while batch.len() < MAX_BATCH {
            match q.rx.try_recv() {
                Ok(item) => batch.push(item),
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => return !batch.is_empty(),
            }
        }
        if !batch.is_empty() {
            return true;
        }
        tokio::select! {
            _ = tokio::time::sleep(DELAY) => {}
            _ = q.ready.notified() => {}
        }
    }
}

/// Exports the receipts' log records until the queue closes.
pub(super) async fn export_records(
    exporter: opentelemetry_otlp::LogExporter,
    mut rx: Drain<(SdkLogRecord, InstrumentationScope)>,
    failed: metrics::Counter,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    let mut warned = Warned::default();
    while next_batch(&mut rx, &mut batch).await {
        let n = batch.len();
        let refs: Vec<(&SdkLogRecord, &InstrumentationScope)> =
            batch.iter().map(|(r, s)| (r, s)).collect();
        let result = exporter.export(LogBatch::new(&refs)).await;
        drop(refs);
        batch.clear();
        if let Err(e) = result {
            failed.increment(n as u64);
            warned.warn("receipt log records", n, &e.to_string());
        }
    }
}

/// A failed export is logged at most once a minute per queue: a collector that is down
/// would otherwise write a line per batch.
#[derive(Default)]
pub(super) struct Warned(Option<tokio::time::Instant>);

impl Warned {
    pub(super) fn warn(&mut self, what: &str, n: usize, error: &str) {
        let now = tokio::time::Instant::now();
        if self.0.is_some_and(|at| now < at + Duration::from_secs(60)) {
            return;
        }
        self.0 = Some(now);
        tracing::warn!(
            error,
            dropped = n,
            "OTLP export of {what} failed (logged once a minute)"
        );
    }
}
