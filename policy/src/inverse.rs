//! The inverse payload (SPEC §5.4) and check 10 (SPEC §5.2).
//!
//! An inverse payload is the request that undoes a write:
//! `{"method": "...", "path": "...", "headers": {...}?, "body": <any JSON>?}`. Its digest is the
//! SHA-256 of its JCS form, which the lease commits to in `inverse_payload_jcs_hash`, so the
//! inverse cannot be swapped after the lease was signed.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::codes::{ErrorCode, Refusal};
use crate::digest::Sha256Digest;
use crate::lease::Lease;
use crate::{canon, json};

/// Methods an inverse may use: the ones that change state.
const METHODS: [&str; 4] = ["POST", "PUT", "PATCH", "DELETE"];

/// Headers an inverse may not set (issue 54): the message's framing and connection, which the
/// sidecar writes (a staged `Content-Length` or `Transfer-Encoding` would let an inverse
/// smuggle a second request to the SoR), and the credentials, which are the compensating
/// caller's (a second `Authorization` would be read by the SoR as the agent's choice of
/// identity).
const NOT_STAGED: [&str; 13] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "authorization",
    "proxy-authorization",
    "cookie",
    "host",
];

/// Headers that would send an inverse somewhere else than its path says: another host, or
/// another method (SPEC §5.4's binding rule, as the request line is).
const RETARGETING: [&str; 7] = [
    "forwarded",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-original-url",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// A well-formed inverse payload with its canonical bytes and digest.
#[derive(Debug, Clone, PartialEq)]
pub struct InversePayload {
    pub method: String,
    /// Origin-relative path (with optional query), starting with `/`.
    pub path: String,
    pub headers: BTreeMap<String, String>,
    pub body: Option<Value>,
    /// The MCP form, `{"tool": name, "arguments": {...}}`: the inverse of a tool call is
    /// another tool call. Then `method` is `POST`, `path`, `headers` and `body` are empty, and
    /// the sidecar builds the request (a stateless `tools/call` to its `mcp.path`).
    pub tool: Option<ToolCall>,
    /// JCS of the whole payload: what the store keeps and the digest covers.
    pub jcs: Vec<u8>,
    pub digest: Sha256Digest,
}

fn malformed(detail: &'static str) -> Refusal {
    // A payload that is not an inverse cannot be the staged inverse: the lease's promise is
    // unmet, which is check 10's "not staged".
    Refusal::new(ErrorCode::InverseNotStaged, detail)
}

/// A tool call that undoes a tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub name: String,
    /// A JSON object.
    pub arguments: Value,
}

/// Longest tool name accepted in an inverse, in bytes.
const MAX_TOOL_NAME: usize = 256;

