//! Check 12's GET: the resource as the upstream has it now, its digest, and the snapshot
//! SNAPSHOT_RESTORE keeps.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, Request};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::{fence, ErrorCode, Refusal};

use crate::config::Config;
use crate::enforce::permit::Denied;
use crate::net::body::{self};
use crate::net::upstream::Upstream;

/// The resource's representation as fetched for check 12: what SNAPSHOT_RESTORE puts back.
pub(crate) struct State {
    pub digest: Sha256Digest,
    /// `None` when the resource was absent (404/410).
    pub representation: Option<(Option<String>, Bytes)>,
    /// The answer's `ETag`, when it is a strong one (RFC 9110 §8.8.3): `If-Match` compares
    /// strongly, so a weak ETag can never match and is not kept.
    pub etag: Option<http::HeaderValue>,
}

impl State {
    /// `upstream.if_match`: the `If-Match` the write goes with, the fetched strong ETag. An
    /// agent's own `If-Match` must be that ETag (it read another version of the resource);
    /// with no strong ETag the agent's own goes to the SoR unchanged, and nothing is added.
    pub(crate) fn if_match(
        &self,
        request: &http::HeaderMap,
    ) -> Result<Option<http::HeaderValue>, Refusal> {
        let Some(etag) = &self.etag else {
            return Ok(None);
        };
        let theirs: Vec<&http::HeaderValue> = request.get_all(header::IF_MATCH).iter().collect();
        match theirs.as_slice() {
            [] => Ok(Some(etag.clone())),
            [one] if one.as_bytes().trim_ascii() == etag.as_bytes() => Ok(Some(etag.clone())),
            _ => Err(Refusal::new(
                ErrorCode::StalePreImageUpstream,
                "the request's If-Match is not the resource's current ETag: it was read at another version",
            )),
        }
    }
}

/// A strong entity tag as RFC 9110 §8.8.3 writes it: `"…"` with no `W/`, one tag.
fn strong_etag(headers: &http::HeaderMap) -> Option<http::HeaderValue> {
    let mut all = headers.get_all(header::ETAG).iter();
    let v = all.next()?;
    if all.next().is_some() {
        return None;
    }
    let b = v.as_bytes().trim_ascii();
    let opaque = b.strip_prefix(b"\"")?.strip_suffix(b"\"")?;
    // etagc = %x21 / %x23-7E / obs-text: no quote, no space, no control.
    let valid = opaque
        .iter()
        .all(|&c| c == 0x21 || (0x23..=0x7e).contains(&c) || c >= 0x80);
    valid
        .then(|| http::HeaderValue::from_bytes(b).ok())
        .flatten()
}

impl State {
    /// The snapshot as stored: `{"absent":true}` or `{"content_type":…,"body_b64":…}`.
    pub(super) fn snapshot(&self) -> Vec<u8> {
        let doc = match &self.representation {
            None => serde_json::json!({"absent": true}),
            Some((ct, body)) => serde_json::json!({
                "content_type": ct,
                "body_b64": URL_SAFE_NO_PAD.encode(body),
            }),
        };
        serde_json::to_vec(&doc).unwrap_or_default()
    }
}

/// Check 12's GET (and the lease authority's): the resource at `pq` as the upstream has it
/// now, fetched with the caller's `Authorization` and `Cookie`.
pub(crate) async fn fetch_state(
    config: &Config,
    upstream: &Upstream,
    pq: &str,
    headers: &http::HeaderMap,
    identity: Option<&str>,
) -> Result<State, Denied> {
    let unavailable = || {
        Denied::from(Refusal::new(
            ErrorCode::PreimageUnavailable,
            "the upstream did not return the resource's current representation",
        ))
    };
    let uri = upstream.uri_for(pq).map_err(|_| unavailable())?;
    let mut req = Request::get(uri);
    for name in [header::AUTHORIZATION, header::COOKIE, header::HOST] {
        if let Some(v) = headers.get(&name) {
            req = req.header(name, v.clone());
        }
    }
    let req = req.body(body::empty()).map_err(|_| unavailable())?;
    let sent = crate::telemetry::otlp::upstream::call(req, |req| upstream.send_as(req, identity));
    let resp = sent.await.map_err(|e| {
        tracing::warn!(error = %e, "pre-image fetch failed");
        match e {
            // Not the pinned deployment: the write would go to the same peer.
            crate::net::upstream::UpstreamError::Identity(m) => Denied {
                refusal: Refusal::new(
                    ErrorCode::DeploymentIdentity,
                    "the upstream's TLS identity is not the binding's deployment.identity",
                ),
                current_epoch: None,
                peer: Some(m),
                extra: Vec::new(),
            },
            _ => unavailable(),
        }
    })?;
    let status = resp.status().as_u16();
    let etag = strong_etag(resp.headers());
    let content_type = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = body::collect_limited(resp.into_body(), config.limits.max_response)
        .await
        .map_err(|_| unavailable())?;
    let digest = fence::pre_image_digest(
        &fence::Fetched {
            status,
            content_type: content_type.as_deref(),
            body: &bytes,
        },
        config.limits.max_json_depth,
    )?;
    let representation = (!matches!(status, 404 | 410)).then_some((content_type, bytes));
    Ok(State {
        digest,
        representation,
        etag,
    })
}
