//! What enforcement reads from a `tools/call` (SPEC §11): the tool, its arguments, and the
//! PTCL members of `params._meta`. Shared by the call as it arrives and by its release from
//! escrow, so both are judged by the same facts.

use bytes::Bytes;
use serde_json::{json, Value};

use crate::context::Binding;
use crate::enforce::facts::Carried;
use crate::enforce::facts::Requester;
use crate::enforce::facts::WriteFacts;

/// Where a tool call carries its lease and inverse (SPEC §5.1, §11).
pub const LEASE_META: &str = "compensationLease";
pub const INVERSE_META: &str = "compensationInverse";
/// The path of a tool call's target URI, before the tool's name (SPEC §11).
pub const TOOL_PATH: &str = "/mcp/tools/";
/// Where a tool call may carry its idempotency key instead of the `Idempotency-Key` header.
pub const KEY_META: &str = "idempotencyKey";

/// A tool call's enforcement facts.
pub(crate) struct ToolCall {
    pub name: String,
    pub arguments: Value,
    /// `arguments` as bytes: what check 9 validates and a refusal's evidence digest covers.
    pub args: Vec<u8>,
    pub lease: Option<Vec<u8>>,
    pub inverse: Option<Vec<u8>>,
    pub key: Option<String>,
    /// `/mcp/tools/<name>`: the path of the target URI (SPEC §11).
    pub path: String,
}

impl ToolCall {
    /// The facts of `msg`, a `tools/call` request; `None` when it names no tool.
    pub fn of(msg: &Value) -> Option<Self> {
        let params = msg.get("params")?;
        let name = params.get("name")?.as_str()?.to_owned();
        let arguments = params
            .get("arguments")
            .cloned()
            .unwrap_or_else(|| json!({}));
        let meta = params.get("_meta");
        let member = |key: &str| {
            meta.and_then(|m| m.get(key))
                .map(|v| serde_json::to_vec(v).unwrap_or_default())
        };
        Some(Self {
            args: serde_json::to_vec(&arguments).unwrap_or_default(),
            lease: member(LEASE_META),
            inverse: member(INVERSE_META),
            key: meta
                .and_then(|m| m.get(KEY_META))
                .and_then(Value::as_str)
                .map(str::to_owned),
            path: format!("{TOOL_PATH}{name}"),
            name,
            arguments,
        })
    }

    /// The fenced resource: `mcp:tool/<name>`, or `…/<value>` of the argument the contract's
    /// `state.handle` names (SPEC §11).
    pub fn resource(&self, binding: &Binding<'_>) -> String {
        let handle = binding
            .capability()
            .and_then(|c| c.contract.state_handle.as_deref());
        tool_resource(&self.name, &self.arguments, handle)
    }

    /// Whether the call carries its inverse both in `params._meta` and in the
    /// `Agent-Compensation-Inverse` header: refused rather than one silently preferred.
    pub fn inverse_carried_twice(&self, headers: &http::HeaderMap) -> bool {
        self.inverse.is_some() && headers.contains_key(crate::net::headers::INVERSE_HEADER)
    }

    /// The facts checks 1–11 judge; `body` is the whole request as sent, `headers` its HTTP
    /// headers: the inverse may travel in `Agent-Compensation-Inverse` as on any HTTP write,
    /// beside `params._meta` (SPEC §11).
    pub fn facts<'a>(
        &'a self,
        binding: &Binding<'_>,
        who: &Requester,
        body: &'a [u8],
        headers: &'a http::HeaderMap,
    ) -> WriteFacts<'a> {
        WriteFacts {
            lease: self.lease.clone().map(Carried::Json),
            inverse: self.inverse.clone().map(Carried::Json).or_else(|| {
                headers
                    .get(crate::net::headers::INVERSE_HEADER)
                    .map(Carried::Header)
            }),
            target: who
                .origin
                .as_deref()
                .and_then(|o| palisade_policy::target::request_target(o, &self.path).ok()),
            resource: Some(self.resource(binding)),
            input: &self.args,
            parsed: Some(&self.arguments),
            body,
            path: &self.path,
            headers: None,
            granted: None,
            undoes: palisade_policy::inverse::Undoes::Tool {
                name: &self.name,
                declared: None,
            },
        }
    }
}

/// A call of `name`'s resource (SPEC §11): `mcp:tool/<name>`, or `…/<value>` of the argument
/// its contract's `state.handle` names. The one spelling for a call and for an inverse call.
pub(crate) fn tool_resource(name: &str, arguments: &Value, handle: Option<&str>) -> String {
    let value = handle.and_then(|h| arguments.get(h)).map(|v| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    match value {
        Some(h) => format!("mcp:tool/{name}/{h}"),
        None => format!("mcp:tool/{name}"),
    }
}

/// `msg` as the server gets it: without the PTCL members of `_meta` (as the PTCL headers are
/// not forwarded on HTTP).
pub fn without_ptcl(mut msg: Value) -> Bytes {
    if let Some(m) = msg
        .get_mut("params")
        .and_then(|p| p.get_mut("_meta"))
        .and_then(Value::as_object_mut)
    {
        m.remove(LEASE_META);
        m.remove(INVERSE_META);
        m.remove(KEY_META);
    }
    Bytes::from(serde_json::to_vec(&msg).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ptcl_members_are_read_and_then_stripped() {
        let msg = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "set_stock", "arguments": {"sku": "A", "qty": 1},
            "_meta": {"compensationLease": {"lease_id": "l"}, "compensationInverse": {"tool": "t"},
                      "idempotencyKey": "k", "progressToken": 9}}});
        let call = ToolCall::of(&msg).unwrap();
        assert_eq!(call.path, "/mcp/tools/set_stock");
        assert_eq!(call.key.as_deref(), Some("k"));
        assert_eq!(call.lease.as_deref(), Some(&br#"{"lease_id":"l"}"#[..]));
        assert_eq!(call.resource(&Binding::Unbound), "mcp:tool/set_stock");
        let out: Value = serde_json::from_slice(&without_ptcl(msg)).unwrap();
        assert_eq!(out["params"]["_meta"], json!({"progressToken": 9}));
        assert!(ToolCall::of(&json!({"method": "tools/call", "params": {}})).is_none());
    }
}
