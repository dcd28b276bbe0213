//! The MCP surface of the write engine (SPEC §11): a `tools/call` that writes.
//!
//! ```text
//! lease and inverse from params._meta (or Agent-Compensation-Inverse), the fence per tool or
//! per handle value; the idempotency key from its header or _meta.idempotencyKey, judged by
//! tool and arguments; refusals as JSON-RPC errors; holds answered with a tool result;
//! delivery without the PTCL members of _meta, committed when the answer comes (relay.rs)
//! ```

use std::borrow::Cow;
use std::sync::Arc;

use http::{header, HeaderValue, Method, Response};
use palisade_policy::Refusal;
use palisade_rich::Bundle;
use serde_json::{json, Value};

use super::call::{self, ToolCall};
use super::{relay, results, PROTOCOL_HEADER};
use crate::context::{Binding, Enforcement, Outcome, Plane, Recorder, Routed, WriteContext};
use crate::enforce::delivery::Delivery;
use crate::enforce::engine::{KeyRequest, Leg};
use crate::enforce::escrow;
use crate::enforce::facts::{Requester, WriteFacts};
use crate::enforce::idempotency;
use crate::enforce::permit::Denied;
use crate::enforce::send;
use crate::enforce::written::Written;
use crate::net::body::{self, ProxyBody};
use crate::net::jsonrpc;

/// A tool call on its way through the engine.
pub(crate) struct McpLeg {
    pub call: ToolCall,
    /// The JSON-RPC message as it came (sent on without its PTCL members).
    pub msg: Value,
    pub id: Value,
    /// The protocol revision knows `resultType` (2026-07-28 on).
    pub typed: bool,
    /// The tool's capability in the bundle that decides the call, routed once.
    pub routed: Routed,
    /// A connected call's: its result mapped back to the agent-facing tool's (issue 37).
    pub back: Option<Arc<super::connect::Back>>,
}

impl McpLeg {
    /// The leg of `call`, already read from `msg`.
    pub fn new(call: ToolCall, msg: Value, headers: &http::HeaderMap, routed: Routed) -> Self {
        let id = msg.get("id").cloned().unwrap_or(Value::Null);
        // Protocol revisions are dates: 2026-07-28 introduced `resultType`.
        let typed = headers
            .get(PROTOCOL_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v >= "2026-07-28");
        Self {
            call,
            msg,
            id,
            typed,
            routed,
            back: None,
        }
    }

    /// The leg of a held tool call (HUMAN_ESCROW), read back from its stored request when an
    /// operator releases it; the refusal when it cannot be read. The call goes out with the
    /// headers it came with: a session-based server may have forgotten its `Mcp-Session-Id`
    /// by then, so escrow suits stateless (2026-07-28) servers best.
    pub(crate) fn held(
        bytes: &[u8],
        headers: &http::HeaderMap,
        max_depth: usize,
        bundle: Option<&Bundle>,
    ) -> Result<McpLeg, Refusal> {
        palisade_policy::json::parse(bytes, max_depth)
            .ok()
            .and_then(|msg| {
                let call = ToolCall::of(&msg)?;
                let routed = Routed::tool(bundle, &call.name);
                Some(McpLeg::new(call, msg, headers, routed))
            })
            .ok_or_else(|| {
                Refusal::new(
                    palisade_policy::ErrorCode::Internal,
                    "the held tool call cannot be read",
                )
            })
    }
}

impl Leg for McpLeg {
    fn routed(&self) -> Routed {
        self.routed
    }