/// Parses and validates an inverse payload.
pub fn parse(bytes: &[u8], max_depth: usize) -> Result<InversePayload, Refusal> {
    let tree = json::parse_tree(bytes, max_depth)
        .map_err(|_| malformed("inverse payload is not valid I-JSON"))?;
    let mut jcs = Vec::with_capacity(bytes.len());
    canon::write_node(&mut jcs, &tree);
    let Value::Object(obj) = tree.to_value() else {
        return Err(malformed("inverse payload must be a JSON object"));
    };
    if obj.contains_key("tool") {
        return parse_tool(&obj, jcs);
    }
    for key in obj.keys() {
        if !matches!(key.as_str(), "method" | "path" | "headers" | "body") {
            return Err(malformed(
                "inverse payload has a member other than method, path, headers, body",
            ));
        }
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) if METHODS.contains(&m.as_str()) => m.clone(),
        _ => {
            return Err(malformed(
                "inverse payload method must be POST, PUT, PATCH or DELETE",
            ))
        }
    };
    let path = match obj.get("path") {
        // Refused at staging, not found out at compensation: the path compensation sends is
        // the canonical one (issue 15), so a spelling without one could never be undone.
        Some(Value::String(p))
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains(['\r', '\n', '#'])
                && crate::path::canonical_path(p.split('?').next().unwrap_or_default()).is_ok() =>
        {
            p.clone()
        }
        _ => {
            return Err(malformed(
                "inverse payload path must be an origin-relative path with a canonical form",
            ))
        }
    };
    let mut headers = BTreeMap::new();
    match obj.get("headers") {
        None => {}
        Some(Value::Object(h)) => {
            for (name, value) in h {
                let Value::String(v) = value else {
                    return Err(malformed("inverse payload header values must be strings"));
                };
                let token = !name.is_empty()
                    && name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
                if !token || v.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
                    return Err(malformed(
                        "inverse payload headers must be valid HTTP fields",
                    ));
                }
                if NOT_STAGED.contains(&name.to_ascii_lowercase().as_str()) {
                    return Err(malformed(
                        "inverse payload headers may not set framing, connection, Host or credential fields: the sidecar writes those",
                    ));
                }
                headers.insert(name.to_ascii_lowercase(), v.clone());
            }
        }
        Some(_) => return Err(malformed("inverse payload headers must be an object")),
    }
    let digest = Sha256Digest::of(&jcs);
    Ok(InversePayload {
        method,
        path,
        headers,
        body: obj.get("body").cloned(),
        tool: None,
        jcs,
        digest,
    })
}

/// The MCP form: `{"tool": name, "arguments": {...}?}` and nothing else.
fn parse_tool(
    obj: &serde_json::Map<String, Value>,
    jcs: Vec<u8>,
) -> Result<InversePayload, Refusal> {
    if obj.keys().any(|k| k != "tool" && k != "arguments") {
        return Err(malformed(
            "an inverse tool call has only the members tool and arguments",
        ));
    }
    let name = match obj.get("tool") {
        Some(Value::String(n))
            if !n.is_empty() && n.len() <= MAX_TOOL_NAME && !n.chars().any(char::is_control) =>
        {
            n.clone()
        }
        _ => return Err(malformed("an inverse tool call needs a tool name")),
    };
    let arguments = match obj.get("arguments") {
        None => Value::Object(serde_json::Map::new()),
        Some(a @ Value::Object(_)) => a.clone(),
        Some(_) => {
            return Err(malformed(
                "an inverse tool call's arguments must be an object",
            ))
        }
    };
    let digest = Sha256Digest::of(&jcs);
    Ok(InversePayload {
        method: "POST".to_owned(),
        path: String::new(),
        headers: BTreeMap::new(),
        body: None,
        tool: Some(ToolCall { name, arguments }),
        jcs,
        digest,
    })
}

/// The write an inverse undoes, as the binding rule needs it (SPEC §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undoes<'a> {
    /// An HTTP write: its method (`None`: not known yet, as at a grant, which names only
    /// the target) and its canonical path, without the query.
    Http {
        method: Option<&'a str>,
        path: &'a str,
    },
    /// A tool call, and the tool the lockfile declares as its inverse (the contract's
    /// `operational.inverseTool`), if any.
    Tool {
        name: &'a str,
        declared: Option<&'a str>,
    },
}

