//! What a web page may not make the admin listener do (SPEC §9, issue 54 defect 7).
//!
//! A browser sends whatever a page asks to any address it can reach, the loopback admin
//! listener included, and with no admin credential configured (the loopback default) nothing
//! else tells that request from an operator's. So, whether or not a credential is set:
//!
//! - a request whose `Sec-Fetch-Site` is `cross-site` or `same-site`, or whose `Origin` is not
//!   the listener's own (`http[s]://` + the `Host` it was sent to), is refused 403
//!   `ERR_ADMIN_CROSS_SITE`;
//! - with no credential configured, a request whose `Host` is not a loopback name or address
//!   is refused the same way: a page on `evil.example` that resolves its own name to 127.0.0.1
//!   (DNS rebinding) is same-origin with itself, and only the `Host` it sends shows it;
//! - every mutating request (`POST`, `PUT`, `PATCH`, `DELETE`) must say
//!   `Content-Type: application/json`, else 415 `ERR_ADMIN_MEDIA_TYPE`: a page can send a
//!   form, `text/plain` or no body without a CORS preflight, never JSON, and the listener
//!   grants no preflight.
//!
//! Exempt: the probes (`/healthz`, `/readyz`, `/metrics`), which kubelets and scrapers call
//! and which change nothing, and `GET`/`HEAD` of the console's pages, so that a link to the
//! console from another site (a runbook, a dashboard) still opens it. Everything the console
//! then does is same-origin.

use http::{header, HeaderMap, Method, Response};
use palisade_policy::ErrorCode;

use crate::net::body::ProxyBody;

/// Why a request is refused before anything else looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refused {
    CrossSite(&'static str),
    MediaType,
}

/// Decides whether a web page sent a request to the admin listener: checked first, before
/// the credential (a page never holds one, and must learn nothing from a 401 either). `tls`:
/// the listener serves HTTPS; `credential`: a token file or allowed SPIFFE IDs are
/// configured.
pub(super) fn check_site(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    authority: Option<&str>,
    tls: bool,
    credential: bool,
) -> Result<(), Refused> {
    let safe = matches!(*method, Method::GET | Method::HEAD);
    let probe = matches!(path, "/healthz" | "/readyz" | "/metrics");
    let console_page = path == "/ui" || path.starts_with("/ui/");
    if safe && (probe || console_page) {
        return Ok(());
    }
    cross_site(headers, authority, tls, credential)
}

/// A mutating call must say it is JSON (checked after the credential, so a caller without
/// one is told that first).
pub(super) fn check_media_type(method: &Method, headers: &HeaderMap) -> Result<(), Refused> {
    let safe = matches!(*method, Method::GET | Method::HEAD);
    if !safe && !is_json(headers) {
        return Err(Refused::MediaType);
    }
    Ok(())
}

/// Both checks, as the listener runs them around the credential check (tests).
#[cfg(test)]
fn check(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    authority: Option<&str>,
    tls: bool,
    credential: bool,
) -> Result<(), Refused> {
    check_site(method, path, headers, authority, tls, credential)?;
    check_media_type(method, headers)
}

fn cross_site(
    headers: &HeaderMap,
    authority: Option<&str>,
    tls: bool,
    credential: bool,
) -> Result<(), Refused> {
    let text = |name: header::HeaderName| -> Result<Option<&str>, Refused> {
        let mut all = headers.get_all(name).iter();
        match (all.next(), all.next()) {
            (None, _) => Ok(None),
            (Some(v), None) => v
                .to_str()
                .map(Some)
                .map_err(|_| Refused::CrossSite("a fetch header is not text")),
            (Some(_), Some(_)) => Err(Refused::CrossSite("a fetch header is given twice")),
        }
    };
    if let Some(site) = text(header::HeaderName::from_static("sec-fetch-site"))? {
        if matches!(
            site.trim().to_ascii_lowercase().as_str(),
            "cross-site" | "same-site"
        ) {
            return Err(Refused::CrossSite(
                "Sec-Fetch-Site says another site sent this request",
            ));
        }
    }
    let host = authority.map(str::trim).filter(|h| !h.is_empty());
    if !credential && !host.is_some_and(is_loopback_host) {
        return Err(Refused::CrossSite(
            "with no admin credential configured, the admin listener answers only requests addressed to a loopback host",
        ));
    }
    if let Some(origin) = text(header::ORIGIN)? {
        let own = host.and_then(|h| origin_key(&format!("{}://{h}", scheme(tls))));
        if own.is_none() || origin_key(origin) != own {
            return Err(Refused::CrossSite(
                "Origin is not the admin listener's own origin",
            ));
        }
    }
    Ok(())
}

fn scheme(tls: bool) -> &'static str {
    if tls {
        "https"
    } else {
        "http"
    }
}

/// `application/json`, with or without parameters, in any case.
fn is_json(headers: &HeaderMap) -> bool {
    let mut all = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(v), None) = (all.next(), all.next()) else {
        return false;
    };
    v.to_str().ok().is_some_and(|v| {
        v.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    })
}

/// An origin as compared: scheme and host lower-cased, the port explicit. `None` for
/// anything that is not `scheme://host[:port]` (`null`, a path, userinfo).
fn origin_key(origin: &str) -> Option<(String, String, u16)> {
    let (scheme, rest) = origin.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    if rest.is_empty() || rest.contains(['/', '@', '?', '#', ' ']) {
        return None;
    }
    let (host, port) = split_port(rest)?;
    Some((host.to_ascii_lowercase(), scheme, port.unwrap_or(default)))
}

/// `host[:port]` or `[v6][:port]`.
fn split_port(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        match after {
            "" => (v6, None),
            p => (v6, Some(p.strip_prefix(':')?)),
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
    };
    (!host.is_empty()).then_some((host, port))
}

