//! Where drift events go (SPEC §8): a bounded queue drained by a background task, so emitting
//! an event never blocks a request. A full queue drops the event and counts it
//! (`palisade_drift_events_dropped_total`). The last events are also kept in memory for the
//! admin API.
//!
//! Sinks: `stdout` (one JSON line per event), `{ file = "…" }` (JSON lines appended to a
//! file created 0600, rotated to `<file>.1` when it passes [`ROTATE_BYTES`]) and
//! `{ webhook = "…" }` (batched POSTs with retries: [`super::webhook`]).

use std::collections::VecDeque;
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use palisade_policy::drift::DriftEvent;
use tokio::sync::mpsc;

/// Events kept for the admin API.
pub const RECENT: usize = 10_000;
const QUEUE: usize = 4_096;
/// A drift file is rotated (to `<file>.1`, replacing the previous one) past this size.
pub const ROTATE_BYTES: u64 = 64 << 20;

/// An open drift file and how much it holds.
struct FileSink {
    path: std::path::PathBuf,
    file: Option<std::fs::File>,
    len: u64,
    /// Rotation threshold ([`ROTATE_BYTES`]).
    limit: u64,
}

impl FileSink {
    fn open(path: &std::path::Path) -> std::io::Result<(std::fs::File, u64)> {
        let mut opts = std::fs::OpenOptions::new();
        opts.append(true).create(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            opts.mode(0o600);
        }
        let f = opts.open(path)?;
        let len = f.metadata()?.len();
        Ok((f, len))
    }

    fn write(&mut self, line: &[u8]) {
        if self.len + line.len() as u64 > self.limit {
            let mut rotated = self.path.as_os_str().to_owned();
            rotated.push(".1");
            self.file = None;
            if let Err(e) = std::fs::rename(&self.path, &rotated) {
                tracing::warn!(error = %e, path = %self.path.display(), "drift file rotation failed");
            }
            self.len = 0;
        }
        if self.file.is_none() {
            match Self::open(&self.path) {
                Ok((f, len)) => {
                    self.file = Some(f);
                    self.len = len;
                }
                Err(e) => {
                    tracing::warn!(error = %e, path = %self.path.display(), "drift file cannot be opened");
                    return;
                }
            }
        }
        if let Some(f) = &mut self.file {
            match f.write_all(line) {
                Ok(()) => self.len += line.len() as u64,
                Err(e) => {
                    tracing::warn!(error = %e, path = %self.path.display(), "drift file write failed");
                    self.file = None;
                }
            }
        }
    }
}

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
    /// The newest event's sequence number, for the admin API's live stream.
    newest: Arc<tokio::sync::watch::Sender<u64>>,
}

impl DriftSink {
    /// Starts the writer task on the current runtime, writing to `sinks`.
    pub fn start(sinks: &[crate::config::Sink]) -> Self {
        use crate::config::Sink;
        let (tx, mut rx) = mpsc::channel::<serde_json::Value>(QUEUE);
        let stdout = sinks.contains(&Sink::Stdout);
        let mut files: Vec<FileSink> = sinks
            .iter()
            .filter_map(|s| match s {
                Sink::File(p) => Some(FileSink {
                    path: p.clone(),
                    file: None,
                    len: 0,
                    limit: ROTATE_BYTES,
                }),
                _ => None,
            })
            .collect();
        metrics::describe_counter!(
            "palisade_drift_events_dropped_total",
            "Drift events dropped because a sink queue was full or a webhook batch could not be delivered."
        );
        let dropped = metrics::counter!("palisade_drift_events_dropped_total");
        let webhooks: Vec<super::webhook::Webhook> = sinks
            .iter()
            .filter_map(|s| match s {
                Sink::Webhook(url) => match super::webhook::Webhook::start(url, dropped.clone()) {
                    Ok(w) => Some(w),
                    Err(e) => {
                        tracing::error!(error = %e, "drift webhook sink not started");
                        None
                    }
                },
                _ => None,
            })
            .collect();
        // File writes block briefly; they run on the blocking pool, in order.
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                for w in &webhooks {
                    w.offer(event.clone());
                }
                let mut line = serde_json::to_vec(&event).unwrap_or_default();
                line.push(b'\n');
                if stdout {
                    let mut out = std::io::stdout().lock();
                    let _ = out.write_all(&line);
                    let _ = out.flush();
                }
                if !files.is_empty() {
                    let moved = std::mem::take(&mut files);
                    files = tokio::task::spawn_blocking(move || {
                        let mut moved = moved;
                        for f in &mut moved {
                            f.write(&line);
                        }
                        moved
                    })
                    .await
                    .unwrap_or_default();
                }
            }
        });
        Self {
            tx,
            recent: Arc::default(),
            dropped,
            newest: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Queues a lifecycle event (RCNS's `rcns_*`, seed 000 §1.1) to the same sinks and the
    /// same recent list: `{"event": "rcns_…", …}`, never a payload.
    pub fn lifecycle(&self, value: serde_json::Value) {
        let name = value["event"].as_str().unwrap_or("unknown").to_owned();
        metrics::counter!("palisade_rcns_events_total", "event" => name).increment(1);
        self.push(value);
    }

    fn push(&self, value: serde_json::Value) {
        if let Ok(mut recent) = self.recent.lock() {
            if recent.events.len() == RECENT {
                recent.events.pop_front();
            }
            recent.next_seq += 1;
            let seq = recent.next_seq;
            recent.events.push_back((seq, value.clone()));
            self.newest.send_replace(seq);
        }
        if self.tx.try_send(value).is_err() {
            self.dropped.increment(1);
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
        self.push(value);
    }

    /// Wakes on every new event (its value: the newest sequence number).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.newest.subscribe()
    }

    /// As [`DriftSink::page`], each event with its sequence number.
    pub fn since(&self, after: u64, limit: usize) -> Vec<(u64, serde_json::Value)> {
        let Ok(recent) = self.recent.lock() else {
            return Vec::new();
        };
        recent
            .events
            .iter()
            .filter(|(seq, _)| *seq > after)
            .take(limit)
            .cloned()
            .collect()
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_full_file_rotates_to_dot_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.jsonl");
        let mut f = FileSink {
            path: path.clone(),
            file: None,
            len: 0,
            limit: 10,
        };
        f.write(b"aaaaaa\n");
        f.write(b"bbbbbb\n");
        f.write(b"cccccc\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"cccccc\n");
        assert_eq!(
            std::fs::read(dir.path().join("d.jsonl.1")).unwrap(),
            b"bbbbbb\n"
        );
    }
}
