//! Output contracts (SPEC §7, RICH §11.2/§14.2): a bound operation's successful response body
//! against its `structural.output`, and the binding's `onDrift` policy when it does not match.
//!
//! ```text
//! 2xx from upstream, contract has an output schema
//!   → buffer (≤ limits.max_response, else 502 ERR_RESPONSE_TOO_LARGE) → I-JSON → schema
//!   → matches: the response as it was
//!   → does not: drift event (structural, with the location and the body's digest), then
//!       fail-closed         502 ERR_CONTRACT_OUTPUT (+ rejection receipt)
//!       quarantine          body → quarantine_dir/<evidence hex> (0600), then as fail-closed
//!       qualified-fallback  reads and idempotent operations: the same request to
//!                           runtime.fallback, whose answer is returned; others as fail-closed
//!       notify              the response as it was
//! ```

use bytes::Bytes;
use http::{HeaderValue, Response};
use palisade_policy::digest::{Sha256Digest, Spelling};
use palisade_policy::drift::{Action, DriftEvent, EventContext};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::{Capability, DriftPolicy, SideEffect};

use crate::context::Plane;
use crate::context::WriteContext;
use crate::enforce::own::Own;
use crate::enforce::receipts::Refused;
use crate::net::body::{self, CollectError, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::problem::{Failure, Fault, Purpose};
use crate::net::rewrite;

/// What the fallback needs to send the request again: a copy of its head ([`copy_head`]),
/// its buffered body.
pub(crate) struct Retry<'a> {
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub conn: &'a ConnInfo,
}

/// Method, URI and headers of a request (`Parts` cannot be cloned: its extensions may not be).
pub(crate) fn copy_head(parts: &http::request::Parts) -> Option<http::request::Parts> {
    let mut b = http::Request::builder()
        .method(parts.method.clone())
        .uri(parts.uri.clone());
    if let Some(h) = b.headers_mut() {
        h.clone_from(&parts.headers);
    }
    b.body(()).ok().map(|r| r.into_parts().0)
}

/// Applies `cap`'s output contract to `resp`. `retry` is `None` when the request cannot be
/// sent again (its body was streamed).
pub(crate) async fn check(
    plane: &Plane,
    cap: &Capability,
    cx: &WriteContext,
    resp: Response<ProxyBody>,
    retry: Option<Retry<'_>>,
) -> Result<Response<ProxyBody>, Own> {
    let Some(schema) = &cap.contract.output else {
        return Ok(resp);
    };
    if !resp.status().is_success() {
        return Ok(resp);
    }
    let (parts, body) = resp.into_parts();
    let bytes = match body::collect_proxy(body, plane.config.limits.max_response).await {
        Ok(b) => b,
        Err(e) => {
            let failure = match e {
                CollectError::TooLarge(_) => Failure::ResponseTooLarge(Purpose::Checked),
                CollectError::Read(_) => Failure::Upstream(Fault::Broken),
            };
            return Err(Own::failed(failure, &cx.trace_id));
        }
    };
    let verdict = match palisade_policy::json::parse(&bytes, plane.config.limits.max_json_depth) {
        Err(_) => Err(String::new()),
        Ok(v) => schema.check(&v).map_err(|v| v.instance_location),
    };
    let location = match verdict {
        Ok(()) => return Ok(Response::from_parts(parts, body::full(bytes))),
        Err(location) => location,
    };
    let readish = matches!(
        cap.contract.side_effect,
        SideEffect::Read | SideEffect::Idempotent
    );
    let action = match cap.runtime.on_drift {
        DriftPolicy::Notify => Action::Notify,
        DriftPolicy::Quarantine => Action::Quarantined,
        DriftPolicy::QualifiedFallback if readish && retry.is_some() => Action::Fallback,
        DriftPolicy::FailClosed | DriftPolicy::QualifiedFallback => Action::Blocked,
    };
    let refusal = Refusal::new(
        ErrorCode::ContractOutput,
        "the upstream response violates structural.output",
    )
    .with_location(location.clone());
    report(plane, &refusal, cx, action, Observed::payload(&bytes));
    let blocked = || async { Err(Own::from(blocked(plane, refusal, cx).await)) };
    match action {
        Action::Notify => Ok(Response::from_parts(parts, body::full(bytes))),
        Action::Fallback => match (retry, &cap.runtime.fallback) {
            (Some(r), Some(base)) => fallback(plane, base, r, cx).await,
            _ => blocked().await,
        },
        Action::Quarantined => {
            quarantine(plane, &bytes);
            blocked().await
        }
        Action::Blocked => blocked().await,
    }
}