/// `localhost` (and `*.localhost`, RFC 6761), `127.0.0.0/8` and `::1`, with or without a port.
fn is_loopback_host(authority: &str) -> bool {
    let Some((host, _)) = split_port(authority) else {
        return false;
    };
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host == "localhost" || host.ends_with(".localhost") {
        return true;
    }
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}

/// The refusal, as problem+json.
pub(super) fn refused(why: Refused) -> Response<ProxyBody> {
    let (code, detail) = match why {
        Refused::CrossSite(detail) => (ErrorCode::AdminCrossSite, detail),
        Refused::MediaType => (
            ErrorCode::AdminMediaType,
            "a POST, PUT, PATCH or DELETE to the admin listener must be Content-Type: application/json",
        ),
    };
    crate::enforce::escrow::problem(code, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                header::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                v.parse().expect("value"),
            );
        }
        h
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn what_a_page_sends_is_refused_with_or_without_a_credential() {
        let host = Some("127.0.0.1:9901");
        for credential in [false, true] {
            for (pairs, want) in [
                (
                    vec![("content-type", "text/plain")],
                    Err(Refused::MediaType),
                ),
                (vec![], Err(Refused::MediaType)),
                (
                    vec![("content-type", "application/x-www-form-urlencoded")],
                    Err(Refused::MediaType),
                ),
                (
                    vec![("content-type", "application/json, text/plain")],
                    Err(Refused::MediaType),
                ),
                (
                    vec![JSON, ("origin", "http://evil.example")],
                    Err(Refused::CrossSite("")),
                ),
                (vec![JSON, ("origin", "null")], Err(Refused::CrossSite(""))),
                (
                    vec![JSON, ("origin", "http://127.0.0.1:9902")],
                    Err(Refused::CrossSite("")),
                ),
                (
                    vec![JSON, ("origin", "https://127.0.0.1:9901")],
                    Err(Refused::CrossSite("")),
                ),
                (
                    vec![JSON, ("sec-fetch-site", "cross-site")],
                    Err(Refused::CrossSite("")),
                ),
                (
                    vec![JSON, ("sec-fetch-site", "same-site")],
                    Err(Refused::CrossSite("")),
                ),
                (
                    vec![JSON, ("sec-fetch-site", "Cross-Site")],
                    Err(Refused::CrossSite("")),
                ),
                (vec![JSON], Ok(())),
                (
                    vec![("content-type", "Application/JSON; charset=utf-8")],
                    Ok(()),
                ),
                (vec![JSON, ("origin", "http://127.0.0.1:9901")], Ok(())),
                (vec![JSON, ("origin", "HTTP://127.0.0.1:9901")], Ok(())),
                (vec![JSON, ("sec-fetch-site", "same-origin")], Ok(())),
                (vec![JSON, ("sec-fetch-site", "none")], Ok(())),
            ] {
                let got = check(
                    &Method::POST,
                    "/admin/v1/freeze",
                    &headers(&pairs),
                    host,
                    false,
                    credential,
                );
                let same = matches!(
                    (&got, &want),
                    (Ok(()), Ok(()))
                        | (Err(Refused::MediaType), Err(Refused::MediaType))
                        | (Err(Refused::CrossSite(_)), Err(Refused::CrossSite(_)))
                );
                assert!(same, "{pairs:?} (credential {credential}): {got:?}");
            }
        }
        // DELETE too, body or not.
        assert_eq!(
            check(
                &Method::DELETE,
                "/admin/v1/freeze/x",
                &HeaderMap::new(),
                host,
                false,
                true
            ),
            Err(Refused::MediaType)
        );
    }

    #[test]
    fn a_rebound_name_is_refused_without_a_credential() {
        let h = headers(&[JSON, ("origin", "http://evil.example:9901")]);
        let rebound = Some("evil.example:9901");
        assert!(matches!(
            check(&Method::POST, "/admin/v1/freeze", &h, rebound, false, false),
            Err(Refused::CrossSite(_))
        ));
        // Reads too: the page could read the held writes' bodies.
        assert!(matches!(
            check(
                &Method::GET,
                "/admin/v1/escrow",
                &HeaderMap::new(),
                rebound,
                false,
                false
            ),
            Err(Refused::CrossSite(_))
        ));
        // With a credential the page still needs the token, which it does not have.
        assert!(check(&Method::POST, "/admin/v1/freeze", &h, rebound, false, true).is_ok());
        for ok in [
            "localhost:9901",
            "LOCALHOST",
            "a.localhost:1",
            "127.0.0.2:80",
            "[::1]:9901",
        ] {
            assert!(
                check(
                    &Method::GET,
                    "/admin/v1/escrow",
                    &HeaderMap::new(),
                    Some(ok),
                    false,
                    false
                )
                .is_ok(),
                "{ok}"
            );
        }
        for bad in [
            "10.0.0.1:9901",
            "localhost.evil.example",
            "[::2]:1",
            "",
            "127.0.0.1:x",
        ] {
            assert!(
                check(
                    &Method::GET,
                    "/admin/v1/escrow",
                    &HeaderMap::new(),
                    Some(bad),
                    false,
                    false
                )
                .is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn probes_and_console_pages_stay_open() {
        let h = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://evil.example"),
        ]);
        for path in ["/healthz", "/readyz", "/metrics", "/ui/", "/ui/console.js"] {
            assert!(
                check(&Method::GET, path, &h, Some("10.1.2.3:9901"), false, false).is_ok(),
                "{path}"
            );
        }
        assert!(check(
            &Method::POST,
            "/healthz",
            &h,
            Some("127.0.0.1"),
            false,
            false
        )
        .is_err());
    }
}
