//! The real client address behind trusted proxies (for per-client rate limits).
//!
//! The connection's peer is the client unless it is a configured trusted proxy; then the
//! forwarding chain is walked from the nearest hop outwards, skipping trusted proxies, and the
//! first address that is not one is the client (the rule of nginx's `real_ip_recursive` and
//! Envoy's trusted hops: only a hop we trust may tell us who it talked to). `Forwarded`
//! (RFC 7239) is read when present, else `X-Forwarded-For`; both are ignored from an untrusted
//! peer, so a client cannot choose its own rate-limit key. A hop that names no usable address
//! (`unknown`, an obfuscated `_id`, garbage) ends the walk at the trusted hop before it.

use std::net::IpAddr;

use http::HeaderMap;
use ipnet::IpNet;

/// Most forwarding hops read: a longer chain is cut, not walked.
const MAX_HOPS: usize = 32;

pub fn client_addr(peer: IpAddr, headers: &HeaderMap, trusted: &[IpNet]) -> IpAddr {
    let is_trusted = |a: &IpAddr| trusted.iter().any(|n| n.contains(a));
    if !is_trusted(&peer) {
        return peer;
    }
    let chain = forwarded_for(headers).unwrap_or_else(|| x_forwarded_for(headers));
    let mut client = peer;
    for hop in chain.iter().rev().take(MAX_HOPS) {
        match hop {
            Some(addr) => {
                client = *addr;
                if !is_trusted(addr) {
                    return client;
                }
            }
            None => return client,
        }
    }
    client
}

/// The `for=` of every `Forwarded` element, in order; `None` without the header.
fn forwarded_for(headers: &HeaderMap) -> Option<Vec<Option<IpAddr>>> {
    let mut out = Vec::new();
    let mut seen = false;
    for value in headers.get_all(http::header::FORWARDED) {
        seen = true;
        let Ok(text) = value.to_str() else {
            out.push(None);
            continue;
        };
        for element in text.split(',') {
            let node = element.split(';').find_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                k.trim().eq_ignore_ascii_case("for").then(|| v.trim())
            });
            out.push(node.and_then(parse_node));
        }
    }
    seen.then_some(out)
}

fn x_forwarded_for(headers: &HeaderMap) -> Vec<Option<IpAddr>> {
    let mut out = Vec::new();
    for value in headers.get_all("x-forwarded-for") {
        match value.to_str() {
            Ok(text) => out.extend(text.split(',').map(|s| parse_node(s.trim()))),
            Err(_) => out.push(None),
        }
    }
    out
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

    #[test]
    fn only_trusted_hops_are_believed() {
        let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let xff = h(&[("x-forwarded-for", "203.0.113.9, 10.0.0.7")]);
        // From an untrusted peer the header is the client's own claim: ignored.
        assert_eq!(
            client_addr(ip("198.51.100.1"), &xff, &trusted),
            ip("198.51.100.1")
        );
        // From a trusted proxy: the first untrusted hop from the right.
        assert_eq!(
            client_addr(ip("10.0.0.1"), &xff, &trusted),
            ip("203.0.113.9")
        );
        // A client prepending a fake hop does not move its key.
        let spoof = h(&[("x-forwarded-for", "1.2.3.4, 203.0.113.9")]);
        assert_eq!(
            client_addr(ip("10.0.0.1"), &spoof, &trusted),
            ip("203.0.113.9")
        );
        // Split over two header lines: one list.
        let split = h(&[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-for", "10.0.0.7"),
        ]);
        assert_eq!(
            client_addr(ip("10.0.0.1"), &split, &trusted),
            ip("203.0.113.9")
        );
        // Forwarded wins over X-Forwarded-For, in its quoted and bracketed spellings.
        let fwd = h(&[
            (
                "forwarded",
                "for=\"[2001:db8::17]:4711\";proto=https, For=10.0.0.7",
            ),
            ("x-forwarded-for", "9.9.9.9"),
        ]);
        assert_eq!(
            client_addr(ip("10.0.0.1"), &fwd, &trusted),
            ip("2001:db8::17")
        );
        let v4port = h(&[("forwarded", "for=\"192.0.2.43:47011\"")]);
        assert_eq!(
            client_addr(ip("10.0.0.1"), &v4port, &trusted),
            ip("192.0.2.43")
        );
        // An unusable hop stops the walk at the trusted one before it.
        let unknown = h(&[("forwarded", "for=unknown, for=10.0.0.7")]);
        assert_eq!(
            client_addr(ip("10.0.0.1"), &unknown, &trusted),
            ip("10.0.0.7")
        );
        // No header from a trusted proxy: the proxy is the client.
        assert_eq!(
            client_addr(ip("10.0.0.1"), &h(&[]), &trusted),
            ip("10.0.0.1")
        );
    }
}
