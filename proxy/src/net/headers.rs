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

/// Removes every field in `names` (lower-case). Scans the map's names once before removing
/// anything: a request almost never carries one of them, and a lookup by a `&str` name parses
/// and hashes that name (issue 19: 30 such removals were 15 % of a proxied GET's instructions).
pub fn remove_named(headers: &mut HeaderMap, names: &[&str]) {
    if !headers.keys().any(|k| names.contains(&k.as_str())) {
        return;
    }
    for name in names {
        headers.remove(*name);
    }
}

/// Removes hop-by-hop fields, those named by `Connection`, and `Transfer-Encoding` (hyper
/// frames the body itself on each hop).
///
/// Almost every upstream answer has `Connection: keep-alive` and nothing else to strip, and
/// most requests have nothing to strip at all: both are found by one scan of the map's names
/// and handled without looking each listed name up (issue 19); anything else takes the full
/// course.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // One scan of the map's names: is any listed field there, and is it the only one?
    let mut first = None;
    let mut several = false;
    for k in headers.keys() {
        if is_hop_by_hop(k) {
            if first.is_some() {
                several = true;
                break;
            }
            first = Some(k.clone());
        }
    }
    // `Connection` and `TE` are on the list themselves: without a listed field there is
    // nothing named and nothing to keep.
    let Some(first) = first else {
        return;
    };
    // The usual answer: `Connection: keep-alive` (or `close`) and nothing else listed.
    if !several
        && first == header::CONNECTION
        && headers.get_all(header::CONNECTION).iter().all(|v| {
            let v = v.as_bytes();
            v.eq_ignore_ascii_case(b"keep-alive") || v.eq_ignore_ascii_case(b"close")
        })
    {
        headers.remove(header::CONNECTION);
        return;
    }
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

/// Whether `name` is one of [`HOP_BY_HOP`] or `Transfer-Encoding`.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    // By length first: most names of most messages are ruled out by one comparison (issue 19:
    // a string match per name of every answer cost ≈ 100 instructions a name).
    let s = name.as_str();
    match s.len() {
        2 => s == "te",
        7 => s == "trailer" || s == "upgrade",
        10 => s == "connection" || s == "keep-alive",
        16 => s == "proxy-connection",
        17 => s == "transfer-encoding",
        18 => s == "proxy-authenticate",
        19 => s == "proxy-authorization",
        _ => false,
    }
}

/// What a downstream connection adds to each of its requests' `X-Forwarded-For` and
/// `Forwarded`, formatted once per connection rather than once per request (issue 19).
#[derive(Debug, Clone)]
pub struct PeerForwarding {
    /// The peer's address as `X-Forwarded-For` spells it.
    ip: HeaderValue,
    /// `for=…;proto=…`, the `Forwarded` element without its `host`.
    element: String,
    /// The last `host` this connection's requests named, with the `Forwarded` value it gives
    /// when the request brings none: a client rarely changes `Host` on a connection.
    last: crate::net::memo::LastKey<HeaderValue>,
}

impl PeerForwarding {
    pub fn new(peer: SocketAddr, proto: &str) -> Self {
        let ip = peer.ip().to_string();
        // RFC 7239 §6: IPv6 addresses are bracketed and quoted.
        let element = match peer.ip() {
            std::net::IpAddr::V4(_) => format!("for={ip};proto={proto}"),
            std::net::IpAddr::V6(_) => format!("for=\"[{ip}]\";proto={proto}"),
        };
        Self {
            ip: HeaderValue::from_str(&ip).unwrap_or_else(|_| HeaderValue::from_static("unknown")),
            element,
            last: Default::default(),
        }
    }

    /// Appends the peer to `X-Forwarded-For` and `Forwarded` (with `host` when it can be
    /// quoted).
    pub fn append(&self, headers: &mut HeaderMap, host: Option<&str>) {
        use http::header::Entry;
        // Entries: one lookup per header whether or not the client sent one.
        match headers.entry(X_FORWARDED_FOR) {
            Entry::Occupied(mut e) => {
                let joined = match e.get().to_str() {
                    Ok(prev) if !prev.trim().is_empty() => {
                        let ip = self.ip.to_str().unwrap_or("");
                        HeaderValue::try_from([prev, ", ", ip].concat()).ok()
                    }
                    _ => Some(self.ip.clone()),
                };
                if let Some(v) = joined {
                    e.insert(v);
                }
            }
            Entry::Vacant(e) => {
                e.insert(self.ip.clone());
            }
        }
        let host = host.filter(|h| h.bytes().all(|b| b.is_ascii_graphic() && b != b'"'));
        match headers.entry(header::FORWARDED) {
            Entry::Occupied(mut e) => {
                let prev = e.get().to_str().ok().filter(|p| !p.trim().is_empty());
                if let Ok(v) = HeaderValue::try_from(self.forwarded(prev, host)) {
                    e.insert(v);
                }
            }
            Entry::Vacant(e) => {
                if let Some(v) = self.forwarded_alone(host) {
                    e.insert(v);
                }
            }
        }
    }

