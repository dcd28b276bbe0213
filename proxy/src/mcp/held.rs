//! HUMAN_ESCROW for tool calls (SPEC §5.4): the release of a held `tools/call`.
//!
//! A held call was answered with a tool result saying so (`escrow::Answer::Mcp`). When an
//! operator approves it, the stored POST is judged again as a tool call, by the facts it
//! carried (`call::ToolCall`) under the bundle in force now, then sent without its PTCL
//! members and committed when its answer comes (`results::relay`), the answer stored in the
//! escrow record. The call goes out with the headers it came with: a session-based server may
//! have forgotten its `Mcp-Session-Id` by then, so escrow suits stateless (2026-07-28)
//! servers best.

use std::sync::Arc;

use bytes::Bytes;
use http::header;
use palisade_policy::{ErrorCode, Refusal};
use serde_json::Value;

use super::{call, relay, results};
use crate::context::AppState;
use crate::context::Enforcement;
use crate::context::WriteContext;
use crate::enforce::checks;
use crate::enforce::facts::Requester;
use crate::enforce::idempotency;
use crate::enforce::receipts::Refused;
use crate::enforce::send;
use crate::enforce::send::Keep;
use crate::net::body;
use crate::net::conn::ConnInfo;

/// Releases a held tool call; a refusal comes back as its code and its problem response
/// (rejection receipt stored, drift event emitted).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release(
    state: &Arc<AppState>,
    enf: &Arc<Enforcement>,
    mut parts: http::request::Parts,
    bytes: Bytes,
    conn: &ConnInfo,
    who: &Requester,
    cx: &mut WriteContext,
    keep: Keep,
) -> Result<(), Refused> {
    let msg = palisade_policy::json::parse(&bytes, state.config.max_json_depth).ok();
    let Some((msg, call)) = msg.and_then(|m| call::ToolCall::of(&m).map(|c| (m, c))) else {
        let refusal = Refusal::new(ErrorCode::Internal, "the held tool call cannot be read");
        return Err(super::refusal::record(state, cx, refusal.into(), None, &bytes).await);
    };
    let bundle = state.bundle.load_full();
    let binding = call.binding(bundle.as_deref());
    cx.bind(bundle.as_deref(), &binding);
    let rule = results::OutputRule::of(binding.capability());
    let permit = match checks::check(
        &state.config,
        enf,
        &state.upstream,
        call.facts(&binding, who, &bytes, &parts.headers),
        who,
        binding,
        true,
    )
    .await
    {
        Ok(p) => p,
        Err(denied) => {
            let lease = call.lease.as_deref();
            return Err(super::refusal::record(state, cx, denied, lease, &call.args).await);
        }
    };
    let id = msg.get("id").cloned().unwrap_or(Value::Null);
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.remove(idempotency::KEY_HEADER);
    let sent = send::send(
        state,
        &state.upstream,
        &permit,
        parts,
        call::without_ptcl(msg),
        conn,
        cx,
    )
    .await;
    let commit = results::Commit {
        enf: enf.clone(),
        permit,
        keep,
    };
    let resp = relay::relay(state, cx, rule, id, sent, Some(commit)).await;
    // Read to its end: a streamed answer is committed by its relay before the stream ends.
    let _ = body::collect_proxy(resp.into_body(), state.config.max_response).await;
    Ok(())
}
