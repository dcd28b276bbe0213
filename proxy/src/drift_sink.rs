//! Where drift events go (SPEC §8): a bounded queue drained by a background task, so emitting
//! an event never blocks a request. A full queue drops the event and counts it
//! (`palisade_drift_events_dropped_total`). The last events are also kept in memory for the
//! admin API.
//!
//! Sinks: `stdout` (one JSON line per event). File and webhook sinks come with the RICH issue.

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use palisade_policy::drift::DriftEvent;
use tokio::sync::mpsc;

/// Events kept for the admin API.
pub const RECENT: usize = 10_000;
const QUEUE: usize = 4_096;

#[derive(Default)]
struct Recent {
    next_seq: u64,
    events: VecDeque<(u64, serde_json::Value)>,
}

/// One page of `GET /admin/v1/drift-events`.
pub struct Page {
    pub events: Vec<serde_json::Value>,
    /// The cursor to pass as `after` for the next page (the last event's sequence number).
    pub next: u64,
}

#[derive(Clone)]
pub struct DriftSink {
    /// To the writer task; it ends when every sink clone is dropped.
    tx: mpsc::Sender<serde_json::Value>,
    /// (sequence number, event): the sequence is the admin API's paging cursor.
    recent: Arc<Mutex<Recent>>,
    dropped: metrics::Counter,
}

impl DriftSink {
    /// Starts the writer task on the current runtime.
    pub fn start() -> Self {
        let (tx, mut rx) = mpsc::channel::<serde_json::Value>(QUEUE);
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&line);
                let _ = out.flush();
            }
        });
        metrics::describe_counter!(
            "palisade_drift_events_dropped_total",
            "Drift events dropped because the sink queue was full."
        );
        Self {
            tx,
            recent: Arc::default(),
            dropped: metrics::counter!("palisade_drift_events_dropped_total"),
        }
    }

    /// Queues an event without waiting.
    pub fn emit(&self, event: &DriftEvent) {
        metrics::counter!(
            "palisade_drift_events_total",
            "category" => event.category,
            "action" => match event.action_taken {
                palisade_policy::drift::Action::Blocked => "blocked",
                palisade_policy::drift::Action::Notify => "notify",
                palisade_policy::drift::Action::Quarantined => "quarantined",
                palisade_policy::drift::Action::Fallback => "fallback",
            }
        )
        .increment(1);
        let Ok(value) = serde_json::to_value(event) else {
            return;
        };
        if let Ok(mut recent) = self.recent.lock() {
            if recent.events.len() == RECENT {
                recent.events.pop_front();
            }
            recent.next_seq += 1;
            let seq = recent.next_seq;
            recent.events.push_back((seq, value.clone()));
        }
        if self.tx.try_send(value).is_err() {
            self.dropped.increment(1);
        }
    }

    /// Up to `limit` kept events after cursor `after` (0: from the oldest kept), oldest first.
    pub fn page(&self, after: u64, limit: usize) -> Page {
        let Ok(recent) = self.recent.lock() else {
            return Page {
                events: Vec::new(),
                next: after,
            };
        };
        let mut next = after;
        let events = recent
            .events
            .iter()
            .filter(|(seq, _)| *seq > after)
            .take(limit)
            .map(|(seq, e)| {
                next = *seq;
                e.clone()
            })
            .collect();
        Page { events, next }
    }
}
