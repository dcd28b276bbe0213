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
    })
}