/// The binding rule (SPEC §5.4, issue 54 defect 2): an inverse undoes the write it is staged
/// for, so it targets that write's own resource, or, for a `POST` to a collection (which
/// creates a member), a member directly under that collection; a tool call's inverse is a
/// `tools/call` of the same tool or of the tool the lockfile declares as its inverse. Any
/// other inverse would let the lease authority sign, and `compensate` send, a request to a
/// resource no lease covers. 422 `ERR_INVERSE_TARGET`.
///
/// With the method unknown (`Http { method: None }`: a grant, or a lease record made before
/// the method was recorded) a direct member is accepted too; the write itself is judged with
/// its method at check 10.
pub fn check_target(inv: &InversePayload, write: &Undoes<'_>) -> Result<(), Refusal> {
    let refused = |detail: &'static str| Err(Refusal::new(ErrorCode::InverseTarget, detail));
    match (write, &inv.tool) {
        (Undoes::Http { method, path }, None) => {
            if inv
                .headers
                .keys()
                .any(|h| RETARGETING.contains(&h.as_str()))
            {
                return refused("the inverse sets a header that would send it to another host or as another method (Forwarded, X-Forwarded-Host, a method override)");
            }
            let inv_path = inv.path.split('?').next().unwrap_or_default();
            let Ok(inv_path) = crate::path::canonical_path(inv_path) else {
                return refused("the inverse's path has no canonical form");
            };
            if inv_path == *path {
                return Ok(());
            }
            let creates = method.is_none_or(|m| m == "POST");
            let collection = path.trim_end_matches('/');
            let member = inv_path
                .strip_prefix(collection)
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|seg| !seg.is_empty() && !seg.contains('/'));
            if creates && member {
                return Ok(());
            }
            if member {
                refused("the inverse targets a member of the written resource: only a POST to a collection is undone on a member it creates")
            } else {
                refused("the inverse targets another resource than the write it undoes")
            }
        }
        (Undoes::Tool { name, declared }, Some(call)) => {
            if call.name == *name || declared.is_some_and(|d| call.name == d) {
                Ok(())
            } else {
                refused("the inverse calls another tool than the one it undoes or the inverse tool its contract declares")
            }
        }
        (Undoes::Http { .. }, Some(_)) => {
            refused("the inverse of an HTTP write is an HTTP request, not a tool call")
        }
        (Undoes::Tool { .. }, None) => {
            refused("the inverse of a tool call is a tool call (tool, arguments)")
        }
    }
}

