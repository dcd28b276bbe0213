//! RICH admission for MCP (SPEC §13): a `tools/call` of a bound tool needs a token that grants
//! the tool (by name, with its contract digest) and whose bound its arguments keep to;
//! `initialize` and `tools/list` need none, and a listing made with a token shows only the
//! bound tools it grants. Refusals are the HTTP ones (401/403 with `WWW-Authenticate`, as the
//! MCP authorization spec has them) with a JSON-RPC error body.

use std::collections::BTreeSet;

use palisade_rich::admission::Call;
use palisade_rich::Bundle;
use serde_json::Value;

use super::call::ToolCall;
use crate::admission::{self, Gate, Presented};
use crate::context::{Binding, WriteContext};
use crate::enforce::receipts::Refused;

/// Decides a tool call; `Ok` when admission does not apply or admits it.
pub(super) async fn tool_call(
    gate: Option<Gate<'_>>,
    presented: Option<&Presented>,
    bundle: Option<&Bundle>,
    binding: &Binding<'_>,
    call: &ToolCall,
    cx: &WriteContext,
) -> Result<(), Refused> {
    let (Some(g), Some(bundle), Some(presented), Binding::Bound(cap)) =
        (gate, bundle, presented, binding)
    else {
        return Ok(());
    };
    if !admission::required(g.adm, cap) {
        return Ok(());
    }
    let admitted = admission::gate(g, presented, (bundle, cap), cx).await?;
    let named = Call {
        binding_id: &bundle.binding_id,
        operation: &cap.operation,
        contract_digest: &cap.contract.digest,
    };
    admission::check_input(g, &admitted, Some(&call.arguments), cx, named).await?;
    Ok(())
}

/// The bound tools a listing may show: `None` (all) without a token; with a valid one, the
/// tool names it grants.
pub(super) async fn listing(
    gate: Option<Gate<'_>>,
    presented: Option<&Presented>,
    cx: &WriteContext,
) -> Result<Option<BTreeSet<String>>, Refused> {
    let (Some(g), Some(presented)) = (gate, presented) else {
        return Ok(None);
    };
    let Some(admitted) = admission::token_only(g, presented, cx).await? else {
        return Ok(None);
    };
    Ok(Some(
        admitted
            .grants
            .iter()
            .flat_map(|g| g.operations.iter().map(|o| o.operation.clone()))
            .collect(),
    ))
}

/// `msg` (a `tools/list` answer) without the bound tools `granted` does not name; `None`
/// when nothing is removed. Unbound tools are the pins' business (`pinning::filter`).
pub(super) fn only_granted(
    msg: &Value,
    bundle: &Bundle,
    granted: Option<&BTreeSet<String>>,
) -> Option<Value> {
    let granted = granted?;
    let tools = msg.get("result")?.get("tools")?.as_array()?;
    let kept: Vec<Value> = tools
        .iter()
        .filter(|t| {
            let name = t.get("name").and_then(Value::as_str).unwrap_or("");
            bundle.tool(name).is_none() || granted.contains(name)
        })
        .cloned()
        .collect();
    if kept.len() == tools.len() {
        return None;
    }
    let mut out = msg.clone();
    out["result"]["tools"] = Value::Array(kept);
    Some(out)
}
