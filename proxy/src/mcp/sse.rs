//! Server-sent events, one at a time (WHATWG HTML §9.2 framing).
//!
//! An MCP reply may be an SSE stream; it is never buffered whole (SPEC §3). [`map_json`]
//! passes the stream on event by event, and hands each event whose `data` is one JSON value to
//! a function that may replace it (a filtered `tools/list` result). Every other byte passes
//! unchanged, as soon as its event is complete. One event is bounded by `max_event` bytes; a
//! longer one ends the stream with an error rather than growing without bound.

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt as _;
use http_body_util::BodyExt as _;
use serde_json::Value;

use crate::net::body::{self, BoxError, ProxyBody};

/// What the caller does with one event's JSON data.
pub enum Verdict {
    /// Pass the event on unchanged.
    Keep,
    /// Send this JSON instead of the event's data (other fields kept).
    Replace(Value),
}

/// The offset just past the first event terminator (a blank line) in `buf`, if any.
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        if buf[i] == b'\n' {
            if buf.get(i + 1) == Some(&b'\n') {
                return Some(i + 2);
            }
            if buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n') {
                return Some(i + 3);
            }
        }
        i += 1;
    }
    None
}

/// The JSON value of one complete event's `data` lines, if it has one.
pub fn json_data(event: &[u8]) -> Option<Value> {
    let text = std::str::from_utf8(event).ok()?;
    let mut data = String::new();
    for line in text.lines() {
        if let Some(d) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(d.strip_prefix(' ').unwrap_or(d));
        }
    }
    if data.is_empty() {
        return None;
    }
    serde_json::from_str(&data).ok()
}

/// `event` with its data replaced by `value` (its other fields, such as `id`, kept).
pub fn with_data(event: &[u8], value: &Value) -> Bytes {
    let text = String::from_utf8_lossy(event);
    let mut out = String::new();
    for l in text.lines() {
        if !l.is_empty() && !l.starts_with("data:") {
            out.push_str(l);
            out.push('\n');
        }
    }
    out.push_str("data: ");
    out.push_str(&serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned()));
    out.push_str("\n\n");
    Bytes::from(out)
}

/// The JSON data of every event in a whole SSE body (a reply already read to its end).
pub fn json_events(mut body: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    while !body.is_empty() {
        let end = event_end(body).unwrap_or(body.len());
        out.extend(json_data(&body[..end]));
        body = &body[end..];
    }
    out
}

/// An SSE body read one complete event at a time.
pub struct Events {
    input: http_body_util::BodyDataStream<ProxyBody>,
    buf: BytesMut,
    max_event: usize,
    done: bool,
}

impl Events {
    pub fn new(body: ProxyBody, max_event: usize) -> Self {
        Self {
            input: body.into_data_stream(),
            buf: BytesMut::new(),
            max_event,
            done: false,
        }
    }

    /// The next complete event (terminator included); at the end of the stream, whatever is
    /// left (an unterminated event) as it is; then `None`. An event longer than `max_event`
    /// is an error, and ends the stream.
    pub async fn next(&mut self) -> Option<Result<Bytes, BoxError>> {
        if self.done {
            return None;
        }
        loop {
            if let Some(end) = event_end(&self.buf) {
                return Some(Ok(self.buf.split_to(end).freeze()));
            }
            if self.buf.len() > self.max_event {
                self.done = true;
                return Some(Err("an SSE event exceeds limits.max_response".into()));
            }
            match self.input.next().await {
                Some(Ok(chunk)) => self.buf.extend_from_slice(&chunk),
                Some(Err(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                None => {
                    self.done = true;
                    if self.buf.is_empty() {
                        return None;
                    }
                    return Some(Ok(self.buf.split().freeze()));
                }
            }
        }
    }
}

/// `body` passed on event by event, each JSON event offered to `f`.
pub fn map_json<F>(body: ProxyBody, max_event: usize, f: F) -> ProxyBody
where
    F: FnMut(&Value) -> Verdict + Send + 'static,
{
    let stream = futures_util::stream::unfold(
        (Events::new(body, max_event), f),
        |(mut events, mut f)| async move {
            let out = match events.next().await? {
                Ok(event) => match json_data(&event).map(|v| f(&v)) {
                    Some(Verdict::Replace(new)) => Ok(with_data(&event, &new)),
                    _ => Ok(event),
                },
                Err(e) => Err(e),
            };
            Some((out, (events, f)))
        },
    );
    body::from_stream(stream)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn run(
        chunks: Vec<&'static str>,
        f: impl FnMut(&Value) -> Verdict + Send + 'static,
    ) -> String {
        let s = futures_util::stream::iter(
            chunks
                .into_iter()
                .map(|c| Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Bytes::from(c))),
        );
        let out = map_json(body::from_stream(s), 1 << 20, f);
        let bytes = body::collect_proxy(out, u64::MAX).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[tokio::test]
    async fn events_split_across_chunks_are_rewritten_whole() {
        let out = run(
            vec![
                "event: message\nda",
                "ta: {\"id\":1,\"x\":1}\n",
                "\nevent: message\ndata: {\"id\":2}\n\n",
            ],
            |v| {
                if v["id"] == 1 {
                    Verdict::Replace(json!({"id": 1, "x": 2}))
                } else {
                    Verdict::Keep
                }
            },
        )
        .await;
        assert_eq!(
            out,
            "event: message\ndata: {\"id\":1,\"x\":2}\n\nevent: message\ndata: {\"id\":2}\n\n"
        );
    }

    #[tokio::test]
    async fn non_json_and_comments_pass_unchanged() {
        let input = ": keep-alive\n\nretry: 100\ndata: not json\n\ndata: {\"a\":1}\r\n\r\n";
        let out = run(vec![input], |_| Verdict::Replace(json!({"b": 2}))).await;
        assert_eq!(
            out,
            ": keep-alive\n\nretry: 100\ndata: not json\n\ndata: {\"b\":2}\n\n"
        );
    }

    #[test]
    fn a_whole_body_gives_each_event_s_json() {
        let body = b"event: message\ndata: {\"a\":\ndata: 1}\n\n: ping\n\ndata: {\"b\":2}";
        assert_eq!(json_events(body), vec![json!({"a": 1}), json!({"b": 2})]);
    }

    #[tokio::test]
    async fn an_endless_event_is_cut_off() {
        let big: &'static str = Box::leak("data: ".to_owned().repeat(1000).into_boxed_str());
        let s = futures_util::stream::iter(
            vec![big]
                .into_iter()
                .map(|c| Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Bytes::from(c))),
        );
        let out = map_json(body::from_stream(s), 100, |_| Verdict::Keep);
        assert!(body::collect_proxy(out, u64::MAX).await.is_err());
    }
}
