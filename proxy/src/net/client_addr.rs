//! The real client address behind trusted proxies (for per-client rate limits).
//!
//! The connection's peer is the client unless it is a configured trusted proxy; then the one
//! header the trusted proxies set (`aip2.trusted_proxy_header`: `X-Forwarded-For` by default,
//! or `Forwarded`) is walked from the right, the nearest hop first, skipping trusted proxies,
//! and the first address that is not one is the client: the rule of nginx's
//! `real_ip_recursive` and RFC 7239 §7.4. Only a hop we trust may tell us who it talked to.
//!
//! The other header is never read: a proxy that sets one passes the other through as the
//! client wrote it (nginx appends to `X-Forwarded-For` and forwards a client's `Forwarded`
//! untouched), so reading it would let a client choose its own rate-limit key (issue 44).
//! A hop that names no usable address (`unknown`, an obfuscated `_id`, garbage) ends the walk
//! at the trusted hop before it. The walk reads the whole header, however many hops: it stops
//! at the first untrusted one, and a chain of nothing but trusted hops keys to the farthest.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

use crate::config::ProxyHeader;

pub fn client_addr(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[IpNet],
    header: ProxyHeader,
) -> IpAddr {
    let is_trusted = |a: &IpAddr| trusted.iter().any(|n| n.contains(a));
    if !is_trusted(&peer) {
        return peer;
    }
    let name = match header {
        ProxyHeader::XForwardedFor => "x-forwarded-for",
        ProxyHeader::Forwarded => "forwarded",
    };
    // Several field lines are one list, in order (RFC 9110 §5.3); the last is the nearest.
    let mut client = peer;
    for line in headers.get_all(name).iter().rev() {
        let Ok(text) = line.to_str() else {
            return client;
        };
        for element in text.rsplit(',') {
            let hop = match header {
                ProxyHeader::XForwardedFor => parse_node(element.trim()),
                ProxyHeader::Forwarded => forwarded_for(element),
            };
            match hop {
                Some(addr) => {
                    client = addr;
                    if !is_trusted(&addr) {
                        return client;
                    }
                }
                None => return client,
            }
        }
    }
    client
}

/// The `for=` of one `Forwarded` element (`for=192.0.2.60;proto=http;by=203.0.113.43`).
fn forwarded_for(element: &str) -> Option<IpAddr> {
    let node = element.split(';').find_map(|pair| {
        let (k, v) = pair.split_once('=')?;
        k.trim().eq_ignore_ascii_case("for").then(|| v.trim())
    })?;
    parse_node(node)
}

/// `192.0.2.1`, `"192.0.2.1:4711"`, `"[2001:db8::1]:4711"`, `2001:db8::1`.
fn parse_node(raw: &str) -> Option<IpAddr> {
    let v = raw.trim().trim_matches('"');
    if let Some(rest) = v.strip_prefix('[') {
        return rest.split_once(']')?.0.parse().ok();
    }
    if let Ok(a) = v.parse() {
        return Some(a);
    }
    // IPv4 with a port.
    let (host, port) = v.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<std::net::Ipv4Addr>().ok().map(IpAddr::V4)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut m = HeaderMap::new();
        for (k, v) in pairs {
            m.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        m
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_trusted_hops_are_believed() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let xff_of = |peer: &str, m: &HeaderMap| {
            client_addr(ip(peer), m, &trusted, ProxyHeader::XForwardedFor)
        };
        let fwd_of =
            |peer: &str, m: &HeaderMap| client_addr(ip(peer), m, &trusted, ProxyHeader::Forwarded);
        let xff = h(&[("x-forwarded-for", "203.0.113.9, 10.0.0.7")]);
        // From an untrusted peer the header is the client's own claim: ignored.
        assert_eq!(xff_of("198.51.100.1", &xff), ip("198.51.100.1"));
        // From a trusted proxy: the first untrusted hop from the right.
        assert_eq!(xff_of("10.0.0.1", &xff), ip("203.0.113.9"));
        // A client prepending a fake hop does not move its key.
        let spoof = h(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9")]);
        assert_eq!(xff_of("10.0.0.1", &spoof), ip("203.0.113.9"));
        // Nor a client naming trusted hops before its own: the walk stops at the real one.
        let many = format!("{}203.0.113.9", "10.0.0.9, ".repeat(100));
        let many = h(&[("x-forwarded-for", &many)]);
        assert_eq!(xff_of("10.0.0.1", &many), ip("203.0.113.9"));
        // Split over two header lines: one list.
        let split = h(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "10.0.0.7"),
        ]);
        assert_eq!(xff_of("10.0.0.1", &split), ip("203.0.113.9"));
        // Issue 44: behind an X-Forwarded-For proxy, a client's Forwarded chooses nothing.
        let chosen = h(&[
            ("forwarded", "for=9.9.9.9"),
            ("x-forwarded-for", "203.0.113.9"),
        ]);
        assert_eq!(xff_of("10.0.0.1", &chosen), ip("203.0.113.9"));
        // And behind a Forwarded proxy, a client's X-Forwarded-For chooses nothing.
        let chosen = h(&[
            ("forwarded", "for=203.0.113.9"),
            ("x-forwarded-for", "9.9.9.9"),
        ]);
        assert_eq!(fwd_of("10.0.0.1", &chosen), ip("203.0.113.9"));
        // Forwarded in its quoted and bracketed spellings.
        let fwd = h(&[(
            "forwarded",
            "for=\"[2001:db8::17]:4711\";proto=https, For=10.0.0.7",
        )]);
        assert_eq!(fwd_of("10.0.0.1", &fwd), ip("2001:db8::17"));
        let v4port = h(&[("forwarded", "for=\"192.0.2.43:47011\"")]);
        assert_eq!(fwd_of("10.0.0.1", &v4port), ip("192.0.2.43"));
        // An unusable hop stops the walk at the trusted one before it.
        let unknown = h(&[("forwarded", "for=unknown, for=10.0.0.7")]);
        assert_eq!(fwd_of("10.0.0.1", &unknown), ip("10.0.0.7"));
        let garbage = h(&[("x-forwarded-for", "nonsense, 10.0.0.7")]);
        assert_eq!(xff_of("10.0.0.1", &garbage), ip("10.0.0.7"));
        // No header from a trusted proxy: the proxy is the client.
        assert_eq!(xff_of("10.0.0.1", &h(&[])), ip("10.0.0.1"));
        // The proxy's header missing, the other present: the proxy is the client.
        let other = h(&[("forwarded", "for=9.9.9.9")]);
        assert_eq!(xff_of("10.0.0.1", &other), ip("10.0.0.1"));
    }
}
