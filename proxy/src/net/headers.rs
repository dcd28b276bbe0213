//! Header handling on the way through (SPEC §3).
//!
//! - Hop-by-hop fields (RFC 9110 §7.6.1) are connection-scoped: they and every field the
//!   `Connection` header names are removed in both directions. `TE: trailers` is the one value
//!   that may be forwarded (gRPC and others rely on it).
//! - `X-Forwarded-For` and `Forwarded` (RFC 7239) get the downstream peer appended.
//! - `traceparent` (W3C Trace Context) is kept when valid, otherwise a new one is created, so
//!   every request has a trace id for logs, receipts and drift events.
//! - PTCL request headers never go upstream (SPEC §3): they are for the sidecar.

use std::net::SocketAddr;

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use rand::RngCore as _;

/// Fields that are always hop-by-hop (RFC 9110 §7.6.1, plus the legacy ones proxies still see).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
];

/// Request headers meant for the sidecar alone.
pub const PTCL_REQUEST_HEADERS: [&str; 2] =
    ["agent-compensation-lease", "agent-compensation-inverse"];

/// PTCL headers only the sidecar may set: removed from every client request on arrival and
/// from every upstream answer, so neither side can forge a fence token or a receipt in the
/// other's name (SPEC §3: the fence token upstream is the sidecar's).
pub const SIDECAR_OWNED: [&str; 3] = ["agent-fence-token", "agent-commit-receipt", "agent-dry-run"];

/// Removes hop-by-hop fields, those named by `Connection`, and `Transfer-Encoding` (hyper
/// frames the body itself on each hop).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let te_trailers = headers.get_all(header::TE).iter().any(|v| {
        v.to_str().is_ok_and(|s| {
            s.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("trailers"))
        })
    });
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|s| s.split(','))
        .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    headers.remove(header::TRANSFER_ENCODING);
    if te_trailers {
        headers.insert(header::TE, HeaderValue::from_static("trailers"));
    }
}

/// Appends the downstream peer to `X-Forwarded-For` and `Forwarded`.
pub fn append_forwarded(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    proto: &str,
    host: Option<&str>,
) {
    let ip = peer.ip().to_string();
    let xff = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => [prev, ", ", &ip].concat(),
        _ => ip.clone(),
    };
    if let Ok(v) = HeaderValue::from_str(&xff) {
        headers.insert("x-forwarded-for", v);
    }
    // RFC 7239 §6: IPv6 addresses are bracketed and quoted.
    let mut element = String::with_capacity(64);
    element.push_str("for=");
    match peer.ip() {
        std::net::IpAddr::V4(_) => element.push_str(&ip),
        std::net::IpAddr::V6(_) => {
            element.push_str("\"[");
            element.push_str(&ip);
            element.push_str("]\"");
        }
    }
    element.push_str(";proto=");
    element.push_str(proto);
    if let Some(h) = host.filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && b != b'"')) {
        element.push_str(";host=\"");
        element.push_str(h);
        element.push('"');
    }
    let fwd = match headers.get(header::FORWARDED).and_then(|v| v.to_str().ok()) {
        Some(prev) if !prev.trim().is_empty() => [prev, ", ", &element].concat(),
        _ => element,
    };
    if let Ok(v) = HeaderValue::from_str(&fwd) {
        headers.insert(header::FORWARDED, v);
    }
}

/// Returns the trace id of a valid `traceparent`, or installs a new `traceparent` and returns
/// its trace id.
pub fn ensure_traceparent(headers: &mut HeaderMap) -> String {
    if let Some(id) = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .and_then(valid_trace_id)
    {
        return id.to_owned();
    }
    let mut rng = rand::thread_rng();
    let mut trace = [0u8; 16];
    let mut span = [0u8; 8];
    rng.fill_bytes(&mut trace);
    rng.fill_bytes(&mut span);
    let trace_id = hex(&trace);
    let value = format!("00-{trace_id}-{}-01", hex(&span));
    headers.insert(
        "traceparent",
        HeaderValue::from_str(&value).expect("hex is a valid header value"),
    );
    trace_id
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// The trace id of a `traceparent` value valid per W3C Trace Context §3.2.
fn valid_trace_id(v: &str) -> Option<&str> {
    let parts: Vec<&str> = v.trim().split('-').collect();
    if parts.len() < 4 {
        return None;
    }
    let is_hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let (ver, trace, parent, flags) = (parts[0], parts[1], parts[2], parts[3]);
    if !is_hex(ver, 2) || ver == "ff" || (ver == "00" && parts.len() != 4) {
        return None;
    }
    if !is_hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
        return None;
    }
    if !is_hex(parent, 16) || parent.bytes().all(|b| b == b'0') || !is_hex(flags, 2) {
        return None;
    }
    Some(trace)
}

/// The PTCL headers (SPEC §3).
pub const LEASE_HEADER: &str = "agent-compensation-lease";
pub const INVERSE_HEADER: &str = "agent-compensation-inverse";
pub const RECEIPT_HEADER: &str = "agent-commit-receipt";
pub const FENCE_HEADER: &str = "agent-fence-token";
pub const DRY_RUN_HEADER: &str = "agent-dry-run";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_and_connection_named_fields_are_removed() {
        let mut h = HeaderMap::new();
        h.insert(
            "connection",
            HeaderValue::from_static("keep-alive, x-secret-hop"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("upgrade", HeaderValue::from_static("websocket"));
        h.insert("te", HeaderValue::from_static("gzip, trailers"));
        h.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        h.insert("x-end-to-end", HeaderValue::from_static("kept"));
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert_eq!(h["x-end-to-end"], "kept");
        assert_eq!(h["te"], "trailers");
    }

    #[test]
    fn forwarded_headers_are_appended() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        append_forwarded(
            &mut h,
            "127.0.0.1:5000".parse().unwrap(),
            "https",
            Some("erp.example.com"),
        );
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(
            h["forwarded"],
            "for=127.0.0.1;proto=https;host=\"erp.example.com\""
        );
        let mut h = HeaderMap::new();
        append_forwarded(&mut h, "[::1]:5000".parse().unwrap(), "http", None);
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http");
    }

    #[test]
    fn traceparent_is_kept_when_valid_and_created_otherwise() {
        let mut h = HeaderMap::new();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        h.insert("traceparent", HeaderValue::from_static(tp));
        assert_eq!(
            ensure_traceparent(&mut h),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(h["traceparent"], tp);

        for bad in [
            "garbage",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            let mut h = HeaderMap::new();
            h.insert("traceparent", HeaderValue::from_str(bad).unwrap());
            let id = ensure_traceparent(&mut h);
            assert_eq!(id.len(), 32);
            assert_ne!(h["traceparent"], bad);
            assert!(valid_trace_id(h["traceparent"].to_str().unwrap()).is_some());
        }
    }
}
