//! RICH admission (SPEC §13, seed 002 §12) through the real binary and a real upstream, with
//! access tokens minted by PyJWT over pyca/cryptography keys (`tests/admission/tokens.py`):
//! every token that must pass does, every one that must not is refused with its status, code,
//! `WWW-Authenticate`, receipt and drift event, and the upstream saw nothing of it (nor, on
//! the ones that pass, the token). Then a hot swap makes a token's contract digest stale, and
//! a JWKS rotation is picked up live.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::tokens::{self, admission_toml, ISSUER};
use support::writes::*;
use support::*;

mod admitted;
mod bindings;
mod introspection;
mod jwks_url;

const PUT_OP: &str = "PUT /items/{id}";
const GET_OP: &str = "GET /items/{id}";

fn digest_of(contract: &Value) -> String {
    format!("sha-256:{}", Sha256Digest::of_json(contract).to_hex())
}

fn bundle(dir: &std::path::Path, put_max: Option<i64>) -> (BundleFiles, Value, Value) {
    bundle_with(dir, put_max, None)
}

/// The test bundle: `items` (PUT, qty ≥ 0), `item` (GET), and `open` (PUT /open/{id}) whose
/// binding turns admission off; `get_admission` overrides the GET binding's.
fn bundle_with(
    dir: &std::path::Path,
    put_max: Option<i64>,
    get_admission: Option<&str>,
) -> (BundleFiles, Value, Value) {
    let mut schema = qty_schema();
    if let Some(m) = put_max {
        schema["properties"]["qty"]["maximum"] = json!(m);
    }
    let put = contract(schema, "write", "compensable", "optional");
    let get = contract(json!("unknown"), "read", "reversible", "none");
    let files = write_bundle(
        dir,
        "urn:palisade:test:admission/1",
        &[
            ("items", PUT_OP, put.clone(), None),
            (
                "item",
                GET_OP,
                get.clone(),
                get_admission.map(|a| json!({"admission": a})),
            ),
            (
                "open",
                "PUT /open/{id}",
                put.clone(),
                Some(json!({"admission": "off"})),
            ),
            ("refs", REFS_OP, refs_contract(), None),
        ],
    );
    (files, put, get)
}

const REFS_OP: &str = "PUT /refs/{id}";

/// A contract whose worst-case bound is not computable (its input uses `$ref`).
fn refs_contract() -> Value {
    contract(
        json!({"$schema": DIALECT, "$defs": {"q": {"type": "integer", "minimum": 0}},
               "type": "object", "properties": {"qty": {"$ref": "#/$defs/q"}}}),
        "write",
        "compensable",
        "optional",
    )
}

fn mint(dir: &std::path::Path, binding_id: &str, digests: &Value) -> HashMap<String, String> {
    mint_with(dir, binding_id, digests, &json!({}))
}

/// [`mint`], plus a token per `custom` entry (name → its `authorization_details`).
fn mint_with(
    dir: &std::path::Path,
    binding_id: &str,
    digests: &Value,
    custom: &Value,
) -> HashMap<String, String> {
    let spec = json!({"resource": BASE, "issuer": ISSUER, "bindingId": binding_id,
                      "digests": digests, "custom": custom});
    serde_json::from_value(tokens::mint(dir, &spec)).unwrap()
}

struct Answer {
    status: StatusCode,
    challenge: Option<String>,
    doc: Value,
    headers: http::HeaderMap,
}

async fn call(
    p: &Palisade,
    method: &str,
    path: &str,
    auth: &[&str],
    lease: Option<&str>,
    body: &str,
) -> Answer {
    let mut b = Request::builder()
        .method(method)
        .uri(p.url(path))
        .header("content-type", "application/json");
    for a in auth {
        b = b.header("authorization", *a);
    }
    if let Some(l) = lease {
        b = b.header("agent-compensation-lease", l).header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    }
    let (parts, bytes) = send(&http1_client(), b.body(full(body.to_owned())).unwrap()).await;
    Answer {
        status: parts.status,
        challenge: parts
            .headers
            .get("www-authenticate")
            .map(|v| v.to_str().unwrap().to_owned()),
        doc: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        headers: parts.headers,
    }
}

/// A sidecar enforcing `b` under `admission`, in front of `upstream`, that trusts the test CA
/// `ca` for its outbound HTTPS (`SSL_CERT_FILE`: a JWKS URL or an introspection endpoint).
fn start_trusting(
    upstream: &Upstream,
    b: &BundleFiles,
    admission: &str,
    ca: &std::path::Path,
) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let text = write_config(
        upstream,
        dir.path(),
        "",
        &format!("{}{admission}", b.rich_toml("")),
    );
    let cert_env = format!("SSL_CERT_FILE={}", ca.display());
    Palisade::start_wrapped(dir, &text, &["env", &cert_env])
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

fn writes_to(u: &Upstream, path: &str) -> usize {
    u.requests()
        .iter()
        .filter(|s| s.method == "PUT" && s.path_and_query == path)
        .count()
}

fn assert_refused(a: &Answer, status: StatusCode, code: &str, what: &str) {
    assert_eq!(a.status, status, "{what}: {}", a.doc);
    assert_eq!(a.doc["code"], code, "{what}: {}", a.doc);
    assert_receipt_verifies(&a.doc["receipt"], "rejection");
    assert_eq!(a.doc["receipt"]["receipt"]["code"], code, "{what}");
    let challenge = a.challenge.as_deref().unwrap_or_default();
    assert!(challenge.starts_with("Bearer "), "{what}: {challenge:?}");
    assert!(
        challenge.contains(&format!(
            "resource_metadata=\"{BASE}/.well-known/oauth-protected-resource\""
        )),
        "{what}: {challenge}"
    );
}

/// `POST` on the admin listener; the raw answer.
fn admin_post(p: &Palisade, path: &str) -> String {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(p.admin).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}