    /// The `Forwarded` value for a request that brought none: this connection's last one
    /// when `host` is the last host.
    fn forwarded_alone(&self, host: Option<&str>) -> Option<HeaderValue> {
        self.last.get_or(host.unwrap_or(""), || {
            HeaderValue::try_from(self.forwarded(None, host)).ok()
        })
    }

    fn forwarded(&self, prev: Option<&str>, host: Option<&str>) -> String {
        let mut fwd = String::with_capacity(
            prev.map_or(0, |p| p.len() + 2) + self.element.len() + host.map_or(0, |h| h.len() + 8),
        );
        if let Some(prev) = prev {
            fwd.push_str(prev);
            fwd.push_str(", ");
        }
        fwd.push_str(&self.element);
        if let Some(h) = host {
            fwd.push_str(";host=\"");
            fwd.push_str(h);
            fwd.push('"');
        }
        fwd
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Returns the trace id of a valid `traceparent`, or installs a new `traceparent` and returns
/// its trace id.
pub fn ensure_traceparent(headers: &mut HeaderMap) -> std::sync::Arc<str> {
    ensure_flagged(headers, true)
}

/// As [`ensure_traceparent`], a new one not sampled (flags `00`): a sidecar exporting traces
/// that does not record this one says so to the upstream.
pub fn ensure_unsampled(headers: &mut HeaderMap) -> std::sync::Arc<str> {
    ensure_flagged(headers, false)
}

fn ensure_flagged(headers: &mut HeaderMap, sampled: bool) -> std::sync::Arc<str> {
    if let Some(tp) = traceparent(headers) {
        return tp.trace_id.into();
    }
    let mut trace = [0u8; 16];
    let mut parent = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut trace);
    rand::thread_rng().fill_bytes(&mut parent);
    install_traceparent(headers, &trace, &parent, sampled)
}

/// A valid `traceparent`'s parts (W3C Trace Context §3.2), as lower-case hex.
pub struct Traceparent<'h> {
    pub trace_id: &'h str,
    pub parent_id: &'h str,
    pub sampled: bool,
}

/// The request's `traceparent`, when it is valid.
pub fn traceparent(headers: &HeaderMap) -> Option<Traceparent<'_>> {
    let v = headers.get(TRACEPARENT)?.to_str().ok()?;
    let (trace_id, parent_id, flags) = valid_traceparent(v)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(Traceparent {
        trace_id,
        parent_id,
        sampled: flags & 1 == 1,
    })
}

/// Installs `00-<trace>-<parent>-<flags>` as the request's `traceparent`; the trace id, as
/// hex. Written in place (issue 19: `format!` and two temporary strings were a tenth of this
/// function's cost).
pub fn install_traceparent(
    headers: &mut HeaderMap,
    trace: &[u8; 16],
    parent: &[u8; 8],
    sampled: bool,
) -> std::sync::Arc<str> {
    let mut value = *b"00-00000000000000000000000000000000-0000000000000000-00";
    hex_into(trace, &mut value[3..35]);
    hex_into(parent, &mut value[36..52]);
    if sampled {
        value[54] = b'1';
    }
    // Hex digits only, so the check cannot fail (`from_utf8_lossy` was ≈ 280 instructions).
    let trace_id = std::str::from_utf8(&value[3..35])
        .unwrap_or_default()
        .into();
    headers.insert(
        TRACEPARENT,
        HeaderValue::from_bytes(&value).expect("hex is a valid header value"),
    );
    trace_id
}

const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// A trace id as lower-case hex.
pub fn trace_id_hex(trace: &[u8; 16]) -> std::sync::Arc<str> {
    let mut out = [0u8; 32];
    hex_into(trace, &mut out);
    std::str::from_utf8(&out).unwrap_or_default().into()
}

