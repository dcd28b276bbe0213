//! The first stage: the request put in the one form every later stage decides on and the
//! upstream receives (ARCHITECTURE.md, "Decide on what you forward").
//!
//! ```text
//! method → policy::method::classify      CONNECT/TRACE 405, case variants 400, else read|write
//! path   → policy::path::canonical_path  rewritten in place, or 400 ERR_PATH_NOT_CANONICAL
//! headers: method overrides refused on writes, removed on reads; the client's PTCL response
//!          headers (Agent-Fence-Token, Agent-Commit-Receipt, Agent-Dry-Run) removed;
//!          several `cookie` fields joined into one `Cookie` (RFC 9113 §8.2.3)
//! query  → with `[admission]`, an `access_token` parameter         400 ERR_TOKEN_IN_QUERY
//! ```
//! After this stage `parts.uri` holds the canonical path (and the query as sent), so routing,
//! the lease's target match, the fence and pre-image keys, receipts and the request line sent
//! upstream all read the same value; nothing downstream sees the client's spelling.

use http::uri::{PathAndQuery, Uri};
use http::{header, HeaderMap, HeaderValue, Method};
use palisade_policy::method::{self, MethodClass};
use palisade_policy::path::canonical;
use palisade_policy::{ErrorCode, Refusal};
use std::borrow::Cow;

use crate::config::Config;
use crate::net::headers::{remove_named, SIDECAR_OWNED};

/// Checks the method and headers of a request and rewrites its target to the canonical
/// path. `Err` is the refusal; the request is then answered and goes no further.
/// `enforcing`: write enforcement is on (`ptcl.writes` not empty); off, the sidecar is a
/// plain proxy and leaves method overrides alone (there is no write for them to disguise).
pub(super) fn prepare(
    config: &Config,
    parts: &mut http::request::Parts,
    enforcing: bool,
) -> Result<MethodClass, Refusal> {
    let class = method::classify(parts.method.as_str(), &config.reads, &config.writes)?;
    parts.uri = canonical_uri(&parts.method, &parts.uri)?;
    if enforcing {
        strip_overrides(class, &mut parts.headers)?;
        // With `[admission]`, admission refuses several Authorization fields itself (401
        // ERR_TOKEN_INVALID, with its challenge).
        if config.admission.is_none() {
            single_credential(class, &parts.headers)?;
        }
    }
    // Upstream, these are the sidecar's alone (SPEC §3): the fence token is inserted after
    // hop-by-hop stripping when a write is forwarded; a client's copy never travels on.
    remove_named(&mut parts.headers, &SIDECAR_OWNED);
    check_authority(&parts.uri, &parts.headers)?;
    join_cookies(&mut parts.headers);
    if config.admission.is_some()
        && parts
            .uri
            .query()
            .is_some_and(palisade_rich::admission::token_in_query)
    {
        return Err(Refusal::new(
            ErrorCode::TokenInQuery,
            "an access token is not accepted in the query string (RFC 9700 §2.4.2): send it as Authorization: Bearer",
        ));
    }
    Ok(class)
}

/// A write with two `Authorization` fields is refused (issue 54): the caller is worked out
/// from one (SPEC §14), and the upstream might authenticate the other, so a junk first field
/// would make a frozen or budgeted agent a new caller. RFC 9110 §11.6.2 allows one.
fn single_credential(class: MethodClass, headers: &HeaderMap) -> Result<(), Refusal> {
    if class == MethodClass::Write
        && headers
            .get_all(header::AUTHORIZATION)
            .iter()
            .nth(1)
            .is_some()
    {
        return Err(Refusal::new(
            ErrorCode::BadRequest,
            "a write carries one Authorization field, not several",
        ));
    }
    Ok(())
}

