//! RICH connections on the data plane (RICH §3.2, §11.2; issue 23): a write addressed to an
//! agent-facing capability whose lockfile connection maps it onto the legacy operation the
//! SoR serves.
//!
//! ```text
//! request:  source structural.input → request connector (pre, transform, post)
//!           → target structural.input → the target's method and path, the mapped body
//!           → the enforced write path, on the request the SoR will receive
//! response: (target structural.output, checked by the write path under the target binding's
//!           policy) → committed 2xx → response connector → source structural.output
//! ```
//!
//! Every refusal is receipted (the receipt's `connector` member names both contracts and the
//! connector) and leaves a drift event whose `expectedDigest` is the connector's. A request
//! that cannot be mapped is refused whatever the connection's policy: there is nothing to
//! send. A response that cannot be mapped is refused (502) under `fail-closed`, and passed on
//! unmapped under `notify`; the write itself has happened either way, so the refusal carries
//! the commit receipt.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderValue, Method, Response};
use palisade_policy::drift::Action;
use palisade_policy::receipt::ConnectorRef;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::connector::Connector;
use palisade_rich::{connections, Bundle, Capability, Connection, DriftPolicy};
use serde_json::Value;

use crate::context::{Binding, Plane, Routed, WriteContext};
use crate::enforce::output::{self, Observed};
use crate::enforce::own::Own;
use crate::enforce::receipts;
use crate::enforce::written::Written;
use crate::net::body::{self, CollectError, ProxyBody};

/// Headers that describe the body as the agent sent it, and are wrong once it is mapped.
const BODY_HEADERS: [&str; 4] = [
    "content-length",
    "transfer-encoding",
    "content-digest",
    "repr-digest",
];

/// What the response needs to be mapped back.
pub(super) struct Back {
    bundle: Arc<Bundle>,
    /// The source capability's index in the bundle.
    source: usize,
}

/// The write as routed before any mapping.
pub(super) struct Source<'a> {
    pub bundle: Option<&'a Arc<Bundle>>,
    pub routed: Routed,
}

/// Maps a write addressed to a connection's source: `parsed` is its body as the SoR stage
/// parsed it (`None`: not I-JSON), `bytes` the same as sent, a refusal's evidence. `Ok(None)`:
/// no connection; the request is unchanged. `Ok(Some)`: `parts` now address the target, the
/// [`Mapped`] body is its body, and the write is routed to the target capability.
pub(super) async fn request(
    plane: &Plane,
    from: Source<'_>,
    parts: &mut http::request::Parts,
    bytes: &Bytes,
    parsed: Option<&Value>,
    cx: &mut WriteContext,
) -> Result<Option<Mapped>, Own> {
    let Some(bundle) = from.bundle.filter(|b| !b.connections.is_empty()) else {
        return Ok(None);
    };
    let Routed::Bound(index) = from.routed else {
        return Ok(None);
    };
    let Some(conn) = bundle.connection_of(index) else {
        return Ok(None);
    };
    let (Some(source), Some(target)) = (
        bundle.capabilities.get(index),
        bundle.capabilities.get(conn.target),
    ) else {
        return Ok(None);
    };
    cx.bind(Some(bundle), &Binding::Bound(source));
    cx.connector = Some(reference(conn, source, target));
    cx.facing = Some(source.operation.clone());
    let path = connections::target_path(&source.operation, &target.operation, parts.uri.path())
        .ok_or_else(|| Refusal::new(ErrorCode::Internal, "the target path could not be formed"));
    let params = palisade_rich::check_parameters(
        source,
        parts.uri.path(),
        parts.uri.query(),
        &crate::net::headers::values(&parts.headers),
    );
    let mapped = params
        .and(path)
        .and_then(|p| Ok((p, map_request(conn, source, target, parsed)?)));
    let (path, mapped) = match mapped {
        Ok(m) => m,
        Err(refusal) => {
            let lease = receipts::carried_lease(&parts.headers);
            let evidence = receipts::Evidence {
                lease: lease.as_deref(),
                body: Some(bytes),
                ..receipts::Evidence::default()
            };
            return Err(receipts::record(plane.recorder(), refusal, cx, evidence)
                .await
                .into());
        }
    };
    let (input, bytes) = mapped;
    readdress(parts, &target.operation, &path, bytes.len());
    let back = Back {
        bundle: bundle.clone(),
        source: conn.source,
    };
    Ok(Some(Mapped {
        bytes,
        input,
        back,
        target: Routed::Bound(conn.target),
    }))
}

