//! The access-log line, written straight to stdout in the shape `tracing`'s JSON formatter
//! gives it (same keys, same order, same timestamp), without going through the formatter.
//!
//! Why: it is the one log line written per request. Profiled unpinned at 32 connections
//! (issue 41, docs/performance.md), `tracing_subscriber`'s JSON path — a visitor per field, a
//! `serde_json::Map` per event, `Display` through `fmt::Write` — took 7.7 % of the proxy's CPU
//! besides the write itself. Here the line is built into a reused per-thread buffer and
//! written with one `write` (stdout is line-buffered: a buffer ending in `\n` goes out at once,
//! as the formatter's does). The `RUST_LOG` filter still decides (`tracing::enabled!` on the
//! `palisade::access` target). On a terminal, where logs are human-readable, and wherever
//! [`init_logging`](super::init_logging) did not choose JSON (a test embedding the proxy with
//! its own subscriber), the line goes through `tracing` as before.

use std::cell::RefCell;
use std::io::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set by `init_logging` when it installs the JSON formatter on stdout.
static JSON_STDOUT: AtomicBool = AtomicBool::new(false);

pub(super) fn use_json_stdout() {
    JSON_STDOUT.store(true, Ordering::Relaxed);
}

/// One exchange's access line.
pub struct AccessFields<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub status: u16,
    pub duration_ms: f64,
    pub bytes: u64,
    pub trace_id: &'a str,
    pub outcome: &'static str,
}

pub fn write(f: &AccessFields<'_>) {
    if !tracing::enabled!(target: "palisade::access", tracing::Level::INFO) {
        return;
    }
    if !JSON_STDOUT.load(Ordering::Relaxed) {
        tracing::info!(
            target: "palisade::access",
            method = f.method,
            path = f.path,
            status = f.status,
            duration_ms = f.duration_ms,
            bytes = f.bytes,
            trace_id = f.trace_id,
            outcome = f.outcome,
        );
        return;
    }
    thread_local! {
        static LINE: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(256));
    }
    LINE.with(|line| {
        let Ok(mut line) = line.try_borrow_mut() else {
            return;
        };
        line.clear();
        format_line(&mut line, std::time::SystemTime::now(), f);
        // As the formatter does: a failed log write is dropped, never the request.
        let _ = std::io::stdout().lock().write_all(&line);
    });
}

/// `{"timestamp":…,"level":"INFO",<fields>,"target":"palisade::access"}\n`, as
/// `tracing_subscriber`'s JSON formatter with `flatten_event(true)` writes it.
fn format_line(out: &mut Vec<u8>, now: std::time::SystemTime, f: &AccessFields<'_>) {
    out.extend_from_slice(b"{\"timestamp\":\"");
    let _ = write!(out, "{}", humantime::format_rfc3339_micros(now));
    out.extend_from_slice(b"\",\"level\":\"INFO\",\"method\":");
    json_str(out, f.method);
    out.extend_from_slice(b",\"path\":");
    json_str(out, f.path);
    let _ = write!(out, ",\"status\":{},\"duration_ms\":", f.status);
    // serde_json's form of an f64 (shortest round-trip; `null` when not finite), as the
    // formatter writes it.
    let _ = serde_json::to_writer(&mut *out, &f.duration_ms);
    let _ = write!(out, ",\"bytes\":{},\"trace_id\":", f.bytes);
    json_str(out, f.trace_id);
    out.extend_from_slice(b",\"outcome\":");
    json_str(out, f.outcome);
    out.extend_from_slice(b",\"target\":\"palisade::access\"}\n");
}

fn json_str(out: &mut Vec<u8>, s: &str) {
    // serde_json's escaping: a path is the client's and may hold quotes, controls or
    // non-ASCII.
    let _ = serde_json::to_writer(&mut *out, s);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_line_is_the_json_formatters_shape_with_the_path_escaped() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_796_557_577_624_702);
        let mut out = Vec::new();
        format_line(
            &mut out,
            at,
            &AccessFields {
                method: "GET",
                path: "/a\"b\\c\u{1}é",
                status: 404,
                duration_ms: 1.31883,
                bytes: 24,
                trace_id: "c075ee6e15ee9f67777e1490fb020a55",
                outcome: "forwarded",
            },
        );
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "{\"timestamp\":\"2026-12-06T11:46:17.624702Z\",\"level\":\"INFO\",\"method\":\"GET\",\
             \"path\":\"/a\\\"b\\\\c\\u0001é\",\"status\":404,\"duration_ms\":1.31883,\"bytes\":24,\
             \"trace_id\":\"c075ee6e15ee9f67777e1490fb020a55\",\"outcome\":\"forwarded\",\
             \"target\":\"palisade::access\"}\n"
        );
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["path"], "/a\"b\\c\u{1}é");
    }

    /// The hand-written line against what `tracing_subscriber`'s JSON formatter, configured as
    /// `init_logging` configures it, writes for the same event: byte for byte after the
    /// timestamp, and the timestamp in the same form within the same instants.
    #[test]
    fn the_line_is_byte_for_byte_what_the_json_formatter_writes() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Captured(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Captured {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let captured = Captured::default();
        let writer = captured.clone();
        let subscriber =
            super::super::json_subscriber(tracing_subscriber::EnvFilter::new("info"), move || {
                writer.clone()
            });
        let f = AccessFields {
            method: "DELETE",
            path: "/items/a\"b\\c\u{1}\u{7f}é\u{2028}/%2e%2e?q=1&x=<y>",
            status: 503,
            duration_ms: 0.1 + 0.2,
            bytes: 18_446_744_073_709_551_615,
            trace_id: "4bf92f3577b34da6a3ce929d0e0e4736",
            outcome: "upstream_error",
        };
        let before = std::time::SystemTime::now();
        // Not yet switched to the direct path, `write` goes through `tracing`.
        assert!(!JSON_STDOUT.load(Ordering::Relaxed));
        tracing::subscriber::with_default(subscriber, || write(&f));
        let after = std::time::SystemTime::now();
        let theirs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
        let mut ours = Vec::new();
        format_line(&mut ours, before, &f);
        let ours = String::from_utf8(ours).unwrap();

        let split = |line: &str| {
            let rest = line.strip_prefix("{\"timestamp\":\"").unwrap();
            let (at, tail) = rest.split_once('"').unwrap();
            (at.to_owned(), tail.to_owned())
        };
        let (their_at, their_tail) = split(&theirs);
        let (our_at, our_tail) = split(&ours);
        assert_eq!(our_tail, their_tail, "ours: {ours}theirs: {theirs}");
        assert_eq!(their_at.len(), our_at.len(), "{their_at} vs {our_at}");
        let at = humantime::parse_rfc3339(&their_at).unwrap();
        assert!(at >= before - std::time::Duration::from_micros(1) && at <= after);
    }

    #[test]
    fn a_duration_that_is_not_finite_is_null() {
        let mut out = Vec::new();
        let f = AccessFields {
            method: "PUT",
            path: "/",
            status: 200,
            duration_ms: f64::NAN,
            bytes: 0,
            trace_id: "t",
            outcome: "forwarded",
        };
        format_line(&mut out, std::time::UNIX_EPOCH, &f);
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["duration_ms"].is_null());
        assert_eq!(v["timestamp"], "1970-01-01T00:00:00.000000Z");
    }
}
