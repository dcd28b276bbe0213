//! A read addressed to a connection's source (issue 37): the query mapped onto the legacy
//! read the SoR serves, and its answer mapped back.
//!
//! ```text
//! source structural.parameters (checked by the SoR stage)
//!   → the query as an object (declared names typed) → request connector → the target's query
//!   → target structural.parameters → GET the target's path (parameters carried by name)
//!   → the target's output contract, under the target binding's policy (SPEC §7)
//!   → 2xx: response connector → source structural.output → the agent
//! ```
//!
//! A request that cannot be mapped reaches no one: 422 with a rejection receipt naming both
//! contracts and the connector, and a drift event. An answer that cannot be mapped is 502
//! under `fail-closed` (receipt, drift event) and passed on unmapped under `notify`.

use std::sync::Arc;

use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::{connections, Bundle, Capability, Connection};

use super::connect::{self, map_answer, mapped, reference, Unmapped};
use crate::context::{Binding, Plane, WriteContext};
use crate::enforce::forward::forward_plain;
use crate::enforce::output;
use crate::enforce::own::{forwarded, Own, Staged};
use crate::enforce::receipts::{self, Evidence};
use crate::net::body;
use crate::net::conn::ConnInfo;

/// A read on a connection's source (`index`, whose connection is a read's). The agent's
/// body, if any, is refused by its headers and never read.
pub(super) async fn read(
    plane: &Arc<Plane>,
    conn_info: &Arc<ConnInfo>,
    parts: http::request::Parts,
    bundle: &Arc<Bundle>,
    index: usize,
    cx: &mut WriteContext,
) -> Staged {
    let found = bundle
        .connection_of(index)
        .filter(|c| c.read)
        .and_then(|c| {
            let source = bundle.capabilities.get(c.source)?;
            let target = bundle.capabilities.get(c.target)?;
            Some((c, source, target))
        });
    let Some((conn, source, target)) = found else {
        let refusal = Refusal::new(
            ErrorCode::Internal,
            "the read's connection is not in the bundle",
        );
        return Err(
            receipts::record(plane.recorder(), refusal, cx, Evidence::default())
                .await
                .into(),
        );
    };
    cx.connector = Some(reference(conn, source, target));
    // The agent's request, as the receipts of its refusals name it.
    let source_cx = cx.clone();
    let mut parts = parts;
    let mapped_query = map_query(conn, source, target, &parts);
    let (path, query) = match mapped_query {
        Ok(m) => m,
        Err(refusal) => {
            let pq = parts.uri.path_and_query().map_or("", |p| p.as_str());
            let evidence = Evidence {
                body: Some(pq.as_bytes()),
                ..Evidence::default()
            };
            return Err(receipts::record(plane.recorder(), refusal, cx, evidence)
                .await
                .into());
        }
    };
    readdress(&mut parts, &path, query.as_deref());
    // The legacy read, under the legacy binding: its output contract and drift policy.
    cx.bind(Some(bundle), &Binding::Bound(target));
    let resp = forward_plain(plane, parts, body::empty(), conn_info, cx, None).await?;
    // The sidecar's refusal of the legacy answer replaces it; the request was forwarded.
    let checked = output::check(plane, target, cx, resp, None).await;
    let resp = checked.map_err(Own::replacing)?;
    let Some(connector) = conn.response.as_deref() else {
        return Ok(forwarded(resp));
    };
    if !resp.status().is_success() {
        // The SoR's error domain: as it is.
        return Ok(forwarded(resp));
    }
    let (head, body) = resp.into_parts();
    let bytes = connect::collect_answer(plane, body, &source_cx).await?;
    match map_answer(plane, connector, source, &bytes) {
        Ok(out) => Ok(forwarded(mapped(head, out))),
        Err(refusal) => {
            let unmapped = Unmapped {
                conn,
                connector,
                head,
                bytes,
                commit: None,
            };
            unmapped
                .answer(plane, refusal, &source_cx)
                .await
                .map(forwarded)
        }
    }
}

/// The source's query through the request connector, checked as the target's: the target's
/// path and query.
fn map_query(
    conn: &Connection,
    source: &Capability,
    target: &Capability,
    parts: &http::request::Parts,
) -> Result<(String, Option<String>), Refusal> {
    if carries_body(&parts.headers) {
        // The read's contract takes its input from the query: a body is input it does not
        // describe, and the connector would drop it unseen.
        return Err(Refusal::new(
            ErrorCode::ContractInput,
            "a read on a connection carries no body: its connector maps the query",
        )
        .with_location(""));
    }
    let path = connections::target_path(&source.operation, &target.operation, parts.uri.path())
        .ok_or_else(|| Refusal::new(ErrorCode::Internal, "the target path could not be formed"))?;
    let input = palisade_rich::query_input(source, parts.uri.query())?;
    let out = conn.request.run(&input).map_err(Refusal::from)?;
    let query = palisade_rich::parameters::query_string(&out)?;
    // The mapped request against the legacy contract's parameters, before it is sent.
    let headers = crate::net::headers::values(&parts.headers);
    palisade_rich::check_parameters(target, &path, query.as_deref(), &headers).map_err(|r| {
        let location = r.location.clone().unwrap_or_default();
        Refusal::new(
            ErrorCode::ConnectorPostcondition,
            format!(
                "the mapped request violates the target contract's structural.parameters: {}",
                r.detail
            ),
        )
        .with_location(location)
    })?;
    Ok((path, query))
}

/// Whether the request says it has a body (a length other than 0, or any transfer coding).
fn carries_body(headers: &http::HeaderMap) -> bool {
    headers.contains_key(http::header::TRANSFER_ENCODING)
        || headers
            .get_all(http::header::CONTENT_LENGTH)
            .iter()
            .any(|v| v.as_bytes() != b"0")
}

/// Points the read at the target: its path and the mapped query, no body.
fn readdress(parts: &mut http::request::Parts, path: &str, query: Option<&str>) {
    let pq = match query {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    connect::retarget(parts, &pq);
}