    fn facts<'a>(
        &'a self,
        parts: &'a http::request::Parts,
        body: &'a [u8],
        binding: &Binding<'_>,
        who: &Requester,
    ) -> WriteFacts<'a> {
        self.call.facts(binding, who, body, &parts.headers)
    }

    /// `mcp:tool/<name>` (SPEC §14).
    fn shape<'a>(
        &'a self,
        _parts: &'a http::request::Parts,
        _body: &'a [u8],
    ) -> crate::enforce::verdict::Shape<'a> {
        crate::enforce::verdict::Shape::Tool {
            name: &self.call.name,
            arguments: &self.call.arguments,
        }
    }

    fn operation_key(&self, _parts: &http::request::Parts, _binding: &Binding<'_>) -> String {
        format!("mcp:tool/{}", self.call.name)
    }

    /// Judged by tool and arguments, not by JSON-RPC id or lease, which differ on a retry.
    fn key<'a>(&'a self, parts: &'a http::request::Parts, _body: &'a [u8]) -> KeyRequest<'a> {
        let fingerprinted = palisade_policy::canon::to_vec(
            &json!({"name": self.call.name, "arguments": self.call.arguments}),
        );
        KeyRequest {
            headers: Cow::Owned(key_headers(&parts.headers, self.call.key.as_deref())),
            method: Method::POST,
            target: Cow::Borrowed(&self.call.path),
            body: Cow::Owned(fingerprinted),
        }
    }

    async fn refuse(
        &self,
        rec: Recorder<'_>,
        denied: Denied,
        cx: &WriteContext,
        _parts: &http::request::Parts,
        _body: &[u8],
    ) -> Written {
        let carried = super::refusal::Carried {
            lease: self.call.lease.as_deref(),
            body: &self.call.args,
        };
        let r = super::refusal::record(rec, cx, denied, carried).await;
        Written::refused_rpc(r, self.id.clone())
    }

    async fn replay(&self, resp: Response<ProxyBody>, receipt: Option<Value>) -> Written {
        let resp = replayed(resp, receipt.clone(), self.id.clone()).await;
        Written::with_receipt(resp, Outcome::Replayed, receipt)
    }

    fn hold_answer(&self) -> escrow::Answer {
        escrow::Answer::Mcp {
            id: self.id.clone(),
            typed: self.typed,
            lease: self.call.lease.clone(),
        }
    }

    async fn deliver(self, plane: Arc<Plane>, enf: Arc<Enforcement>, d: Delivery) -> Written {
        let Delivery {
            permit,
            mut parts,
            conn,
            cx,
            keep,
            bundle,
            ..
        } = d;
        // The output contract of the tool in the bundle that decided the write.
        let cap = self.routed.binding(bundle.as_deref()).capability();
        let rule = results::OutputRule::of_call(cap, self.back.clone());
        let (told, settled) = tokio::sync::oneshot::channel();
        let commit = results::Commit {
            enf,
            permit,
            keep,
            told: Some(told),
        };
        let upstream = match (commit.permit.is_dry_run(), &plane.shadow) {
            (false, _) => &plane.upstream,
            (true, Some(shadow)) => shadow,
            // DRY_RUN_SHADOW with no shadow deployment: the sidecar answers.
            (true, None) => {
                let resp = results::dry_run(&plane, &cx, self.id, self.typed, commit).await;
                return Written {
                    settled: Some(settled),
                    ..Written::plain(resp, Outcome::Forwarded)
                };
            }
        };
        parts.headers.remove(header::CONTENT_LENGTH);
        parts.headers.remove(idempotency::KEY_HEADER);
        let forwarded = call::without_ptcl(self.msg);
        let req = http::Request::from_parts(parts, forwarded);
        let sent = send::send(&plane, upstream, &commit.permit, req, &conn, &cx).await;
        let outcome = sent.outcome;
        let resp = relay::relay(&plane, &cx, rule, self.id, sent, Some(commit)).await;
        // Committed by the relay when the answer arrives: its receipt is in the answer, and
        // told, typed, to whoever runs the call (an RCNS step).
        Written {
            settled: Some(settled),
            ..Written::plain(resp, outcome)
        }
    }
}

/// The headers an idempotency key is read from: the request's, or `_meta.idempotencyKey`
/// when the request has no `Idempotency-Key` (an MCP client sets `_meta` per call, headers
/// per connection).
fn key_headers(headers: &http::HeaderMap, meta_key: Option<&str>) -> http::HeaderMap {
    let mut out = http::HeaderMap::new();
    if let Some(v) = headers.get(idempotency::KEY_HEADER) {
        out.insert(idempotency::KEY_HEADER, v.clone());
    } else if let Some(v) = meta_key.and_then(|k| HeaderValue::from_str(&format!("\"{k}\"")).ok()) {
        out.insert(idempotency::KEY_HEADER, v);
    }
    out
}

/// A stored answer sent again: as the answer to this request's id, its receipt in `_meta`.
async fn replayed(
    resp: Response<ProxyBody>,
    receipt: Option<Value>,
    id: Value,
) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    // Stored by this process, bounded when it was stored.
    let bytes = body::collect_proxy(body, u64::MAX)
        .await
        .unwrap_or_default();
    let Ok(mut msg) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, body::full(bytes));
    };
    if let Some(obj) = msg.as_object_mut() {
        obj.insert("id".into(), id);
    }
    let msg = jsonrpc::with_receipt(msg, receipt);
    parts.headers.remove(header::CONTENT_LENGTH);
    let out = bytes::Bytes::from(serde_json::to_vec(&msg).unwrap_or_default());
    Response::from_parts(parts, body::full(out))
}
