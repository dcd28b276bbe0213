//! A request sent upstream as it is, without write enforcement: reads, unenforced writes,
//! reads bound as side-effect free. Not a stage: the last step of the paths that need no
//! permit. Fenced reads get `Agent-Fence-Token`; an identity mismatch is reported.

use http::{HeaderValue, Response};

use crate::context::{Plane, WriteContext};
use crate::enforce::identity;
use crate::enforce::own::Own;
use crate::net::body::ProxyBody;
use crate::net::conn::ConnInfo;
use crate::net::headers::{self};
use crate::net::problem::Failure;
use crate::net::rewrite::build_upstream_request;
use crate::net::upstream::UpstreamError;
use tokio::time::Instant;

/// Sends a request upstream as it is (no enforcement) and streams the answer back. A read of
/// a fenced resource (`fenced_read`: its resource key) gets `Agent-Fence-Token`.
pub(crate) async fn forward_plain(
    plane: &Plane,
    parts: http::request::Parts,
    body: ProxyBody,
    conn: &ConnInfo,
    cx: &WriteContext,
    fenced_read: Option<String>,
) -> Result<Response<ProxyBody>, Own> {
    let trace_id = &*cx.trace_id;
    let bound = conn.bound_for(parts.version);
    let upstream_req = match build_upstream_request(&plane.upstream, parts, body, conn, None) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "request target not forwardable");
            return Err(Own::failed(Failure::NotForwardable, &cx.trace_id));
        }
    };
    let sent_at = Instant::now();
    let identity = cx.identity.as_deref();
    let send = |req| crate::net::bound::send_on(&plane.upstream, req, identity, bound);
    let result = crate::telemetry::otlp::upstream::call(upstream_req, send).await;
    plane
        .metrics
        .upstream_duration
        .record(sent_at.elapsed().as_secs_f64());
    match result {
        Ok(resp) => {
            let mut resp = crate::net::upstream::downstream(resp);
            if let (Some(resource), Some(enf)) = (fenced_read, &plane.enforcement) {
                // A store that cannot answer costs the read nothing but this header.
                if let Ok(epoch @ 1..) = enf.store.epoch(&resource).await {
                    resp.headers_mut()
                        .insert(headers::FENCE_HEADER, HeaderValue::from(epoch));
                }
            }
            Ok(resp)
        }
        Err(UpstreamError::Identity(m)) => {
            tracing::warn!(error = %m, trace_id = %trace_id, "upstream identity refused");
            Err(Own::from(identity::refused(plane, cx, &m).await))
        }
        Err(e) => {
            // The full error goes to the log; the client learns only the code (STYLE §2).
            tracing::warn!(error = %e, trace_id = %trace_id, "upstream failure");
            Err(Own::failed(Failure::upstream(&e), &cx.trace_id))
        }
    }
}
