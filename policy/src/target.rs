//! RFC 3986 §6.2.2 normalisation of `sor_target_uri` for check 7 (SPEC §4.3).
//!
//! Two spellings of one target must compare equal, and two targets must not: scheme and host
//! are lowercased, a default port is dropped, dot segments are removed (all by the `url` crate),
//! percent-encoded unreserved characters are decoded and the remaining escapes uppercased
//! (done here, since WHATWG URL parsing leaves escapes alone). The path is then put in the one
//! canonical form requests are forwarded in ([`crate::path::canonical_path`]): slashes merged,
//! dots decoded and removed, and the spellings with no canonical form refused, so a lease for
//! `//items/1` or `/items/%2e%2e/1` names the resource a request would reach, or nothing.

use url::Url;

use crate::path::{canonical_path, PathError};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("not an absolute URI")]
    NotAbsolute,
    #[error("scheme must be http or https")]
    Scheme,
    #[error("{0}")]
    Path(#[from] PathError),
}

/// The normalised form of an absolute `http`/`https` URI, fragment removed.
pub fn normalize(uri: &str) -> Result<String, TargetError> {
    // WHATWG parsing reads `\\` as `/` in http(s) URLs: refuse it before it is rewritten, as a
    // request path with one is refused.
    if uri
        .split(['?', '#'])
        .next()
        .is_some_and(|p| p.contains('\\'))
    {
        return Err(TargetError::Path(PathError::Backslash));
    }
    let mut url = Url::parse(uri).map_err(|_| TargetError::NotAbsolute)?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(TargetError::Scheme);
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(TargetError::NotAbsolute);
    }
    url.set_fragment(None);
    let path = canonical_path(url.path())?;
    url.set_path(&path);
    if let Some(q) = url.query() {
        let q = normalize_escapes(q);
        url.set_query(Some(&q));
    }
    Ok(url.into())
}

/// The normalised target of a request: `origin` (`listen.public_base`, or the request's own
/// `scheme://host[:port]`) followed by the request's path and query (SPEC §4.3).
pub fn request_target(origin: &str, path_and_query: &str) -> Result<String, TargetError> {
    if !path_and_query.starts_with('/') {
        return Err(TargetError::NotAbsolute);
    }
    normalize(&format!("{}{path_and_query}", origin.trim_end_matches('/')))
}

/// The normalised origin [`request_target`] puts before a path (`scheme://host[:port]`, and a
/// base path if the origin has one), without a trailing `/`.
pub fn normalize_origin(origin: &str) -> Result<String, TargetError> {
    let n = normalize(&format!("{}/", origin.trim_end_matches('/')))?;
    match n.strip_suffix('/') {
        Some(o) if !o.contains(['?', '#']) => Ok(o.to_owned()),
        _ => Err(TargetError::NotAbsolute),
    }
}

/// Whether `origin` is a plain `http(s)://host[:port]` (host of letters, digits, `.` and `-`,
/// or a bracketed IPv6 address): one whose normalised form followed by a canonical path is the
/// request's normalised target, so [`fast_resource_key`] may skip the URL parse.
pub fn is_plain_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let (host, port) = match rest.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, port)) if addr.bytes().all(|b| b.is_ascii_hexdigit() || b == b':') => {
                (addr, port)
            }
            _ => return false,
        },
        None => rest.find(':').map_or((rest, ""), |i| rest.split_at(i)),
    };
    let port_ok = port.is_empty()
        || port.strip_prefix(':').is_some_and(|p| {
            !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit())
        });
    !host.is_empty()
        && port_ok
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':'))
}

/// `resource_key(&request_target(origin, path)?)` for a plain `origin` ([`is_plain_origin`])
/// already normalised ([`normalize_origin`], done once and kept) and a path that is canonical
/// already, as the data plane's are: no URL parse per request (issue 19: the parse was a sixth
/// of a fenced read's instructions). `None` when either is not so; the caller then takes
/// [`request_target`].
pub fn fast_resource_key(normalized_origin: &str, path: &str) -> Option<String> {
    if !crate::path::is_canonical(path) {
        return None;
    }
    let mut key = String::with_capacity(normalized_origin.len() + path.len());
    key.push_str(normalized_origin);
    key.push_str(path);
    Some(key)
}

/// The resource key of an HTTP write: its normalised target without the query (SPEC §4.3),
/// so `/items/1?view=full` and `/items/%31` fence the same resource.
pub fn resource_key(normalized_target: &str) -> &str {
    normalized_target
        .split_once('?')
        .map_or(normalized_target, |(before, _)| before)
}

