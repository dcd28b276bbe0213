//! The MCP server's own tool list, checked against the bundle's pins before a call is
//! forwarded (issue 59): tool pinning otherwise starts with the first `tools/list` a client
//! sends through, and a server changed while the sidecar was down (or restarted) would have
//! its changed tool called before any listing. The first tool call under a bundle that pins
//! tools lists the server's tools itself (one check at a time; the others wait for it) and
//! marks each changed tool as a listing would; a new client session (`initialize`) has the
//! next call check again. A server whose list cannot be read gets no call (fail-closed).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use palisade_policy::{ErrorCode, Refusal};
use serde_json::json;

use super::{client, pinning};
use crate::context::{Drifted, Plane, ToolsChecked, WriteContext};

/// The next tool call checks the server's tools again: a client began a new session, and the
/// server behind it may not be the one last checked.
pub fn forget(checked: &ToolsChecked) {
    // A generation, not the lock: a check under way when a session begins must not count
    // for that session.
    checked.sessions.fetch_add(1, Ordering::SeqCst);
}

/// Checks the server's tools against `bundle` unless they were checked under it already.
/// The request's `Authorization` and `Cookie` go with the listing: the server lists what
/// the caller would see.
pub async fn ensure(
    plane: &Plane,
    (checked, drifted): (&ToolsChecked, &Drifted),
    bundle: Option<&Arc<palisade_rich::Bundle>>,
    headers: &http::HeaderMap,
    cx: &WriteContext,
) -> Result<(), Refusal> {
    let Some(bundle) = bundle else {
        return Ok(());
    };
    if !bundle.capabilities.iter().any(|c| c.tool_digest.is_some()) {
        return Ok(());
    }
    let sessions_begun = &checked.sessions;
    let mut checked = checked.last.lock().await;
    // The sessions begun so far, read before the list is: one begun during the check is
    // checked again by its next call.
    let sessions = sessions_begun.load(Ordering::SeqCst);
    if checked
        .as_ref()
        .is_some_and(|(digest, seen)| *digest == bundle.digest && *seen == sessions)
    {
        return Ok(());
    }
    let unreadable = |why: String| {
        tracing::warn!(error = %why, "the MCP server's tool list could not be checked");
        Refusal::new(
            ErrorCode::UpstreamUnavailable,
            "the MCP server's tool list could not be read to check it against the bundle's pins; no call is forwarded until it can be",
        )
    };
    let path = plane.config.mcp_path.as_deref().unwrap_or("/mcp");
    let uri = plane
        .upstream
        .uri_for(path)
        .map_err(|e| unreadable(e.to_string()))?;
    // What pin-mcp declares by default: servers list some tools only to such clients.
    let capabilities = json!({"roots": {"listChanged": true}, "sampling": {}, "elicitation": {}});
    let carried: Vec<(http::HeaderName, http::HeaderValue)> =
        [http::header::AUTHORIZATION, http::header::COOKIE]
            .into_iter()
            .filter_map(|n| headers.get(&n).map(|v| (n, v.clone())))
            .collect();
    let listed = client::list_tools(&plane.upstream, uri, &capabilities, "palisade", &carried);
    let tools = tokio::time::timeout(plane.config.upstream.timeout, listed)
        .await
        .map_err(|_| unreadable("no answer within upstream.timeout".into()))?
        .map_err(unreadable)?;
    let listing = json!({"result": {"tools": tools}});
    // Marks each changed pinned tool (and reports it) as a listing passing through would.
    let _ = pinning::filter(plane, drifted, cx, bundle, &listing);
    *checked = Some((bundle.digest.clone(), sessions));
    Ok(())
}
