//! AGTP-RCNS (seed 000; issue 21) through the real binary, with the example ERP bundle's
//! recipe set (`RESERVE /stock-reservations`, composed of `items.put` and
//! `legacy.allocations.put`) and a recording upstream that must see nothing of a
//! negotiation. Callers are told apart by bearer token (`authz:sha256:…` in the callers file);
//! `contract_hash` is recomputed by an independent JCS (`tests/rcns/contract_hash.py`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use http::{Method, Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use serde_json::{json, Value};
use support::bundles::BundleFiles;
use support::writes::*;
use support::*;

mod callers;
mod invocation;
mod lifecycle;
mod proposals;

/// (token, agent id, scopes its identity document grants, trust tier).
const AGENTS: &[(&str, &str, &[&str], u8)] = &[
    ("tok-a", "agent-a", FULL, 1),
    ("tok-b", "agent-b", FULL, 2),
    ("tok-low", "agent-low", FULL, 3),
    // Every scope of the first step and of the composition, not the second step's.
    (
        "tok-narrow",
        "agent-narrow",
        &["rcns:negotiate", "erp:stock:reserve", "erp:items:write"],
        1,
    ),
    // Both steps' scopes, not the composition's.
    (
        "tok-steps",
        "agent-steps",
        &["rcns:negotiate", "erp:items:write", "erp:allocations:write"],
        1,
    ),
    ("tok-mute", "agent-mute", &["erp:stock:reserve"], 1),
    ("tok-ops", "operator", &["rcns:negotiate", "inspect:all"], 1),
];

const FULL: &[&str] = &[
    "rcns:negotiate",
    "erp:stock:reserve",
    "erp:items:write",
    "erp:allocations:write",
];

fn scopes_of(token: &str) -> &'static [&'static str] {
    AGENTS.iter().find(|a| a.0 == token).unwrap().2
}