/// Decodes `%XX` where it encodes an unreserved character and uppercases every other escape.
pub fn normalize_escapes(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && b[i + 1].is_ascii_hexdigit()
            && b[i + 2].is_ascii_hexdigit()
        {
            // Both bytes are ASCII hex digits, so this slice is on char boundaries.
            let hex = &s[i + 1..i + 3];
            if let Ok(v) = u8::from_str_radix(hex, 16) {
                if v.is_ascii_alphanumeric() || matches!(v, b'-' | b'.' | b'_' | b'~') {
                    out.push(v as char);
                } else {
                    out.push('%');
                    out.push_str(&hex.to_ascii_uppercase());
                }
                i += 3;
                continue;
            }
        }
        // Copy one whole character (the input is a str, so this never splits one).
        let ch = s[i..].chars().next().expect("i is on a char boundary");
        out.push(ch);
        i += ch.len_utf8();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equivalent_spellings_normalise_alike() {
        let want = "https://erp.example.com/api/v2/items/A-1?x=%2F";
        for spelling in [
            "https://erp.example.com/api/v2/items/A-1?x=%2F",
            "HTTPS://ERP.Example.COM:443/api/v2/items/A-1?x=%2f",
            "https://erp.example.com/api/./v1/../v2/items/%41%2D1?x=%2F",
            "https://erp.example.com/api/v2/items/A-1?x=%2F#frag",
        ] {
            assert_eq!(normalize(spelling).unwrap(), want, "{spelling}");
        }
    }

    #[test]
    fn different_targets_stay_different() {
        let a = normalize("https://erp.example.com/items/1").unwrap();
        for other in [
            "http://erp.example.com/items/1",
            "https://erp.example.com:8443/items/1",
            "https://erp.example.com/items/1/",
            "https://erp.example.com/items/1?",
            "https://erp.example.org/items/1",
        ] {
            assert_ne!(normalize(other).unwrap(), a, "{other}");
        }
    }

    #[test]
    fn lease_targets_take_the_forwarded_form_or_none() {
        let a = normalize("https://erp.example.com/items/1").unwrap();
        for same in [
            "https://erp.example.com//items/1",
            "https://erp.example.com/items//1",
            "https://erp.example.com/x/%2e%2e/items/1",
            "https://erp.example.com/%69tems/1",
        ] {
            assert_eq!(normalize(same).unwrap(), a, "{same}");
        }
        for refused in [
            "https://erp.example.com/items/%2F1",
            "https://erp.example.com/items\\1",
            "https://erp.example.com/items/..;/1",
            "https://erp.example.com/items/%00",
        ] {
            assert!(
                matches!(normalize(refused), Err(TargetError::Path(_))),
                "{refused}"
            );
        }
    }

    #[test]
    fn escapes_next_to_multibyte_characters_do_not_panic() {
        assert_eq!(normalize_escapes("%é%4"), "%é%4");
        assert_eq!(normalize_escapes("a%4a%zz%"), "aJ%zz%");
    }

    #[test]
    fn request_targets_and_resource_keys() {
        let t = request_target("https://ERP.example.com/", "/api/./items/%31?view=full").unwrap();
        assert_eq!(t, "https://erp.example.com/api/items/1?view=full");
        assert_eq!(resource_key(&t), "https://erp.example.com/api/items/1");
        assert_eq!(resource_key("https://x/a"), "https://x/a");
        assert_eq!(
            request_target("https://x", "*"),
            Err(TargetError::NotAbsolute)
        );
    }

    #[test]
    fn non_http_or_relative_uris_are_refused() {
        assert_eq!(normalize("/items/1"), Err(TargetError::NotAbsolute));
        assert_eq!(normalize("ftp://x/items"), Err(TargetError::Scheme));
        assert_eq!(normalize("mailto:a@b"), Err(TargetError::Scheme));
    }

    mod fast_key {
        use super::*;
        use proptest::prelude::*;

        fn origin() -> impl Strategy<Value = String> {
            let host = prop_oneof![
                "[a-zA-Z][a-zA-Z0-9-]{0,8}(\\.[a-zA-Z0-9-]{1,6}){0,2}",
                "(25[0-5]|1[0-9]{2}|[1-9]?[0-9])(\\.(25[0-5]|1[0-9]{2}|[1-9]?[0-9])){3}",
                Just("[::1]".to_owned()),
                Just("[2001:DB8:0:0::1]".to_owned()),
                "[a-z0-9.:%@_-]{1,12}",
            ];
            let port = prop_oneof![
                Just(String::new()),
                Just(":80".to_owned()),
                Just(":443".to_owned()),
                "(:[0-9]{1,6})",
            ];
            (
                prop_oneof![Just("http"), Just("https"), Just("HTTP")],
                host,
                port,
            )
                .prop_map(|(scheme, host, port)| format!("{scheme}://{host}{port}"))
        }

        proptest! {
            /// The fast key is the key the full way gives, whenever it gives one: the write
            /// path fences `resource_key(request_target(…))`, and a read must name the same.
            #[test]
            fn the_fast_key_is_the_full_key(
                origin in origin(),
                path in "(/[a-zA-Z0-9._~;=%-]{0,6}){1,4}/?",
                query in proptest::option::of("[a-z=&%2F]{0,8}"),
            ) {
                let pq = match &query { Some(q) => format!("{path}?{q}"), None => path.clone() };
                let full = request_target(&origin, &pq).map(|t| resource_key(&t).to_owned());
                if is_plain_origin(&origin) {
                    if let Ok(normalized) = normalize_origin(&origin) {
                        if let Some(fast) = fast_resource_key(&normalized, &path) {
                            prop_assert_eq!(Ok(fast), full);
                        }
                    }
                }
            }
        }

        #[test]
        fn plain_origins_take_the_fast_way_and_others_do_not() {
            for o in [
                "http://sor.test",
                "https://ERP.example.com:8443",
                "http://[::1]:8080",
                "http://10.0.0.1",
            ] {
                assert!(is_plain_origin(o), "{o}");
            }
            for o in [
                "http://a@b",
                "http://h/base",
                "ftp://h",
                "http://h:",
                "http://h#x",
                "http://[zz]",
                "http://",
            ] {
                assert!(!is_plain_origin(o), "{o}");
            }
            let n = normalize_origin("HTTP://Sor.Test:80").unwrap();
            assert_eq!(n, "http://sor.test");
            assert_eq!(
                fast_resource_key(&n, "/api/v2/items/1").as_deref(),
                Some("http://sor.test/api/v2/items/1")
            );
            assert_eq!(fast_resource_key(&n, "/a//b"), None);
        }
    }
}
