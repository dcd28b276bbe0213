//! A downstream request made into the upstream request.

use http::{header, HeaderValue, Request, Version};

use crate::net::body::ProxyBody;
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::upstream::Upstream;

/// Rewrites a downstream request for the upstream: its URI, hop-by-hop and PTCL headers,
/// `Host` (kept as the client sent it, as Envoy does), forwarding headers, HTTP/1.1, and the
/// write's fence token (`fence`) when it has one.
///
/// The PTCL headers are removed *after* the hop-by-hop fields and the fence token inserted
/// last: a `Connection` header naming `Agent-Fence-Token` cannot take the sidecar's token
/// away, and no client copy of it survives.
pub(crate) fn build_upstream_request(
    upstream: &Upstream,
    mut parts: http::request::Parts,
    body: ProxyBody,
    conn: &ConnInfo,
    fence: Option<u64>,
) -> Result<Request<ProxyBody>, http::Error> {
    let uri = match parts.uri.path_and_query() {
        Some(pq) => upstream.uri_with(pq.clone())?,
        None => upstream.uri_for("/")?,
    };
    // A clone of the value, not a copy of its bytes: kept apart because a `Connection`
    // header may name `Host`, and the upstream must still get it.
    let host = parts
        .headers
        .get(header::HOST)
        .filter(|h| h.to_str().is_ok())
        .cloned()
        .or_else(|| {
            let a = parts.uri.authority()?;
            HeaderValue::from_str(a.as_str()).ok()
        });
    headers::strip_hop_by_hop(&mut parts.headers);
    headers::remove_named(&mut parts.headers, &headers::PTCL_REQUEST_HEADERS);
    headers::remove_named(&mut parts.headers, &headers::SIDECAR_OWNED);
    if let Some(epoch) = fence {
        parts
            .headers
            .insert(headers::FENCE_HEADER, http::HeaderValue::from(epoch));
    }
    let host_str = host.as_ref().and_then(|h| h.to_str().ok());
    conn.forwarding.append(&mut parts.headers, host_str);
    if let Some(h) = host {
        parts.headers.insert(header::HOST, h);
    }
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}