/// Check 10: an inverse is staged and it is the one the lease names.
pub fn check(staged: Option<&InversePayload>, lease: &Lease) -> Result<(), Refusal> {
    let Some(inv) = staged else {
        return Err(Refusal::new(
            ErrorCode::InverseNotStaged,
            "no inverse payload is staged for this lease",
        ));
    };
    if inv.digest != lease.inverse_payload_jcs_hash {
        return Err(Refusal::new(
            ErrorCode::InverseDigest,
            "the staged inverse payload does not match inverse_payload_jcs_hash",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_is_an_inverse_too() {
        let inv = parse(
            br#"{"tool":"set_stock","arguments":{"sku":"A","qty":1}}"#,
            32,
        )
        .unwrap();
        let t = inv.tool.unwrap();
        assert_eq!(t.name, "set_stock");
        assert_eq!(t.arguments["qty"], 1);
        assert_eq!(inv.digest, Sha256Digest::of(&inv.jcs));
        for bad in [
            &br#"{"tool":"x","method":"PUT"}"#[..],
            br#"{"tool":""}"#,
            br#"{"tool":"x","arguments":[1]}"#,
            br#"{"tool":7}"#,
        ] {
            assert_eq!(
                parse(bad, 32).unwrap_err().code,
                ErrorCode::InverseNotStaged,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn an_inverse_path_without_a_canonical_form_is_refused_when_staged() {
        for path in ["/a/%2F/b", "/a/%5Cb", "/../etc", "/a/%00", "/a/%FF"] {
            let doc = format!(r#"{{"method":"PUT","path":"{path}"}}"#);
            assert_eq!(
                parse(doc.as_bytes(), 32).unwrap_err().code,
                ErrorCode::InverseNotStaged,
                "{path}"
            );
        }
        // Another spelling of a path is fine: compensation sends its canonical form.
        assert!(parse(br#"{"method":"PUT","path":"/a/./b/%7Ec?x=1"}"#, 32).is_ok());
    }

    #[test]
    fn a_good_inverse_parses_and_its_digest_ignores_formatting() {
        let a = parse(
            br#"{"method":"PUT","path":"/api/v2/items/1","body":{"qty":5,"id":"1"}}"#,
            32,
        )
        .unwrap();
        let b = parse(b" { \"path\" : \"/api/v2/items/1\", \"body\": {\"id\":\"1\", \"qty\": 5}, \"method\": \"PUT\" } ", 32).unwrap();
        assert_eq!(a.digest, b.digest);
        assert_eq!(
            a.jcs,
            br#"{"body":{"id":"1","qty":5},"method":"PUT","path":"/api/v2/items/1"}"#
        );
        let d = parse(
            br#"{"method":"DELETE","path":"/x?y=1","headers":{"If-Match":"\"v3\""}}"#,
            32,
        )
        .unwrap();
        assert_eq!(d.headers["if-match"], "\"v3\"");
        assert_eq!(d.body, None);
    }

    fn lease_naming(inverse: &InversePayload) -> crate::lease::VerifiedLease {
        use crate::keys::{KeyPair, TrustStore};
        let key = KeyPair::from_seed([5; 32]);
        let mut trust = TrustStore::new();
        trust.insert(key.trusted("t")).unwrap();
        let fields = serde_json::json!({
            "ptcl_version": "1.0", "lease_id": "urn:uuid:1", "sor_target_uri": "https://x.example/a",
            "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 1, "t_granted_ms": 60000,
            "cas_fence_epoch": 1, "pre_image_state_hash": Sha256Digest::empty().to_string(),
            "inverse_payload_jcs_hash": inverse.digest.to_string(),
        });
        let raw = serde_json::to_vec(&crate::lease::sign(
            fields.as_object().unwrap().clone(),
            &key,
        ))
        .unwrap();
        let cx = crate::lease::VerifyContext {
            now_ms: 0,
            max_clock_skew_ms: 0,
            first_seen: None,
            request: None,
        };
        crate::lease::verify(&raw, &trust, &cx).unwrap()
    }

    #[test]
    fn check_10_needs_the_staged_inverse_the_lease_names() {
        let staged = parse(br#"{"method":"DELETE","path":"/a"}"#, 32).unwrap();
        let other = parse(br#"{"method":"DELETE","path":"/b"}"#, 32).unwrap();
        let lease = lease_naming(&staged);
        assert!(check(Some(&staged), lease.lease()).is_ok());
        assert_eq!(
            check(None, lease.lease()).unwrap_err().code,
            ErrorCode::InverseNotStaged
        );
        assert_eq!(
            check(Some(&other), lease.lease()).unwrap_err().code,
            ErrorCode::InverseDigest
        );
    }

    /// Issue 54, defect 2: the probe's two inverses, and what each rule lets through.
    #[test]
    fn an_inverse_targets_the_write_it_undoes() {
        let http = |doc: &str| parse(doc.as_bytes(), 32).unwrap();
        let put = |path| Undoes::Http {
            method: Some("PUT"),
            path,
        };
        let post = |path| Undoes::Http {
            method: Some("POST"),
            path,
        };
        let code = |r: Result<(), Refusal>| r.map_err(|e| e.code);
        let victim = http(r#"{"method":"PUT","path":"/notes/victim","body":{}}"#);
        assert_eq!(
            code(check_target(&victim, &put("/notes/mine"))),
            Err(ErrorCode::InverseTarget)
        );
        let own = http(r#"{"method":"PUT","path":"/notes/./mine?v=1","body":{}}"#);
        assert_eq!(code(check_target(&own, &put("/notes/mine"))), Ok(()));
        let del = http(r#"{"method":"DELETE","path":"/notes/%6Dine"}"#);
        assert_eq!(code(check_target(&del, &put("/notes/mine"))), Ok(()));
        // A POST to a collection is undone on the member it made, and only directly under it.
        let member = http(r#"{"method":"DELETE","path":"/orders/o-17"}"#);
        assert_eq!(code(check_target(&member, &post("/orders"))), Ok(()));
        assert_eq!(code(check_target(&member, &post("/orders/"))), Ok(()));
        assert_eq!(
            code(check_target(&member, &put("/orders"))),
            Err(ErrorCode::InverseTarget)
        );
        for elsewhere in [
            r#"{"method":"DELETE","path":"/orders/o-17/lines/1"}"#,
            r#"{"method":"DELETE","path":"/orders2/o-17"}"#,
            r#"{"method":"DELETE","path":"/"}"#,
            r#"{"method":"DELETE","path":"/orders/o-17/../../users/1"}"#,
        ] {
            assert_eq!(
                code(check_target(&http(elsewhere), &post("/orders"))),
                Err(ErrorCode::InverseTarget),
                "{elsewhere}"
            );
        }
        // Method unknown (a grant): a direct member passes here, the write is judged later.
        let grant = Undoes::Http {
            method: None,
            path: "/orders",
        };
        assert_eq!(code(check_target(&member, &grant)), Ok(()));
        assert_eq!(
            code(check_target(&victim, &grant)),
            Err(ErrorCode::InverseTarget)
        );

        let tool = |doc: &str| parse(doc.as_bytes(), 32).unwrap();
        let wipe = tool(r#"{"tool":"wipe_all"}"#);
        let set = tool(r#"{"tool":"set_stock","arguments":{"sku":"A","qty":1}}"#);
        let restock = tool(r#"{"tool":"restock"}"#);
        let write = Undoes::Tool {
            name: "set_stock",
            declared: None,
        };
        assert_eq!(
            code(check_target(&wipe, &write)),
            Err(ErrorCode::InverseTarget)
        );
        assert_eq!(code(check_target(&set, &write)), Ok(()));
        assert_eq!(
            code(check_target(&restock, &write)),
            Err(ErrorCode::InverseTarget)
        );
        let declared = Undoes::Tool {
            name: "set_stock",
            declared: Some("restock"),
        };
        assert_eq!(code(check_target(&restock, &declared)), Ok(()));
        assert_eq!(
            code(check_target(&wipe, &declared)),
            Err(ErrorCode::InverseTarget)
        );
        // A header that would send it elsewhere, or as another method.
        for h in ["X-HTTP-Method-Override", "Forwarded", "X-Forwarded-Host"] {
            let doc = format!(r#"{{"method":"PUT","path":"/notes/mine","headers":{{"{h}":"x"}}}}"#);
            assert_eq!(
                code(check_target(&http(&doc), &put("/notes/mine"))),
                Err(ErrorCode::InverseTarget),
                "{h}"
            );
        }
        // Across kinds.
        assert_eq!(
            code(check_target(&set, &put("/x"))),
            Err(ErrorCode::InverseTarget)
        );
        assert_eq!(
            code(check_target(&own, &write)),
            Err(ErrorCode::InverseTarget)
        );
    }

    #[test]
    fn malformed_inverses_are_refused() {
        for bad in [
            &b"[]"[..],
            br#"{"method":"GET","path":"/x"}"#,
            br#"{"method":"PUT"}"#,
            br#"{"method":"PUT","path":"http://evil/x"}"#,
            br#"{"method":"PUT","path":"//evil/x"}"#,
            br#"{"method":"PUT","path":"/x","headers":{"a b":"c"}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"x":"a\r\nb: c"}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"x":1}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"Content-Length":"0"}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"transfer-encoding":"chunked"}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"Host":"victim.internal"}}"#,
            br#"{"method":"PUT","path":"/x","headers":{"authorization":"Bearer other"}}"#,
            br#"{"method":"PUT","path":"/x","extra":true}"#,
            br#"{"method":"PUT","path":"/x","path":"/y"}"#,
        ] {
            let r = parse(bad, 32).unwrap_err();
            assert_eq!(
                r.code,
                ErrorCode::InverseNotStaged,
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
