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
    let pq = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/");
    let uri = upstream.uri_for(pq)?;
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned)
        .or_else(|| parts.uri.authority().map(|a| a.to_string()));
    headers::strip_hop_by_hop(&mut parts.headers);
    for name in headers::PTCL_REQUEST_HEADERS
        .iter()
        .chain(headers::SIDECAR_OWNED.iter())
    {
        parts.headers.remove(*name);
    }
    if let Some(epoch) = fence {
        parts
            .headers
            .insert(headers::FENCE_HEADER, http::HeaderValue::from(epoch));
    }
    headers::append_forwarded(
        &mut parts.headers,
        conn.peer,
        if conn.tls { "https" } else { "http" },
        host.as_deref(),
    );
    if let Some(h) = host.as_deref().and_then(|h| HeaderValue::from_str(h).ok()) {
        parts.headers.insert(header::HOST, h);
    }
    parts.uri = uri;
    parts.version = Version::HTTP_11;
    Ok(Request::from_parts(parts, body))
}