/// A request a connection mapped onto its target operation.
pub(super) struct Mapped {
    /// The target's body, and the same as a value (what check 9 reads).
    pub bytes: Bytes,
    pub input: Value,
    /// How its answer is mapped back.
    pub back: Back,
    pub target: Routed,
}

pub(super) fn reference(
    conn: &Connection,
    source: &Capability,
    target: &Capability,
) -> ConnectorRef {
    ConnectorRef {
        source_contract_digest: source.contract.digest.clone(),
        target_contract_digest: target.contract.digest.clone(),
        connector_digest: conn.request.digest.clone(),
        response_connector_digest: conn.response.as_ref().map(|c| c.digest.clone()),
    }
}

/// Source input → connector → target input: the mapped body, as a value and as bytes. The
/// body was parsed once by the SoR stage (`None`: it is not I-JSON); the source contract and
/// the connector read the same tree.
fn map_request(
    conn: &Connection,
    source: &Capability,
    target: &Capability,
    parsed: Option<&Value>,
) -> Result<(Value, Bytes), Refusal> {
    let input = parsed.ok_or_else(|| {
        Refusal::new(
            ErrorCode::ContractInput,
            "the request body is not I-JSON, and the operation's connector maps JSON",
        )
        .with_location("")
    })?;
    palisade_rich::check_input_value(&source.contract, input)?;
    let out = conn.request.run(input).map_err(Refusal::from)?;
    palisade_rich::check_mapped_input(&target.contract, &out)?;
    let bytes = serde_json::to_vec(&out)
        .map(Bytes::from)
        .map_err(|_| Refusal::new(ErrorCode::Internal, "the mapped body could not be written"))?;
    Ok((out, bytes))
}

/// Points the request at the target operation: its method, `path` with the query kept, and
/// the headers of the new body.
fn readdress(parts: &mut http::request::Parts, target_op: &str, path: &str, len: usize) {
    if let Some(m) = target_op
        .split_once(' ')
        .and_then(|(m, _)| Method::from_bytes(m.as_bytes()).ok())
    {
        parts.method = m;
    }
    let pq = match parts.uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    retarget(parts, &pq);
    parts
        .headers
        .insert(http::header::CONTENT_LENGTH, HeaderValue::from(len));
}

/// Points the request at `pq` (origin form) and drops the headers of the body it had.
pub(super) fn retarget(parts: &mut http::request::Parts, pq: &str) {
    let mut uri = std::mem::take(&mut parts.uri).into_parts();
    uri.path_and_query = pq.parse().ok();
    parts.uri = http::Uri::from_parts(uri).unwrap_or_else(|_| http::Uri::from_static("/"));
    for h in BODY_HEADERS {
        parts.headers.remove(h);
    }
}

/// Maps a committed answer back: the response connector, then the source's output contract
/// (the target's was applied by the write path). Only complete (2xx) answers are mapped; an
/// error answer is the SoR's error domain and passes as it is.
pub(super) async fn response(
    plane: &Plane,
    back: Back,
    cx: &WriteContext,
    written: Written,
) -> Result<Response<ProxyBody>, Own> {
    let Written { resp, receipt, .. } = written;
    let bundle = &back.bundle;
    let Some(conn) = bundle.connection_of(back.source) else {
        return Ok(resp);
    };
    let (Some(connector), true) = (&conn.response, resp.status().is_success()) else {
        return Ok(resp);
    };
    // Only the SoR's own answer is mapped: a dry run's or an escrow hold's 2xx is the
    // sidecar's (its receipt says which), and an idempotent replay carries the commit's.
    let commit = receipt.filter(|r| r["receipt"]["kind"] == "commit");
    let Some(commit) = commit else {
        return Ok(resp);
    };
    let source = &bundle.capabilities[conn.source];
    let (head, body) = resp.into_parts();
    let bytes = collect_answer(plane, body, cx).await?;
    // The target's output contract has been applied by the write path already (under the
    // target binding's own drift policy); what is left is the mapping.
    match map_answer(plane, connector, source, &bytes) {
        Ok(out) => Ok(mapped(head, out)),
        Err(refusal) => {
            let unmapped = Unmapped {
                conn,
                connector,
                head,
                bytes,
                commit: Some(commit),
            };
            unmapped.answer(plane, refusal, cx).await
        }
    }
}

