//! A recipe step on an MCP tool (issue 37): a stateless `tools/call` to `mcp.path`, run
//! through the write engine as every tool call is.
//!
//! ```text
//! write tool: a lease granted in process (COMPENSATING_ACTION, the recipe's inverse tool
//!             call staged with it) → engine::run with the MCP leg → its commit receipt
//! read tool:  its input contract → forwarded → its output contract (no lease, nothing to undo)
//! ```
//!
//! The step's answer (for later steps' expressions) is the result's `structuredContent`, or
//! the result when it has none. A JSON-RPC error, an `isError` result or an interim outcome
//! fails the step; only a write the sidecar sent and then could not confirm (its output
//! contract refused it, the answer never came) is compensated with the others, since a
//! tool's own error says it did not apply.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use palisade_policy::lease::RecoveryMode;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::rcns::compose::ToolRequest;
use palisade_rich::{Bundle, SideEffect};
use serde_json::Value;

use crate::context::{AppState, Enforcement, Outcome, Routed, WriteContext};
use crate::enforce::engine;
use crate::enforce::facts::InProcessGrant;
use crate::enforce::forward::forward_plain;
use crate::enforce::receipts::{self, Evidence};
use crate::enforce::send;
use crate::enforce::written::Written;
use crate::mcp::leg::McpLeg;
use crate::mcp::results::OutputRule;
use crate::mcp::{inverse, relay, wire};
use crate::net::body;
use crate::net::conn::ConnInfo;
use crate::net::jsonrpc::RECEIPT_META;

/// A tool step to run.
pub(super) struct ToolStep<'a> {
    pub state: &'a Arc<AppState>,
    pub enf: &'a Arc<Enforcement>,
    pub conn: &'a Arc<ConnInfo>,
    /// The headers the step carries from the invocation (already without RCNS's and PTCL's).
    pub headers: http::HeaderMap,
    /// The step's context (its caller, attribution, trace).
    pub cx: WriteContext,
    pub bundle: &'a Arc<Bundle>,
    pub capability: usize,
    pub req: ToolRequest,
    /// The caller the lease is granted to.
    pub caller: Option<String>,
    pub window_ms: u64,
}

/// What came of a tool step.
pub(super) struct ToolOutcome {
    pub ok: bool,
    /// The answer later steps see.
    pub answer: Value,
    /// Its receipt: the commit of a call that was sent, or the rejection of one refused.
    pub receipt: Option<Value>,
    /// The sidecar's refusal code, when the sidecar refused or failed it.
    pub code: Option<String>,
    /// The status a failure is answered with: the refusal's, else 502.
    pub status: u16,
    /// The granted lease, when the tool writes.
    pub lease_id: Option<String>,
    /// The call was sent and may have applied: compensate it if the composition fails.
    pub maybe_applied: bool,
    /// No JSON-RPC answer could be read from the call's response (none came through, or the
    /// stream broke).
    pub unanswered: bool,
}