/// A request that names two hosts (HTTP/2 `:authority` and `host`, or an HTTP/1.1
/// absolute-form target and `Host`) is refused: RFC 9113 §8.3.1 says a server SHOULD treat it
/// as malformed, and the lease check, the fence key and the upstream must not be able to read
/// two different hosts off one request (issue 44, docs/decisions.md). Compared without case
/// and without the scheme's default port.
fn check_authority(uri: &Uri, headers: &HeaderMap) -> Result<(), Refusal> {
    let (Some(authority), Some(host)) = (uri.authority(), headers.get(header::HOST)) else {
        return Ok(());
    };
    let default_port = match uri.scheme_str() {
        Some("https") => ":443",
        _ => ":80",
    };
    let bare = |h: &str| -> String {
        let h = h.strip_suffix(default_port).unwrap_or(h);
        h.to_ascii_lowercase()
    };
    let same = host
        .to_str()
        .is_ok_and(|h| bare(h.trim()) == bare(authority.as_str()));
    if same {
        return Ok(());
    }
    Err(Refusal::new(
        ErrorCode::AuthorityMismatch,
        "the Host header names another host than the request target's authority",
    ))
}

/// HTTP/2 lets a client split `cookie` into one field per cookie; before an HTTP/1.1 hop they
/// MUST be joined with `; ` (RFC 9113 §8.2.3). Joined here, at the top, for every version
/// (two `Cookie` lines on HTTP/1.1 break RFC 6265 §5.4 the same way): the pre-image fetch, the
/// idempotency fingerprint and the upstream all see the one header a server that reads only the
/// first `Cookie` line would see (issue 44).
fn join_cookies(headers: &mut HeaderMap) {
    let mut lines = headers.get_all(header::COOKIE).iter();
    if lines.next().is_none() || lines.next().is_none() {
        return;
    }
    let mut joined = Vec::new();
    for line in headers.get_all(header::COOKIE) {
        if !joined.is_empty() {
            joined.extend_from_slice(b"; ");
        }
        joined.extend_from_slice(line.as_bytes());
    }
    // Field values joined by "; " are a field value: this cannot fail, and if it did the
    // request would keep its lines as sent rather than lose a cookie.
    if let Ok(v) = HeaderValue::from_bytes(&joined) {
        headers.insert(header::COOKIE, v);
    }
}

/// The request's URI with its path canonical; the query is kept as sent. `OPTIONS *` is the
/// one request whose target is no path (RFC 9110 §7.1).
pub(super) fn canonical_uri(method: &Method, uri: &Uri) -> Result<Uri, Refusal> {
    let path = match uri.path() {
        "" => "/",
        p => p,
    };
    if path == "*" && method == Method::OPTIONS {
        return Ok(uri.clone());
    }
    let canonical = canonical(path).map_err(|e| {
        tracing::debug!(error = %e, "request path refused");
        Refusal::new(ErrorCode::PathNotCanonical, e.to_string())
    })?;
    let canonical = match canonical {
        // Already canonical, the common case: the URI as it came, nothing allocated.
        Cow::Borrowed(_) => return Ok(uri.clone()),
        Cow::Owned(c) if c == path => return Ok(uri.clone()),
        Cow::Owned(c) => c,
    };
    let pq = match uri.query() {
        Some(q) => format!("{canonical}?{q}"),
        None => canonical,
    };
    let mut p = uri.clone().into_parts();
    p.path_and_query = Some(PathAndQuery::try_from(pq).map_err(|_| {
        Refusal::new(
            ErrorCode::PathNotCanonical,
            "the canonical path is not a valid URI path",
        )
    })?);
    Uri::from_parts(p).map_err(|_| {
        Refusal::new(
            ErrorCode::PathNotCanonical,
            "the request target cannot be rebuilt",
        )
    })
}

/// `X-HTTP-Method-Override` and its relatives: a write carrying one is refused (the
/// application might run the method it names instead of the one checked); on a read they are
/// removed, so no read turns into a write behind the sidecar.
fn strip_overrides(class: MethodClass, headers: &mut HeaderMap) -> Result<(), Refusal> {
    // One scan of the names instead of a parsed lookup per override header (issue 19).
    if !headers
        .keys()
        .any(|k| method::OVERRIDE_HEADERS.contains(&k.as_str()))
    {
        return Ok(());
    }
    for name in method::OVERRIDE_HEADERS {
        if headers.contains_key(name) {
            if class == MethodClass::Write {
                return Err(Refusal::new(
                    ErrorCode::MethodOverride,
                    "a write may not carry a method-override header",
                ));
            }
            headers.remove(name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
