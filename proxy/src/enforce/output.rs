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

use crate::context::AppState;
use crate::context::WriteContext;
use crate::enforce::receipts;
use crate::net::body::{self, CollectError, ProxyBody};
use crate::net::conn::ConnInfo;
use crate::net::headers;
use crate::net::problem::Problem;
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

fn problem(code: ErrorCode, detail: &str, cx: &WriteContext) -> Problem {
    Problem::answer(code, detail, &cx.trace_id)
}

/// Applies `cap`'s output contract to `resp`. `retry` is `None` when the request cannot be
/// sent again (its body was streamed).
pub(crate) async fn check(
    state: &AppState,
    cap: &Capability,
    cx: &WriteContext,
    resp: Response<ProxyBody>,
    retry: Option<Retry<'_>>,
) -> Response<ProxyBody> {
    let Some(schema) = &cap.contract.output else {
        return resp;
    };
    if !resp.status().is_success() {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let bytes = match body::collect_proxy(body, state.config.limits.max_response).await {
        Ok(b) => b,
        Err(CollectError::TooLarge(_)) => {
            return problem(
                ErrorCode::ResponseTooLarge,
                "the upstream response exceeds limits.max_response and cannot be checked",
                cx,
            )
            .into_response()
        }
        Err(CollectError::Read(_)) => {
            return problem(
                ErrorCode::UpstreamUnavailable,
                "the upstream connection failed",
                cx,
            )
            .into_response()
        }
    };
    let verdict = match palisade_policy::json::parse(&bytes, state.config.limits.max_json_depth) {
        Err(_) => Err(String::new()),
        Ok(v) => schema.check(&v).map_err(|v| v.instance_location),
    };
    let location = match verdict {
        Ok(()) => return Response::from_parts(parts, body::full(bytes)),
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
    report(state, &refusal, cx, action, Observed::payload(&bytes));
    match action {
        Action::Notify => Response::from_parts(parts, body::full(bytes)),
        Action::Fallback => match (retry, &cap.runtime.fallback) {
            (Some(r), Some(base)) => fallback(state, base, r, cx).await,
            _ => blocked(state, &refusal, cx).await,
        },
        Action::Quarantined => {
            quarantine(state, &bytes);
            blocked(state, &refusal, cx).await
        }
        Action::Blocked => blocked(state, &refusal, cx).await,
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
    state: &AppState,
    refusal: &Refusal,
    cx: &WriteContext,
    action: Action,
    observed: Observed,
) {
    state.metrics.refusal(refusal.code);
    let Some(enf) = &state.enforcement else {
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
pub(crate) fn quarantine(state: &AppState, bytes: &[u8]) {
    let digest = Sha256Digest::of(bytes);
    let path = state.config.quarantine_dir.join(digest.to_hex());
    let written = std::fs::create_dir_all(&state.config.quarantine_dir)
        .and_then(|()| crate::fs::write_private_file(&path, bytes));
    match written {
        Err(e) => tracing::error!(error = %e, path = %path.display(), "quarantine write failed"),
        Ok(()) => {
            tracing::warn!(evidence = %digest.spelled(Spelling::ShaDash256), "payload quarantined")
        }
    }
}

/// A refusal of a request that holds no lease (502 `ERR_CONTRACT_OUTPUT`,
/// `ERR_DEPLOYMENT_IDENTITY`): problem+json with a rejection receipt. The caller emits the
/// drift event.
pub(crate) async fn blocked(
    state: &AppState,
    refusal: &Refusal,
    cx: &WriteContext,
) -> Response<ProxyBody> {
    with_receipt_header(blocked_problem(state, refusal, cx).await)
}

/// A problem as a response, its `receipt` member also in `Agent-Commit-Receipt`.
pub(crate) fn with_receipt_header(p: Problem) -> Response<ProxyBody> {
    let receipt = p
        .extensions
        .get("receipt")
        .and_then(receipts::receipt_header_value);
    let mut resp = p.into_response();
    if let Some(v) = receipt {
        resp.headers_mut().insert(headers::RECEIPT_HEADER, v);
    }
    resp
}

/// The problem of [`blocked`], its rejection receipt stored and carried as `receipt`.
pub(crate) async fn blocked_problem(
    state: &AppState,
    refusal: &Refusal,
    cx: &WriteContext,
) -> Problem {
    let mut p = Problem::of_refusal(refusal, &cx.trace_id);
    if let Some(enf) = &state.enforcement {
        let body = ReceiptBody {
            method: Some(cx.method.to_string()),
            code: Some(refusal.code.as_str().to_owned()),
            trace_id: Some(cx.trace_id.to_string()),
            lockfile_digest: cx.lockfile_digest.clone(),
            caller: cx.caller.clone(),
            connector: cx.connector.clone(),
            attribution: cx.attribution.clone(),
            ..ReceiptBody::new(
                format!("urn:uuid:{}", uuid::Uuid::new_v4()),
                ReceiptKind::Rejection,
                enf.now_rfc3339(),
            )
        };
        match enf.store.append_receipt(body).await {
            Ok(sealed) => {
                p.extensions.insert("receipt".into(), sealed.value);
            }
            Err(e) => tracing::error!(error = %e, "rejection receipt not stored"),
        }
    }
    p
}

/// The request again, to the pre-qualified backup deployment.
pub(crate) async fn fallback(
    state: &AppState,
    base: &str,
    r: Retry<'_>,
    cx: &WriteContext,
) -> Response<ProxyBody> {
    let failed = || {
        problem(
            ErrorCode::UpstreamUnavailable,
            "the fallback deployment did not answer",
            cx,
        )
        .into_response()
    };
    let Ok(uri) = base.parse::<http::Uri>() else {
        return failed();
    };
    let upstream = match crate::net::upstream::Upstream::with_base(
        uri,
        state.config.upstream.connect_timeout,
        state.config.upstream.timeout,
        state.config.upstream.ca.as_deref(),
    ) {
        Ok(u) => u,
        Err(_) => return failed(),
    };
    let Ok(req) =
        rewrite::build_upstream_request(&upstream, r.parts, body::full(r.body), r.conn, None)
    else {
        return failed();
    };
    match upstream.send(req).await {
        Ok(resp) => {
            let mut resp = crate::net::upstream::downstream(resp);
            resp.headers_mut()
                .insert("agent-fallback", HeaderValue::from_static("1"));
            resp
        }
        Err(e) => {
            tracing::warn!(error = %e, "fallback deployment failed");
            failed()
        }
    }
}
