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