/// Writes `bytes` as lower-case hex into `out` (twice their length).
fn hex_into(bytes: &[u8], out: &mut [u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (b, pair) in bytes.iter().zip(out.chunks_exact_mut(2)) {
        pair[0] = DIGITS[(b >> 4) as usize];
        pair[1] = DIGITS[(b & 0xf) as usize];
    }
}

/// The trace id, parent id and flags of a `traceparent` value valid per W3C Trace Context
/// §3.2.
fn valid_traceparent(v: &str) -> Option<(&str, &str, &str)> {
    let mut parts = v.trim().split('-');
    let (ver, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let more = parts.next().is_some();
    let is_hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !is_hex(ver, 2) || ver == "ff" || (ver == "00" && more) {
        return None;
    }
    if !is_hex(trace, 32) || trace.bytes().all(|b| b == b'0') {
        return None;
    }
    if !is_hex(parent, 16) || parent.bytes().all(|b| b == b'0') || !is_hex(flags, 2) {
        return None;
    }
    Some((trace, parent, flags))
}

/// The PTCL headers (SPEC §3).
pub const LEASE_HEADER: &str = "agent-compensation-lease";
pub const INVERSE_HEADER: &str = "agent-compensation-inverse";
pub const RECEIPT_HEADER: &str = "agent-commit-receipt";
pub const FENCE_HEADER: &str = "agent-fence-token";
pub const DRY_RUN_HEADER: &str = "agent-dry-run";

/// A request's header values by name, as contract parameters read them (`None`: not text).
pub fn values<'h>(headers: &'h http::HeaderMap) -> impl Fn(&str) -> Vec<Option<&'h str>> + 'h {
    move |name| {
        headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().ok())
            .collect()
    }
}

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
    fn connection_tokens_are_matched_whatever_their_case() {
        let mut h = HeaderMap::new();
        h.append("connection", HeaderValue::from_static("Keep-Alive"));
        h.append(
            "connection",
            HeaderValue::from_static(" X-Secret-Hop ,UPGRADE"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-secret-hop", HeaderValue::from_static("1"));
        h.insert("upgrade", HeaderValue::from_static("h2c"));
        h.insert(
            "proxy-authorization",
            HeaderValue::from_static("Basic eA=="),
        );
        h.insert("x-end-to-end", HeaderValue::from_static("kept"));
        strip_hop_by_hop(&mut h);
        let names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        assert_eq!(names, ["x-end-to-end"]);

        // Nothing hop-by-hop: the map is left as it is.
        let mut h = HeaderMap::new();
        h.insert("x-a", HeaderValue::from_static("1"));
        h.insert("te-extra", HeaderValue::from_static("2"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn the_usual_connection_header_alone_is_removed() {
        for value in ["keep-alive", "Keep-Alive", "close"] {
            let mut h = HeaderMap::new();
            h.insert("connection", HeaderValue::from_static(value));
            h.insert("content-length", HeaderValue::from_static("2"));
            strip_hop_by_hop(&mut h);
            assert_eq!(
                h.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
                ["content-length"]
            );
        }
        // A second `Connection` line naming a field takes the full course.
        let mut h = HeaderMap::new();
        h.append("connection", HeaderValue::from_static("keep-alive"));
        h.append("connection", HeaderValue::from_static("x-hop"));
        h.insert("x-hop", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert!(h.is_empty(), "{h:?}");
    }

    #[test]
    fn the_hop_by_hop_match_and_the_list_agree() {
        for name in HOP_BY_HOP {
            assert!(is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
        assert!(is_hop_by_hop(&header::TRANSFER_ENCODING));
        for name in ["content-length", "host", "tee", "x-connection"] {
            assert!(!is_hop_by_hop(&HeaderName::from_static(name)), "{name}");
        }
    }

    #[test]
    fn named_fields_are_removed_in_every_spelling_the_map_holds() {
        let mut h = HeaderMap::new();
        h.append("Agent-Fence-Token", HeaderValue::from_static("9"));
        h.append("agent-fence-token", HeaderValue::from_static("10"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        remove_named(&mut h, &SIDECAR_OWNED);
        assert!(h.get("agent-fence-token").is_none());
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn forwarded_headers_are_appended() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("10.0.0.1"));
        PeerForwarding::new("127.0.0.1:5000".parse().unwrap(), "https")
            .append(&mut h, Some("erp.example.com"));
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(
            h["forwarded"],
            "for=127.0.0.1;proto=https;host=\"erp.example.com\""
        );
        let mut h = HeaderMap::new();
        PeerForwarding::new("[::1]:5000".parse().unwrap(), "http").append(&mut h, None);
        assert_eq!(h["forwarded"], "for=\"[::1]\";proto=http");
    }

    #[test]
    fn a_connection_s_cached_forwarded_value_follows_its_requests_hosts() {
        let peer = PeerForwarding::new("10.1.2.3:5000".parse().unwrap(), "http");
        let forwarded = |host: Option<&str>, prev: Option<&'static str>| {
            let mut h = HeaderMap::new();
            if let Some(p) = prev {
                h.insert(header::FORWARDED, HeaderValue::from_static(p));
            }
            peer.append(&mut h, host);
            assert_eq!(h.get_all(header::FORWARDED).iter().count(), 1);
            h[header::FORWARDED].to_str().unwrap().to_owned()
        };
        let a = "for=10.1.2.3;proto=http;host=\"a.example\"";
        assert_eq!(forwarded(Some("a.example"), None), a);
        assert_eq!(forwarded(Some("a.example"), None), a, "from the cache");
        assert_eq!(
            forwarded(Some("b.example"), None),
            "for=10.1.2.3;proto=http;host=\"b.example\""
        );
        assert_eq!(forwarded(None, None), "for=10.1.2.3;proto=http");
        // A request that brings its own is appended to, and leaves the cache alone.
        assert_eq!(
            forwarded(Some("a.example"), Some("for=192.0.2.1")),
            format!("for=192.0.2.1, {a}")
        );
        assert_eq!(forwarded(None, None), "for=10.1.2.3;proto=http");
        // A host that cannot be quoted is left out, cached or not.
        assert_eq!(forwarded(Some("a\"b"), None), "for=10.1.2.3;proto=http");
    }

    #[test]
    fn traceparent_is_kept_when_valid_and_created_otherwise() {
        let mut h = HeaderMap::new();
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        h.insert("traceparent", HeaderValue::from_static(tp));
        assert_eq!(
            &*ensure_traceparent(&mut h),
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
            assert!(valid_traceparent(h["traceparent"].to_str().unwrap()).is_some());
        }
    }
}
