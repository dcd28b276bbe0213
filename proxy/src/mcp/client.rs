//! A small MCP client over Streamable HTTP, enough to list a server's tools: `pin-mcp` pins
//! them, and the sidecar checks them against the bundle before it forwards a call (issue 59:
//! a server changed while the sidecar was down is caught before any listing passes).

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Uri};
use serde_json::{json, Value};

use crate::net::body;
use crate::net::upstream::Upstream;

/// The stateless protocol revision, tried first.
const MODERN: &str = "2026-07-28";
/// The session revision, when the stateless one is refused.
const LEGACY: &str = "2025-11-25";
/// Most `tools/list` pages followed.
const MAX_PAGES: usize = 100;
/// Most bytes of one reply read.
const MAX_REPLY: u64 = 16 << 20;

/// One JSON-RPC exchange's outcome.
struct Reply {
    message: Value,
    session: Option<HeaderValue>,
}

struct Conn {
    client: Upstream,
    /// The `clientInfo` name.
    name: &'static str,
    /// Headers every request carries (the caller's credentials, for the sidecar's check).
    carried: Vec<(http::HeaderName, HeaderValue)>,
    url: Uri,
    version: &'static str,
    session: Option<HeaderValue>,
    next_id: u64,
    /// What the pin says it can do as a client: servers list some tools only to clients
    /// that declare `roots`, `sampling` or `elicitation`.
    capabilities: Value,
}

impl Conn {
    async fn post(&mut self, method: &str, params: Value, notify: bool) -> Result<Reply, String> {
        let mut msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        if !notify {
            self.next_id += 1;
            msg["id"] = json!(self.next_id);
        }
        let mut req = Request::post(self.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, text/event-stream")
            .header("mcp-protocol-version", self.version);
        if self.version == MODERN {
            req = req.header("mcp-method", method);
        }
        if let Some(s) = &self.session {
            req = req.header("mcp-session-id", s.clone());
        }
        for (n, v) in &self.carried {
            req = req.header(n, v.clone());
        }
        let req = req
            .body(body::full(Bytes::from(msg.to_string())))
            .map_err(|e| e.to_string())?;
        let resp = self.client.send(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        let session = resp.headers().get("mcp-session-id").cloned();
        let sse = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        let bytes = body::collect_limited(resp.into_body(), MAX_REPLY)
            .await
            .map_err(|e| format!("{method}: reading the reply: {e:?}"))?;
        if notify {
            return Ok(Reply {
                message: Value::Null,
                session,
            });
        }
        if !status.is_success() {
            return Err(format!("{method}: HTTP {status}"));
        }
        let text = String::from_utf8_lossy(&bytes);
        // In an SSE reply, the answer is the event whose data carries our id.
        let message = if sse {
            text.split("\n\n")
                .filter_map(|ev| {
                    let data: Vec<&str> = ev
                        .lines()
                        .filter_map(|l| l.strip_prefix("data:"))
                        .map(|d| d.strip_prefix(' ').unwrap_or(d))
                        .collect();
                    serde_json::from_str::<Value>(&data.join("\n")).ok()
                })
                .find(|v| v.get("id") == Some(&json!(self.next_id)))
                .ok_or_else(|| format!("{method}: no answer in the SSE reply"))?
        } else {
            serde_json::from_str(&text).map_err(|e| format!("{method}: reply is not JSON: {e}"))?
        };
        if let Some(err) = message.get("error") {
            return Err(format!("{method}: JSON-RPC error {err}"));
        }
        Ok(Reply { message, session })
    }

    async fn list_all(&mut self) -> Result<Vec<Value>, String> {
        let mut tools = Vec::new();
        let mut cursor: Option<Value> = None;
        for _ in 0..MAX_PAGES {
            let mut params = if self.version == MODERN {
                json!({"_meta": {"io.modelcontextprotocol/protocolVersion": MODERN,
                                  "io.modelcontextprotocol/clientInfo": {"name": self.name, "version": env!("CARGO_PKG_VERSION")},
                                  "io.modelcontextprotocol/clientCapabilities": self.capabilities}})
            } else {
                json!({})
            };
            if let Some(c) = &cursor {
                params["cursor"] = c.clone();
            }
            let r = self.post("tools/list", params, false).await?;
            let result = &r.message["result"];
            let page = result["tools"]
                .as_array()
                .ok_or("tools/list: the result has no tools array")?;
            tools.extend(page.iter().cloned());
            match result.get("nextCursor") {
                Some(c) if !c.is_null() => cursor = Some(c.clone()),
                _ => return Ok(tools),
            }
        }
        Err(format!("tools/list: more than {MAX_PAGES} pages"))
    }
}

/// Every tool the MCP server at `uri` (through `client`) lists to a client with
/// `capabilities`, as listed: the stateless revision first, then initialize, list and end a
/// session of the session revisions. `name` is the `clientInfo` name it gives.
pub async fn list_tools(
    client: &Upstream,
    uri: Uri,
    capabilities: &Value,
    name: &'static str,
    carried: &[(http::HeaderName, HeaderValue)],
) -> Result<Vec<Value>, String> {
    let mut modern = Conn {
        client: client.clone(),
        name,
        carried: carried.to_vec(),
        url: uri.clone(),
        version: MODERN,
        session: None,
        next_id: 0,
        capabilities: capabilities.clone(),
    };
    if let Ok(tools) = modern.list_all().await {
        return Ok(tools);
    }
    // A server of the session revisions: initialize, list, end the session.
    let mut legacy = Conn {
        client: client.clone(),
        name,
        carried: carried.to_vec(),
        url: uri,
        version: LEGACY,
        session: None,
        next_id: 0,
        capabilities: capabilities.clone(),
    };
    let init = legacy
        .post(
            "initialize",
            json!({"protocolVersion": LEGACY, "capabilities": capabilities,
                   "clientInfo": {"name": name, "version": env!("CARGO_PKG_VERSION")}}),
            false,
        )
        .await?;
    legacy.session = init.session;
    legacy
        .post("notifications/initialized", json!({}), true)
        .await?;
    let tools = legacy.list_all().await;
    if let Some(s) = &legacy.session {
        if let Ok(req) = Request::builder()
            .method(Method::DELETE)
            .uri(legacy.url.clone())
            .header("mcp-session-id", s.clone())
            .header("mcp-protocol-version", LEGACY)
            .body(body::empty())
        {
            let _ = legacy.client.send(req).await;
        }
    }
    tools
}