/// The callers file: each token's `authz:` identity, as the sidecar derives it (the scheme
/// lower-cased, SPEC §14).
fn callers() -> Value {
    let list: Vec<Value> = AGENTS
        .iter()
        .map(|(tok, agent, scopes, tier)| {
            let id = Sha256Digest::of(format!("bearer {tok}").as_bytes()).to_hex();
            json!({"identity": format!("authz:sha256:{id}"), "agent_id": agent,
                   "scopes": scopes, "trust_tier": tier})
        })
        .collect();
    json!({ "callers": list })
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `contract_hash` of a contract view or 263 body, by Python and `rfc8785`.
fn independent_hash(doc: &Value) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new(repo().join("target/pyenv/bin/python"))
        .arg(repo().join("tests/rcns/contract_hash.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the test venv (scripts/test.sh makes it)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(doc.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A sidecar with the example bundle and `[rcns]`, in front of a recording upstream.
struct Rcns {
    s: Setup,
    b: BundleFiles,
    _bundle: tempfile::TempDir,
}

fn config(b: &BundleFiles, dir: &Path, rcns_extra: &str) -> String {
    let file = dir.join("callers.json");
    std::fs::write(&file, callers().to_string()).unwrap();
    format!(
        "{}[rcns]\ncallers = \"{}\"\n{rcns_extra}",
        b.rich_toml(""),
        file.display()
    )
}

impl Rcns {
    async fn start(rcns_extra: &str) -> Rcns {
        let bundle = tempfile::tempdir().unwrap();
        palisade::cli::sample_bundle::write(bundle.path()).unwrap();
        let b = BundleFiles::in_dir(bundle.path());
        let dir = tempfile::tempdir().unwrap();
        let extra = config(&b, dir.path(), rcns_extra);
        let s = start_configured(Upstream::start().await, dir, "", &extra);
        Rcns {
            s,
            b,
            _bundle: bundle,
        }
    }

    /// `method path` as `token` (none: anonymous), with `headers` and a JSON body.
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> (http::response::Parts, Value) {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(self.s.p.url(path));
        if let Some(t) = token {
            req = req.header("authorization", format!("Bearer {t}"));
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let req = req
            .header("content-type", "application/json")
            .body(full(body))
            .unwrap();
        let (parts, bytes) = send(&http1_client(), req).await;
        (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// PROPOSE `params` as `token`, consenting and claiming every scope it holds.
    async fn propose(&self, token: &str, params: Value) -> (http::response::Parts, Value) {
        let claim = scopes_of(token).join(" ");
        let headers = [("allow-rcns", "true"), ("authority-scope", claim.as_str())];
        let body = json!({"method": "PROPOSE", "task_id": "task-1", "parameters": params});
        self.call("PROPOSE", "/", Some(token), &headers, Some(&body))
            .await
    }

    /// As `token`, with its whole claim.
    async fn get(&self, method: &str, path: &str, token: &str) -> (StatusCode, Value) {
        let claim = scopes_of(token).join(" ");
        let (parts, v) = self
            .call(
                method,
                path,
                Some(token),
                &[("authority-scope", &claim)],
                None,
            )
            .await;
        (parts.status, v)
    }
}

fn reserve(persistent: bool) -> Value {
    json!({"endpoint": {"method": "RESERVE", "path": "/stock-reservations",
                        "description": "reserve and allocate",
                        "semantic": {"intent": "reserve stock for an order"},
                        "input_schema": {"$schema": "https://json-schema.org/draft/2020-12/schema",
                                         "type": "object"}},
           "persistent": persistent})
}

fn step_receipts(parts: &http::response::Parts) -> Vec<Value> {
    use base64::Engine as _;
    let h = parts
        .headers
        .get("agent-commit-receipts")
        .expect("the steps' receipts");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(h.as_bytes())
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A refusal's answer, receipt and event; and that nothing reached the upstream.
async fn assert_refused(
    r: &Rcns,
    answer: (http::response::Parts, Value),
    status: u16,
    code: &str,
    reason: Option<&str>,
) -> Value {
    let (parts, body) = answer;
    assert_eq!(parts.status.as_u16(), status, "{body}");
    assert_eq!(body["code"], code, "{body}");
    assert_eq!(body["reason"].as_str(), reason, "{body}");
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    assert_receipt_verifies(&body["receipt"], "rejection");
    assert_eq!(body["receipt"]["receipt"]["code"], code);
    // 461 asks for a PROPOSE: nothing was violated, so no drift event (docs/decisions.md).
    let category = match code {
        "ERR_RCNS_PROPOSE_FIRST" | "ERR_BODY_TOO_LARGE" => None,
        "ERR_IDEMPOTENCY_KEY_REUSED" => Some("idempotency"),
        _ => Some("negotiation"),
    };
    let events = drift_events(&r.s.p);
    let event = events.iter().find(|e| e["traceId"] == body["trace_id"]);
    match category {
        Some(c) => {
            let event = event.unwrap_or_else(|| panic!("no drift event for {body}"));
            assert_eq!(event["code"], code);
            assert_eq!(event["category"], c);
        }
        None => assert!(event.is_none(), "{event:?}"),
    }
    assert!(
        r.s.upstream.requests().is_empty(),
        "the upstream saw a request"
    );
    body
}

/// The sample SoR (a real HTTP app) behind a sidecar with the example bundle and `[rcns]`.
struct WithSor {
    p: Palisade,
    b: BundleFiles,
    /// `Authorization` sent with every request.
    auth: String,
    sor: std::net::SocketAddr,
    /// The SoR itself: it counts the requests it answers.
    sor_app: std::sync::Arc<palisade::cli::sample_sor::SampleSor>,
    _dirs: [tempfile::TempDir; 2],
}

impl WithSor {
    async fn start(rcns_extra: &str) -> WithSor {
        Self::start_with(rcns_extra, "", None).await
    }

    /// As [`WithSor::start`], the sidecar in process on a clock the test moves.
    async fn start_in_process(rcns_extra: &str) -> WithSor {
        Self::launch(rcns_extra, "", None, true).await
    }

    /// With `more` config after `[rcns]`, the callers file replaced when `callers_doc` is
    /// given, and `auth` sent with every request.
    async fn start_with(
        rcns_extra: &str,
        more: &str,
        callers_doc: Option<(&Value, &str)>,
    ) -> WithSor {
        Self::launch(rcns_extra, more, callers_doc, false).await
    }

    async fn launch(
        rcns_extra: &str,
        more: &str,
        callers_doc: Option<(&Value, &str)>,
        in_process: bool,
    ) -> WithSor {
        let (addr, sor, sor_dir) = sample_sor().await;
        let bundle = tempfile::tempdir().unwrap();
        palisade::cli::sample_bundle::write(bundle.path()).unwrap();
        let b = BundleFiles::in_dir(bundle.path());
        let dir = tempfile::tempdir().unwrap();
        let extra = config(&b, dir.path(), rcns_extra) + more;
        let auth = match callers_doc {
            Some((doc, auth)) => {
                std::fs::write(dir.path().join("callers.json"), doc.to_string()).unwrap();
                auth.to_owned()
            }
            None => "Bearer tok-a".to_owned(),
        };
        let text = write_config_for(&format!("http://{addr}"), dir.path(), "", &extra);
        let p = if in_process {
            Palisade::in_process(dir, &text).await
        } else {
            Palisade::start_in(dir, &text)
        };
        WithSor {
            p,
            b,
            auth,
            sor: addr,
            sor_app: sor,
            _dirs: [sor_dir, bundle],
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &Value,
    ) -> (http::response::Parts, Value) {
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(self.p.url(path))
            .header("authorization", self.auth.as_str())
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (parts, bytes) = send(&http1_client(), req.body(full(body.to_string())).unwrap()).await;
        (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// A contract for `RESERVE /stock-reservations`: (synthesis id, session, 263 body).
    async fn contract(&self) -> (String, String, Value) {
        self.contract_with(false).await
    }

    async fn contract_with(&self, persistent: bool) -> (String, String, Value) {
        let claim = FULL.join(" ");
        let body = json!({"method": "PROPOSE", "parameters": reserve(persistent)});
        let (parts, b) = self
            .send(
                "PROPOSE",
                "/",
                &[("allow-rcns", "true"), ("authority-scope", &claim)],
                &body,
            )
            .await;
        assert_eq!(parts.status.as_u16(), 263, "{b}");
        let session = parts
            .headers
            .get("session-id")
            .map_or("", |v| v.to_str().unwrap())
            .to_owned();
        (b["synthesis_id"].as_str().unwrap().to_owned(), session, b)
    }

    async fn invoke(
        &self,
        id: &str,
        session: &str,
        claim: &str,
        input: &Value,
    ) -> (http::response::Parts, Value) {
        let headers = [
            ("contract-synthesized", id),
            ("session-id", session),
            ("authority-scope", claim),
        ];
        self.send("RESERVE", "/stock-reservations", &headers, input)
            .await
    }

    /// A record as the SoR has it (not through the sidecar).
    async fn sor_get(&self, path: &str) -> (StatusCode, Value) {
        let req = Request::get(format!("http://{}{path}", self.sor))
            .body(full(""))
            .unwrap();
        let (parts, body) = send(&http1_client(), req).await;
        (
            parts.status,
            serde_json::from_slice(&body).unwrap_or(Value::Null),
        )
    }
}