impl ToolStep<'_> {
    pub(super) async fn run(self) -> ToolOutcome {
        let Some(cap) = self.bundle.capabilities.get(self.capability) else {
            return self
                .refused(
                    Refusal::new(ErrorCode::Internal, "the step's tool is not bound"),
                    None,
                )
                .await;
        };
        if self.state.config.mcp_path.is_none() {
            let r = Refusal::new(
                ErrorCode::Internal,
                "a recipe step on an MCP tool needs [mcp] path, where the server is reached",
            );
            return self.refused(r, None).await;
        }
        let call = palisade_policy::inverse::ToolCall {
            name: self.req.name.clone(),
            arguments: self.req.arguments.clone(),
        };
        let (path, mcp_headers, bytes) = inverse::inverse_request(&self.state.config, &call);
        let mut parts = match http::Request::post(path.as_str()).body(()) {
            Ok(r) => r.into_parts().0,
            Err(_) => {
                let r = Refusal::new(ErrorCode::Internal, "the step's request cannot be built");
                return self.refused(r, None).await;
            }
        };
        parts.headers = self.headers.clone();
        for (k, v) in &mcp_headers {
            if let (Ok(k), Ok(v)) = (HeaderName::try_from(k.as_str()), HeaderValue::from_str(v)) {
                parts.headers.insert(k, v);
            }
        }
        parts
            .headers
            .insert(http::header::CONTENT_LENGTH, HeaderValue::from(bytes.len()));
        parts
            .extensions
            .insert(crate::net::conn::Caller(self.cx.caller.clone()));
        if cap.contract.side_effect == SideEffect::Read {
            return self.read(cap, parts, bytes).await;
        }
        self.write(parts, bytes).await
    }

    /// A read tool: its input contract, then forwarded and its answer judged by its output
    /// contract, as an agent's call of it would be.
    async fn read(
        self,
        cap: &palisade_rich::Capability,
        parts: http::request::Parts,
        bytes: Bytes,
    ) -> ToolOutcome {
        let args = serde_json::to_vec(&self.req.arguments).unwrap_or_default();
        let mut cx = self.cx.clone();
        cx.bind(Some(self.bundle), &crate::context::Binding::Bound(cap));
        let depth = self.state.config.limits.max_json_depth;
        if let Err(r) = palisade_rich::check_input(&cap.contract, &args, depth) {
            return self.refused(r, Some(&args)).await;
        }
        let answer =
            forward_plain(self.state, parts, body::full(bytes), self.conn, &cx, None).await;
        let sent = send::Sent::passed(answer);
        let rule = OutputRule::of(Some(cap));
        let resp = relay::relay(&self.state.plane, &cx, rule, Value::from(1), sent, None).await;
        self.outcome(resp, None).await
    }

    /// A write tool: under a lease granted here, its inverse staged with it, through the
    /// write engine.
    async fn write(self, parts: http::request::Parts, bytes: Bytes) -> ToolOutcome {
        let Some(caller) = self.caller.clone() else {
            let r = Refusal::new(
                ErrorCode::CallerUnidentified,
                "a composed write needs the caller's identity for its leases",
            );
            return self.refused(r, None).await;
        };
        let inverse = self
            .req
            .inverse
            .as_ref()
            .map(|v| palisade_policy::inverse::parse(v.to_string().as_bytes(), 8));
        let inverse = match inverse {
            Some(Ok(i)) => i,
            Some(Err(r)) => return self.refused(r, None).await,
            None => {
                let r = Refusal::new(ErrorCode::Internal, "a write step has no inverse");
                return self.refused(r, None).await;
            }
        };
        let lease_id = format!("urn:uuid:{}", uuid::Uuid::new_v4());
        let grant = InProcessGrant {
            lease_id: lease_id.clone(),
            caller,
            mode: RecoveryMode::CompensatingAction,
            window_ms: self.window_ms,
            inverse,
        };
        let depth = self.state.config.limits.max_json_depth;
        let leg = match McpLeg::held(&bytes, &parts.headers, depth, Some(self.bundle)) {
            Ok(l) => l,
            Err(r) => return self.refused(r, None).await,
        };
        if leg.routed != Routed::Bound(self.capability) {
            let r = Refusal::new(ErrorCode::Internal, "the step's tool routes elsewhere");
            return self.refused(r, None).await;
        }
        let w = engine::Write {
            parts,
            body: bytes,
            cx: self.cx.clone(),
            bundle: Some(self.bundle.clone()),
            grant: Some(grant),
            leg,
        };
        let written = Box::pin(engine::run(&self.state.plane, self.enf, self.conn, w)).await;
        let Written {
            resp,
            receipt,
            code,
            outcome,
            settled,
        } = written;
        let refused = code.filter(|_| matches!(outcome, Outcome::Refused));
        let mut out = self.outcome(resp, Some(lease_id)).await;
        // What the write came to, typed by the engine and the MCP leg (issue 55), not read
        // back out of the JSON-RPC answer: the answer read above gives the step's result.
        if let Some(code) = refused {
            // Refused before it was sent: nothing to undo.
            (out.ok, out.maybe_applied) = (false, false);
            (out.code, out.status, out.receipt) =
                (Some(code.as_str().to_owned()), code.status(), receipt);
        } else if let Some(told) = settled {
            // Sent: told once the answer was judged and the write committed (the answer has
            // been read to its end above, so this does not wait on the server).
            // Only what the sidecar says counts: a server's own JSON-RPC error whose `data`
            // looks like our problem names no code of ours and no receipt here.
            if let Ok(s) = told.await {
                // The sidecar replaced the answer (its output contract, or it never came), or
                // the call was committed and no answer could be read here (a CI run met this
                // under load): the call may have applied, so it is compensated with the others.
                out.maybe_applied = s.code.is_some() || (out.unanswered && s.receipt.is_some());
                out.receipt = s.receipt;
                out.ok = out.ok && !s.interim && s.code.is_none();
                if s.code.is_some() || !out.unanswered {
                    out.code = s.code.map(|c| c.as_str().to_owned());
                }
                out.status = s.code.map_or(502, |c| c.status());
            }
        }
        out
    }

    /// The step's outcome read from the JSON-RPC answer (JSON or SSE): its result, and for a
    /// read tool (which commits nothing) the sidecar's problem if the answer carries one. A
    /// write's code and receipt are then taken from the engine, typed (see `write`).
    async fn outcome(
        &self,
        resp: http::Response<body::ProxyBody>,
        lease_id: Option<String>,
    ) -> ToolOutcome {
        let max = self.state.config.limits.max_response;
        // What arrived, even if the stream broke after it: an SSE answer whose stream is then
        // reset still answered. Only whole messages are read from it.
        let (bytes, broken) = body::collect_proxy_partial(resp.into_body(), max).await;
        let answer = wire::messages_in(&bytes)
            .into_iter()
            .find(|m| m.get("result").is_some() || m.get("error").is_some());
        if let Some(e) = broken {
            tracing::warn!(error = %e, answered = answer.is_some(), "an RCNS tool step's answer ended early");
        }
        let mut out = ToolOutcome {
            ok: false,
            answer: Value::Null,
            receipt: None,
            code: None,
            status: 502,
            lease_id,
            maybe_applied: false,
            unanswered: false,
        };
        let Some(msg) = answer else {
            out.code = Some(ErrorCode::UpstreamUnavailable.as_str().to_owned());
            out.unanswered = true;
            return out;
        };
        if let Some(data) = msg.get("error").and_then(|e| e.get("data")) {
            // A refusal or failure of the sidecar's carries its problem; a server's own
            // JSON-RPC error does not, and did not apply the call.
            out.code = data.get("code").and_then(Value::as_str).map(str::to_owned);
            out.receipt = data.get("receipt").cloned();
            if let Some(s) = data.get("status").and_then(Value::as_u64) {
                out.status = u16::try_from(s).unwrap_or(502);
            }
            // A write the sidecar sent and then could not confirm (its answer broke the output
            // contract, or never came) answers 5xx: it may have applied. A refusal before
            // sending is 4xx, and a server's own error has no problem of ours at all.
            out.maybe_applied = out.lease_id.is_some() && out.code.is_some() && out.status >= 500;
            return out;
        }
        let Some(result) = msg.get("result") else {
            return out;
        };
        out.receipt = result
            .get("_meta")
            .and_then(|m| m.get(RECEIPT_META))
            .cloned();
        let interim = crate::mcp::results::is_interim(result);
        let is_error = result.get("isError") == Some(&Value::Bool(true));
        out.answer = result
            .get("structuredContent")
            .cloned()
            .unwrap_or_else(|| result.clone());
        out.ok = !interim && !is_error;
        out
    }

    /// A refusal before anything was sent: its rejection receipt and drift event.
    async fn refused(&self, refusal: Refusal, args: Option<&[u8]>) -> ToolOutcome {
        let status = refusal.status();
        let code = refusal.code.as_str().to_owned();
        let evidence = Evidence {
            body: args,
            ..Evidence::default()
        };
        let refused = receipts::record(self.state.recorder(), refusal, &self.cx, evidence).await;
        ToolOutcome {
            ok: false,
            answer: Value::Null,
            receipt: refused.receipt,
            code: Some(code),
            status,
            lease_id: None,
            maybe_applied: false,
            unanswered: false,
        }
    }
}
