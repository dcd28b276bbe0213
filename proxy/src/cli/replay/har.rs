//! HAR 1.2 (http://www.softwareishard.com/blog/har-12-spec/) as browsers, mitmproxy, Charles and
//! Fiddler export it: only what a replay needs from each entry.
//!
//! Bodies: `postData.text`, base64 when `postData.encoding` is `"base64"` (a common extension;
//! HAR 1.2 itself only defines `encoding` on response content). Entries that cannot be replayed
//! as one HTTP exchange (CONNECT, WebSocket upgrades) are counted, never silently dropped.

use bytes::Bytes;
use serde::Deserialize;

/// A HAR file's size limit: a recording is read whole.
pub const MAX_HAR: u64 = 256 << 20;

#[derive(Deserialize)]
struct Har {
    log: Log,
}

#[derive(Deserialize)]
struct Log {
    entries: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    started_date_time: String,
    request: HarRequest,
    #[serde(rename = "_resourceType")]
    resource_type: Option<String>,
    #[serde(rename = "_webSocketMessages")]
    web_socket_messages: Option<serde_json::Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HarRequest {
    method: String,
    url: String,
    #[serde(default)]
    headers: Vec<NameValue>,
    post_data: Option<PostData>,
}

#[derive(Deserialize)]
struct NameValue {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PostData {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    encoding: Option<String>,
}

/// One request to replay.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// Milliseconds after the first entry of the recording.
    pub offset_ms: u64,
    pub method: http::Method,
    /// Path and query, to be sent to the target's origin.
    pub path_and_query: String,
    /// End-to-end headers as recorded (hop-by-hop, `Host` and `Content-Length` left out).
    pub headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub body: Bytes,
}

/// A parsed recording.
#[derive(Debug, Default)]
pub struct Recording {
    pub entries: Vec<Recorded>,
    /// CONNECT tunnels and WebSocket sessions: not replayable as one exchange.
    pub skipped_unreplayable: usize,
    /// Entries whose URL, method, header or body could not be used.
    pub skipped_malformed: usize,
}

const DROPPED_HEADERS: &[&str] = &[
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
];

fn started_ms(s: &str) -> Option<i128> {
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()?;
    Some(t.unix_timestamp_nanos() / 1_000_000)
}

/// Parses a HAR document.
pub fn parse(bytes: &[u8]) -> Result<Recording, String> {
    let har: Har = serde_json::from_slice(bytes).map_err(|e| format!("not a HAR 1.2 file: {e}"))?;
    let mut rec = Recording::default();
    let mut first: Option<i128> = None;
    let mut planned = Vec::new();
    for e in har.log.entries {
        let upgrade = e.request.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case("upgrade") && h.value.eq_ignore_ascii_case("websocket")
        });
        if e.request.method.eq_ignore_ascii_case("CONNECT")
            || upgrade
            || e.web_socket_messages.is_some()
            || e.resource_type.as_deref() == Some("websocket")
        {
            rec.skipped_unreplayable += 1;
            continue;
        }
        let Some(entry) = convert(&e) else {
            rec.skipped_malformed += 1;
            continue;
        };
        let Some(at) = started_ms(&e.started_date_time) else {
            rec.skipped_malformed += 1;
            continue;
        };
        first = Some(first.map_or(at, |f| f.min(at)));
        planned.push((at, entry));
    }
    let first = first.unwrap_or(0);
    planned.sort_by_key(|(at, _)| *at);
    rec.entries = planned
        .into_iter()
        .map(|(at, mut r)| {
            r.offset_ms = u64::try_from(at - first).unwrap_or(0);
            r
        })
        .collect();
    Ok(rec)
}

fn convert(e: &Entry) -> Option<Recorded> {
    let method: http::Method = e.request.method.parse().ok()?;
    let uri: http::Uri = e.request.url.parse().ok()?;
    let path_and_query = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut headers = Vec::new();
    for h in &e.request.headers {
        // HTTP/2 recordings list pseudo-headers (`:authority`); they are not headers to send.
        if h.name.starts_with(':')
            || DROPPED_HEADERS
                .iter()
                .any(|d| h.name.eq_ignore_ascii_case(d))
        {
            continue;
        }
        headers.push((
            http::HeaderName::from_bytes(h.name.as_bytes()).ok()?,
            http::HeaderValue::from_str(&h.value).ok()?,
        ));
    }
    let body = match &e.request.post_data {
        None => Bytes::new(),
        Some(p) => match (&p.text, p.encoding.as_deref()) {
            (None, _) => Bytes::new(),
            (Some(t), Some("base64")) => {
                use base64::Engine as _;
                Bytes::from(base64::engine::general_purpose::STANDARD.decode(t).ok()?)
            }
            (Some(t), _) => Bytes::from(t.clone()),
        },
    };
    Some(Recorded {
        offset_ms: 0,
        method,
        path_and_query,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_recorded_mcp_traffic_parses() {
        let bytes = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testdata/mcp/mcp_2025-11-25_legacy_sse.har"
        ))
        .expect("the recording is in the repo");
        let rec = parse(&bytes).expect("parses");
        assert_eq!(rec.entries.len(), 6);
        assert_eq!(rec.entries[0].method, http::Method::POST);
        assert_eq!(rec.entries[0].path_and_query, "/mcp");
        assert!(rec.entries[0].body.starts_with(b"{\"jsonrpc\""));
        // Sorted by start time: the GET stream opened before the last two POSTs.
        assert_eq!(rec.entries[2].method, http::Method::GET);
        assert_eq!(rec.entries[5].method, http::Method::DELETE);
        assert!(rec
            .entries
            .windows(2)
            .all(|w| w[0].offset_ms <= w[1].offset_ms));
        assert!(rec.entries[0].headers.iter().all(|(n, _)| n != "host"));
    }

    #[test]
    fn unreplayable_and_malformed_entries_are_counted() {
        let har = serde_json::json!({"log": {"version": "1.2", "entries": [
            {"startedDateTime": "2026-01-01T00:00:00.000Z",
             "request": {"method": "CONNECT", "url": "https://a:443", "headers": []}},
            {"startedDateTime": "2026-01-01T00:00:00.100Z",
             "request": {"method": "GET", "url": "http://a/ws", "headers": [{"name": "Upgrade", "value": "websocket"}]}},
            {"startedDateTime": "2026-01-01T00:00:00.200Z",
             "request": {"method": "GET", "url": "not a url at all", "headers": []}},
            {"startedDateTime": "2026-01-01T00:00:01.500Z",
             "request": {"method": "POST", "url": "http://a/b?c=1", "headers": [],
                         "postData": {"mimeType": "application/octet-stream", "text": "AAEC", "encoding": "base64"}}},
            {"startedDateTime": "2026-01-01T00:00:00.500Z",
             "request": {"method": "GET", "url": "http://a/first", "headers": []}}
        ]}});
        let rec = parse(har.to_string().as_bytes()).unwrap();
        assert_eq!(rec.skipped_unreplayable, 2);
        assert_eq!(rec.skipped_malformed, 1);
        assert_eq!(rec.entries.len(), 2);
        assert_eq!(rec.entries[0].path_and_query, "/first");
        assert_eq!(rec.entries[1].offset_ms, 1000);
        assert_eq!(rec.entries[1].body.as_ref(), &[0u8, 1, 2]);
        assert!(parse(b"{}").is_err());
    }
}