/// What a drift event reports beyond the refusal and the request's context.
pub(crate) struct Observed {
    /// `observedIdentifier`; `None`: the operation.
    pub identifier: Option<String>,
    /// `expectedDigest`; `None`: the bound contract's digest.
    pub expected: Option<String>,
    /// The offending payload (only its digest leaves).
    pub evidence: Vec<u8>,
    pub diagnostics: Vec<(&'static str, String)>,
}

impl Observed {
    /// An offending payload, named by the operation and the contract.
    pub fn payload(evidence: &[u8]) -> Self {
        Self {
            identifier: None,
            expected: None,
            evidence: evidence.to_vec(),
            diagnostics: Vec::new(),
        }
    }
}

/// The drift event and refusal count of a violation that no lease check caught: an output
/// contract, the upstream's identity, a tool definition (SPEC §8).
pub(crate) fn report(
    plane: &Plane,
    refusal: &Refusal,
    cx: &WriteContext,
    action: Action,
    observed: Observed,
) {
    plane.metrics.refusal(refusal.code);
    let Some(enf) = &plane.enforcement else {
        return;
    };
    if let Some(mut event) = DriftEvent::for_refusal(
        refusal,
        EventContext {
            event_id: uuid::Uuid::now_v7().to_string(),
            timestamp: enf.now_rfc3339(),
            trace_id: cx.trace_id.to_string(),
            binding_id: cx.binding_id.clone(),
            observed_identifier: Some(observed.identifier.unwrap_or_else(|| cx.operation.clone())),
            expected_digest: observed.expected.or_else(|| cx.contract_digest.clone()),
            evidence: Some(observed.evidence),
            caller: cx.caller.clone(),
        },
    ) {
        event.action_taken = action;
        for (k, v) in observed.diagnostics {
            event.diagnostics.insert(k.into(), v.into());
        }
        enf.drift.emit(&event);
    }
}

/// Keeps `bytes` for offline inspection: `drift.quarantine_dir/<hex SHA-256>`, mode 0600.
pub(crate) fn quarantine(plane: &Plane, bytes: &[u8]) {
    let digest = Sha256Digest::of(bytes);
    let path = plane.config.quarantine_dir.join(digest.to_hex());
    let written = std::fs::create_dir_all(&plane.config.quarantine_dir)
        .and_then(|()| crate::fs::write_private_file(&path, bytes));
    match written {
        Err(e) => tracing::error!(error = %e, path = %path.display(), "quarantine write failed"),
        Ok(()) => {
            tracing::warn!(evidence = %digest.spelled(Spelling::ShaDash256), "payload quarantined")
        }
    }
}

/// A refusal of a request that holds no lease (502 `ERR_CONTRACT_OUTPUT`,
/// `ERR_DEPLOYMENT_IDENTITY`), its rejection receipt stored; the caller counted it and
/// emitted its drift event ([`report`]).
pub(crate) async fn blocked(plane: &Plane, refusal: Refusal, cx: &WriteContext) -> Refused {
    let mut refused = Refused::answered(refusal, &cx.trace_id);
    if let Some(enf) = &plane.enforcement {
        let body = ReceiptBody {
            method: Some(cx.method.to_string()),
            operation: cx.operation_key.clone(),
            code: Some(refused.code().as_str().to_owned()),
            trace_id: Some(cx.trace_id.to_string()),
            lockfile_digest: cx.lockfile_digest.clone(),
            rules_digest: cx.rules_digest.clone(),
            caller: cx.caller.clone(),
            connector: cx.connector.clone(),
            attribution: cx.attribution.clone(),
            ..ReceiptBody::new(
                format!("urn:uuid:{}", uuid::Uuid::new_v4()),
                ReceiptKind::Rejection,
                enf.now_rfc3339(),
            )
        };
        match enf.seal_plain(body).await {
            Ok(sealed) => refused.receipt = Some(sealed.value),
            Err(e) => tracing::error!(error = %e, "rejection receipt not stored"),
        }
    }
    refused
}

/// The request again, to the pre-qualified backup deployment.
pub(crate) async fn fallback(
    plane: &Plane,
    base: &str,
    r: Retry<'_>,
    cx: &WriteContext,
) -> Result<Response<ProxyBody>, Own> {
    let failed = || Own::failed(Failure::FallbackDown, &cx.trace_id);
    let Ok(uri) = base.parse::<http::Uri>() else {
        return Err(failed());
    };
    let upstream = crate::net::upstream::Upstream::with_base(
        uri,
        plane.config.upstream.connect_timeout,
        plane.config.upstream.timeout,
        plane.config.upstream.ca.as_deref(),
    )
    .map_err(|_| failed())?;
    let req = rewrite::build_upstream_request(&upstream, r.parts, body::full(r.body), r.conn, None)
        .map_err(|_| failed())?;
    match upstream.send(req).await {
        Ok(resp) => {
            let mut resp = crate::net::upstream::downstream(resp);
            resp.headers_mut()
                .insert("agent-fallback", HeaderValue::from_static("1"));
            Ok(resp)
        }
        Err(e) => {
            tracing::warn!(error = %e, "fallback deployment failed");
            Err(failed())
        }
    }
}
