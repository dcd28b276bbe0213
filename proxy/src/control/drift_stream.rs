//! `GET /admin/v1/drift-events/stream` (SPEC §9): drift events as they arrive, as
//! Server-Sent Events — one `id: <cursor>` / `data: <event JSON>` message per event, the same
//! cursor `GET /admin/v1/drift-events?after=` pages by. A client resumes with `?after=N` or the
//! `Last-Event-ID` header its EventSource sends; `?backlog=N` (at most 100) starts with the last
//! N events kept. A comment line every [`KEEP_ALIVE`] keeps idle proxies from closing it.
//!
//! Bounded: at most [`MAX_STREAMS`] streams at once (503 beyond), each reading the in-memory
//! list of recent events, so a stream costs one task and no queue of its own; a slow reader
//! that falls more than 10,000 events behind skips the ones no longer kept.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use tokio::sync::Semaphore;

use crate::context::Plane;
use crate::net::body::{self, BoxError, ProxyBody};

/// Streams open at once.
pub const MAX_STREAMS: usize = 16;
/// Events written per wake-up at most.
const BATCH: usize = 100;
/// A comment line this often while nothing happens.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

static STREAMS: Semaphore = Semaphore::const_new(MAX_STREAMS);

/// Where a stream starts: the cursor after which it sends.
fn start(query: Option<&str>, headers: &HeaderMap, newest: u64) -> u64 {
    let mut after = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    let mut backlog = 0u64;
    for pair in query.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("after", v)) => after = v.parse().ok().or(after),
            Some(("backlog", v)) => backlog = v.parse().unwrap_or(0).min(BATCH as u64),
            _ => {}
        }
    }
    after.unwrap_or_else(|| newest.saturating_sub(backlog))
}

/// The SSE text of a batch of events; the cursor of its last one.
fn frame(events: &[(u64, serde_json::Value)]) -> (Bytes, u64) {
    let mut out = String::new();
    let mut last = 0;
    for (seq, event) in events {
        // JSON text has no raw newline, so one `data:` line carries it whole.
        let line = serde_json::to_string(event).unwrap_or_else(|_| "{}".into());
        out.push_str(&format!("id: {seq}\ndata: {line}\n\n"));
        last = *seq;
    }
    (Bytes::from(out), last)
}

pub fn stream(plane: &Plane, query: Option<&str>, headers: &HeaderMap) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return body::json_response(
            StatusCode::NOT_FOUND,
            &serde_json::json!({"error": "no enforcement configured: there are no drift events"}),
        );
    };
    let Ok(permit) = STREAMS.try_acquire() else {
        let mut r = body::json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &serde_json::json!({"error": "too many drift event streams are open"}),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        return r;
    };
    // Given back by `Release` when the body is dropped, however the stream ends.
    permit.forget();
    let sink = enf.drift.clone();
    let mut rx = sink.subscribe();
    let after = start(query, headers, *rx.borrow_and_update());
    let events =
        futures_util::stream::unfold((after, rx, Release), move |(mut after, mut rx, release)| {
            let sink = sink.clone();
            async move {
                loop {
                    rx.borrow_and_update();
                    let batch = sink.since(after, BATCH);
                    if !batch.is_empty() {
                        let (bytes, last) = frame(&batch);
                        after = last;
                        return Some((Ok::<_, BoxError>(bytes), (after, rx, release)));
                    }
                    match tokio::time::timeout(KEEP_ALIVE, rx.changed()).await {
                        Ok(Ok(())) => continue,
                        Ok(Err(_)) => return None,
                        Err(_) => {
                            let ping = Bytes::from_static(b": keep-alive\n\n");
                            return Some((Ok(ping), (after, rx, release)));
                        }
                    }
                }
            }
        });
    // A comment first, so that the head goes out at once (hyper holds it until the body has
    // bytes): a client knows the stream is open, and that events from here on reach it,
    // without waiting for the first event or keep-alive.
    let open = futures_util::stream::once(std::future::ready(Ok::<_, BoxError>(
        Bytes::from_static(b": open\n\n"),
    )));
    let mut r = Response::new(body::from_stream(futures_util::StreamExt::chain(
        open, events,
    )));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // nginx and other buffering proxies pass each event on at once.
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    r
}

/// Gives the stream's place back when the stream is dropped (the client went away).
struct Release;

impl Drop for Release {
    fn drop(&mut self) {
        STREAMS.add_permits(1);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_stream_starts_where_its_client_says() {
        let none = HeaderMap::new();
        assert_eq!(start(None, &none, 40), 40, "from now by default");
        assert_eq!(start(Some("backlog=5"), &none, 40), 35);
        assert_eq!(start(Some("backlog=500"), &none, 400), 300, "at most 100");
        assert_eq!(start(Some("backlog=50"), &none, 7), 0);
        assert_eq!(start(Some("after=12"), &none, 40), 12);
        let mut resumed = HeaderMap::new();
        resumed.insert("last-event-id", HeaderValue::from_static("21"));
        assert_eq!(start(None, &resumed, 40), 21);
        assert_eq!(start(Some("after=30"), &resumed, 40), 30, "the query wins");
    }

    #[test]
    fn each_event_is_one_message_with_its_cursor() {
        let (bytes, last) = frame(&[
            (3, serde_json::json!({"code": "A"})),
            (4, serde_json::json!({"detail": "two\nlines"})),
        ]);
        assert_eq!(last, 4);
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            "id: 3\ndata: {\"code\":\"A\"}\n\nid: 4\ndata: {\"detail\":\"two\\nlines\"}\n\n"
        );
    }
}