/// The answer's body, whole (≤ `limits.max_response`), or the refusal that it cannot be.
pub(super) async fn collect_answer(
    plane: &Plane,
    body: ProxyBody,
    cx: &WriteContext,
) -> Result<Bytes, Own> {
    let refusal = match body::collect_proxy(body, plane.config.limits.max_response).await {
        Ok(b) => return Ok(b),
        Err(CollectError::TooLarge(_)) => Refusal::new(
            ErrorCode::ResponseTooLarge,
            "the upstream response exceeds limits.max_response and cannot be mapped",
        ),
        Err(CollectError::Read(_)) => Refusal::new(
            ErrorCode::UpstreamUnavailable,
            "the upstream connection failed",
        ),
    };
    Err(output::blocked(plane, refusal, cx).await.into())
}

/// The answer through the response connector and the source contract's `structural.output`:
/// the mapped body, or why it cannot be (502).
pub(super) fn map_answer(
    plane: &Plane,
    connector: &Connector,
    source: &Capability,
    bytes: &[u8],
) -> Result<Bytes, Refusal> {
    let depth = plane.config.limits.max_json_depth;
    palisade_policy::json::parse(bytes, depth)
        .map_err(|_| {
            Refusal::new(
                ErrorCode::ConnectorFailed,
                "the upstream response is not I-JSON, and the response connector maps JSON",
            )
            .with_location("")
        })
        .and_then(|v| {
            let out = connector.run(&v).map_err(Refusal::from)?;
            palisade_rich::check_mapped_output(&source.contract, &out, "")?;
            serde_json::to_vec(&out).map(Bytes::from).map_err(|_| {
                Refusal::new(ErrorCode::Internal, "the mapped body could not be written")
            })
        })
        .map_err(|r| r.with_status(502))
}

/// The answer's head with the mapped body: headers that described the SoR's body go.
pub(super) fn mapped(mut head: http::response::Parts, out: Bytes) -> Response<ProxyBody> {
    for h in [
        http::header::CONTENT_LENGTH.as_str(),
        "content-digest",
        "repr-digest",
        http::header::ETAG.as_str(),
    ] {
        head.headers.remove(h);
    }
    Response::from_parts(head, body::full(out))
}

/// An answer the response connector could not map.
pub(super) struct Unmapped<'a> {
    pub conn: &'a Connection,
    pub connector: &'a Connector,
    pub head: http::response::Parts,
    pub bytes: Bytes,
    /// A write's commit receipt: the write happened, and the refusal says so.
    pub commit: Option<serde_json::Value>,
}

impl Unmapped<'_> {
    /// Under `notify`, the answer as the SoR gave it, with a drift event; under `fail-closed`,
    /// 502 with a rejection receipt and a drift event.
    pub(super) async fn answer(
        self,
        plane: &Plane,
        refusal: Refusal,
        cx: &WriteContext,
    ) -> Result<Response<ProxyBody>, Own> {
        let Unmapped {
            conn,
            connector,
            head,
            bytes,
            commit,
        } = self;
        let observed = Observed {
            identifier: None,
            expected: Some(connector.digest.clone()),
            evidence: bytes.to_vec(),
            diagnostics: vec![("direction", "response".to_owned())],
        };
        if conn.on_drift == DriftPolicy::Notify {
            output::report(plane, &refusal, cx, Action::Notify, observed);
            return Ok(Response::from_parts(head, body::full(bytes)));
        }
        output::report(plane, &refusal, cx, Action::Blocked, observed);
        let mut extra = vec![("upstream_status".to_owned(), head.status.as_u16().into())];
        if let Some(commit) = commit {
            // The write went through: say so, and hand its commit receipt on.
            extra.push(("commit_receipt".to_owned(), commit));
        }
        let refused = output::blocked(plane, refusal, cx).await.with_extra(extra);
        Err(Own::from(refused))
    }
}
