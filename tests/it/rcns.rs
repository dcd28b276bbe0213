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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proposal_in_either_form_is_approved_and_listed_to_its_agent_only() {
    let r = Rcns::start("").await;
    let (parts, body) = r.propose("tok-a", reserve(false)).await;
    assert_eq!(parts.status.as_u16(), 263, "{body}");
    let id = body["synthesis_id"].as_str().unwrap().to_owned();
    assert_eq!(parts.headers["contract-synthesized"], id.as_str());
    let session = parts.headers["session-id"].to_str().unwrap().to_owned();
    assert_eq!(body["session"], session.as_str());
    assert_eq!(body["status"], 263);
    assert_eq!(
        (body["method"].as_str(), body["path"].as_str()),
        (Some("RESERVE"), Some("/stock-reservations"))
    );
    assert_eq!(
        body["recipe_lineage"],
        json!({"recipe_name": "reserve-stock", "recipe_version": "1"})
    );
    assert_eq!(body["negotiation_origin"], "propose");
    assert_eq!(body["originating_agent_id"], "agent-a");
    assert_eq!(body["persistent"], false);
    // The endpoint served is the recipe's, whatever schema the agent proposed.
    assert_eq!(
        body["endpoint"]["input_schema"]["required"],
        json!(["sku", "qty", "warehouse", "order"])
    );
    assert_eq!(
        body["contract_hash"].as_str().unwrap(),
        independent_hash(&body)
    );
    assert!(body["expires_at"].as_str().unwrap().ends_with('Z'));

    // The flat form, through the well-known path.
    let claim = FULL.join(" ");
    let flat = json!({"method": "PROPOSE", "parameters": {"name": "reserve", "method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve"}}});
    let (p2, b2) = r
        .call(
            "POST",
            "/.well-known/agtp/propose",
            Some("tok-a"),
            &[("allow-rcns", "?1"), ("authority-scope", &claim)],
            Some(&flat),
        )
        .await;
    assert_eq!(p2.status.as_u16(), 263, "{b2}");
    assert_ne!(b2["synthesis_id"], body["synthesis_id"]);
    let (p3, b3) = r.propose("tok-b", reserve(true)).await;
    assert_eq!(p3.status.as_u16(), 263, "{b3}");
    assert_eq!(b3["persistent"], true);
    assert!(p3.headers.get("session-id").is_none());

    // DISCOVER /contracts, as the method and as the well-known path: each agent its own.
    for (method, path) in [
        ("DISCOVER", "/contracts"),
        ("GET", "/.well-known/agtp/contracts"),
    ] {
        let (status, list) = r.get(method, path, "tok-a").await;
        assert_eq!(status, StatusCode::OK);
        let ids: Vec<&str> = list
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["synthesis_id"].as_str().unwrap())
            .collect();
        assert_eq!(ids.len(), 2, "{list}");
        assert!(ids.contains(&id.as_str()));
        for c in list.as_array().unwrap() {
            for m in [
                "synthesis_id",
                "method",
                "path",
                "originating_agent_id",
                "recipe_lineage",
                "contract_hash",
                "negotiation_origin",
                "issued_at",
                "expires_at",
            ] {
                assert!(c.get(m).is_some(), "{m} in {c}");
            }
            assert_eq!(c["contract_hash"].as_str().unwrap(), independent_hash(c));
        }
    }
    let (_, list_b) = r.get("DISCOVER", "/contracts", "tok-b").await;
    assert_eq!(list_b.as_array().unwrap().len(), 1);
    assert_eq!(list_b[0]["originating_agent_id"], "agent-b");
    // `inspect:all` sees every agent's; granted but not claimed, it sees only its own (none).
    let (_, all) = r.get("DISCOVER", "/contracts", "tok-ops").await;
    assert_eq!(all.as_array().unwrap().len(), 3);
    let (_, unclaimed) = r
        .call(
            "DISCOVER",
            "/contracts",
            Some("tok-ops"),
            &[("authority-scope", "rcns:negotiate")],
            None,
        )
        .await;
    assert_eq!(unclaimed, json!([]));

    // INSPECT target=contract: the owner and the operator; another agent is told whose it is not.
    let (s, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(view["contract_hash"], body["contract_hash"]);
    assert_eq!(view["recipe_lineage"]["recipe_version"], "1");
    let (s, _) = r
        .get(
            "GET",
            &format!("/.well-known/agtp/contracts/{id}"),
            "tok-ops",
        )
        .await;
    assert_eq!(s, StatusCode::OK);
    let (s, no) = r
        .get("INSPECT", &format!("/?target=contract&id={id}"), "tok-b")
        .await;
    assert_eq!(
        (s.as_u16(), no["reason"].as_str()),
        (464, Some("contract-not-yours")),
        "{no}"
    );
    let (s, _) = r.get("INSPECT", "/contracts/syn_nope", "tok-a").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    let (parts, _) = r.call("DISCOVER", "/contracts", None, &[], None).await;
    assert_eq!(parts.status, StatusCode::UNAUTHORIZED);
    // The negotiation reached no one.
    assert!(r.s.upstream.requests().is_empty());
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_carries_the_seeds_status_and_reason_a_receipt_and_an_event() {
    let r = Rcns::start("").await;
    let good = reserve(false);
    let with = |f: &dyn Fn(&mut Value)| {
        let mut p = good.clone();
        f(&mut p["endpoint"]);
        p
    };
    // The gate, lock by lock.
    let body = json!({"method": "PROPOSE", "parameters": good});
    let claim = FULL.join(" ");
    let no_consent = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[("authority-scope", &claim)],
            Some(&body),
        )
        .await;
    let b = assert_refused(
        &r,
        no_consent,
        464,
        "ERR_RCNS_REFUSED",
        Some("rcns-disabled"),
    )
    .await;
    assert_eq!(b["lock"], 2);
    let headers = [("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    let stranger = r
        .call("PROPOSE", "/", Some("tok-unknown"), &headers, Some(&body))
        .await;
    assert_eq!(
        assert_refused(&r, stranger, 464, "ERR_RCNS_REFUSED", Some("rcns-disabled")).await["lock"],
        3
    );
    let mute = r.propose("tok-mute", good.clone()).await;
    assert_eq!(
        assert_refused(&r, mute, 464, "ERR_RCNS_REFUSED", Some("rcns-disabled")).await["lock"],
        3
    );
    // rcns:negotiate granted, not claimed.
    let unclaimed = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                ("authority-scope", "erp:stock:reserve"),
            ],
            Some(&body),
        )
        .await;
    assert_eq!(
        assert_refused(
            &r,
            unclaimed,
            464,
            "ERR_RCNS_REFUSED",
            Some("rcns-disabled")
        )
        .await["lock"],
        3
    );
    let low = r.propose("tok-low", good.clone()).await;
    assert_eq!(
        assert_refused(
            &r,
            low,
            464,
            "ERR_RCNS_REFUSED",
            Some("trust-tier-insufficient")
        )
        .await["lock"],
        4
    );

    // The evaluation, in the seed's order.
    let cases: Vec<(Value, u16, &str, Option<&str>)> = vec![
        (
            with(&|e| e["method"] = json!("reserve")),
            459,
            "ERR_RCNS_METHOD",
            None,
        ),
        (
            with(&|e| e["method"] = json!("BOOK")),
            459,
            "ERR_RCNS_METHOD",
            None,
        ),
        (
            with(&|e| e["path"] = json!("/stock/../reservations")),
            460,
            "ERR_RCNS_PATH",
            None,
        ),
        (
            with(&|e| e["path"] = json!("/stock-reservations?x=1")),
            460,
            "ERR_RCNS_PATH",
            None,
        ),
        (
            with(&|e| {
                e.as_object_mut().unwrap().remove("semantic");
            }),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("semantic-invalid"),
        ),
        (
            with(&|e| e["output_schema"] = json!({"type": "nonsense"})),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("schema-invalid"),
        ),
        (
            with(&|e| e["path"] = json!("/stock-transfers")),
            463,
            "ERR_RCNS_REJECTED",
            Some("composition-impossible"),
        ),
        (
            json!({"endpoint": good["endpoint"], "method": "RESERVE"}),
            400,
            "ERR_RCNS_PROPOSAL",
            Some("proposal-malformed"),
        ),
    ];
    for (params, status, code, reason) in cases {
        let answer = r.propose("tok-a", params).await;
        let b = assert_refused(&r, answer, status, code, reason).await;
        let attempt = b["rcns_attempt_id"].as_str().unwrap();
        let (s, rec) = r
            .get("INSPECT", &format!("/rcns-attempts/{attempt}"), "tok-a")
            .await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            (rec["status"].as_u64(), rec["code"].as_str()),
            (Some(u64::from(status)), Some(code))
        );
    }
    // Composition-impossible names the patterns that come close.
    let b = assert_refused(
        &r,
        r.propose("tok-a", with(&|e| e["path"] = json!("/x"))).await,
        463,
        "ERR_RCNS_REJECTED",
        Some("composition-impossible"),
    )
    .await;
    assert_eq!(b["similar"][0]["recipe_name"], "reserve-stock");

    // Authority through the composition (seed 000 §3.7, §6.1), before anything runs.
    let narrow = assert_refused(
        &r,
        r.propose("tok-narrow", good.clone()).await,
        455,
        "ERR_RCNS_SCOPE_EXCEEDED",
        Some("scope-exceeded"),
    )
    .await;
    assert_eq!(narrow["required_scopes"], json!(["erp:allocations:write"]));
    let steps = assert_refused(
        &r,
        r.propose("tok-steps", good.clone()).await,
        455,
        "ERR_RCNS_SCOPE_EXCEEDED",
        Some("scope-exceeded"),
    )
    .await;
    assert_eq!(steps["required_scopes"], json!(["erp:stock:reserve"]));
    let partial = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                (
                    "authority-scope",
                    "rcns:negotiate erp:stock:reserve erp:items:write",
                ),
            ],
            Some(&body),
        )
        .await;
    let b = assert_refused(
        &r,
        partial,
        262,
        "ERR_RCNS_SCOPE_REQUIRED",
        Some("scope-required"),
    )
    .await;
    assert_eq!(b["required_scopes"], json!(["erp:allocations:write"]));
    // A body over the PROPOSE limit (256 KiB) is refused unread (as agent b: agent a has
    // used up its PROPOSE rate in this test).
    let huge = json!({"method": "PROPOSE", "parameters": {"pad": "x".repeat(300 * 1024)}});
    let big = r
        .call("PROPOSE", "/", Some("tok-b"), &headers, Some(&huge))
        .await;
    assert_refused(&r, big, 413, "ERR_BODY_TOO_LARGE", None).await;
    // None of it made a contract.
    let (_, list) = r.get("DISCOVER", "/contracts", "tok-ops").await;
    assert_eq!(list, json!([]));
}

/// A `Session-Id` that is no session token (or two of them) is refused, not replaced by a
/// new session the agent did not ask for (issue 44, docs/decisions.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_session_id_is_refused_not_replaced() {
    let r = Rcns::start("").await;
    let claim = scopes_of("tok-a").join(" ");
    let body = json!({"method": "PROPOSE", "task_id": "task-1", "parameters": reserve(false)});
    let long = "s".repeat(129);
    for sessions in [
        &["bad id!"][..],
        &["a/b"],
        &["ses-1", "ses-2"],
        &[long.as_str()],
    ] {
        let mut headers = vec![("allow-rcns", "true"), ("authority-scope", claim.as_str())];
        headers.extend(sessions.iter().map(|s| ("session-id", *s)));
        let answer = r
            .call("PROPOSE", "/", Some("tok-a"), &headers, Some(&body))
            .await;
        let b = assert_refused(
            &r,
            answer,
            400,
            "ERR_RCNS_PROPOSAL",
            Some("proposal-malformed"),
        )
        .await;
        assert!(
            b["detail"].as_str().unwrap().contains("Session-Id"),
            "{sessions:?}: {b}"
        );
    }
    // A well-formed one names the session the contract belongs to.
    let mut headers = vec![("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    headers.push(("session-id", "ses-mine"));
    let (parts, b) = r
        .call("PROPOSE", "/", Some("tok-a"), &headers, Some(&body))
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{b}");
    assert_eq!(parts.headers["session-id"], "ses-mine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_rejections_of_a_task_tell_the_agent_to_escalate() {
    let r = Rcns::start("").await;
    let mut impossible = reserve(false);
    impossible["endpoint"]["path"] = json!("/nowhere");
    for n in 1..=4u64 {
        let (parts, b) = r.propose("tok-a", impossible.clone()).await;
        assert_eq!(parts.status.as_u16(), 463);
        assert_eq!(b["rejections"], n);
        assert_eq!(b["escalate"].as_bool(), (n >= 3).then_some(true), "{b}");
    }
    // Another agent's count is its own.
    let (_, b) = r.propose("tok-b", impossible).await;
    assert_eq!(
        (b["rejections"].as_u64(), b.get("escalate")),
        (Some(1), None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_gives_the_same_synthesis_and_proposals_are_rate_limited() {
    let r = Rcns::start("rate_limit = 6\nmax_contracts_per_agent = 3\n").await;
    let claim = FULL.join(" ");
    let body = json!({"method": "PROPOSE", "parameters": reserve(false)});
    let keyed = |key: &'static str| {
        vec![
            ("allow-rcns", "true"),
            ("authority-scope", claim.as_str()),
            ("idempotency-key", key),
        ]
    };
    let (p1, b1) = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&body))
        .await;
    let (p2, b2) = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&body))
        .await;
    assert_eq!((p1.status.as_u16(), p2.status.as_u16()), (263, 263));
    assert_eq!(b1, b2, "the same synthesis, answered again");
    assert_eq!(
        p2.headers["contract-synthesized"],
        b1["synthesis_id"].as_str().unwrap()
    );
    // The same key with another body is not a replay.
    let other = json!({"method": "PROPOSE", "parameters": reserve(true)});
    let reused = r
        .call("PROPOSE", "/", Some("tok-a"), &keyed("k-1"), Some(&other))
        .await;
    assert_refused(&r, reused, 422, "ERR_IDEMPOTENCY_KEY_REUSED", None).await;
    // Another agent's same key is another contract.
    let (_, bb) = r
        .call("PROPOSE", "/", Some("tok-b"), &keyed("k-1"), Some(&body))
        .await;
    assert_ne!(bb["synthesis_id"], b1["synthesis_id"]);
    // agent-a holds one contract (k-1); two more reach max_contracts_per_agent = 3, and
    // its sixth PROPOSE of the minute is refused by the cap.
    for _ in 0..2 {
        let (parts, b) = r.propose("tok-a", reserve(false)).await;
        assert_eq!(parts.status.as_u16(), 263, "{b}");
    }
    let capped = r.propose("tok-a", reserve(false)).await;
    assert_refused(&r, capped, 463, "ERR_RCNS_REJECTED", Some("policy-refused")).await;
    // The seventh is over rcns.rate_limit = 6.
    let (parts, b) = r.propose("tok-a", reserve(false)).await;
    assert_eq!(parts.status.as_u16(), 429, "{b}");
    assert_eq!(b["code"], "ERR_RATE_LIMITED");
    let retry: u64 = parts.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry));
    // agent-b is not limited by agent-a's rate; its own cap holds.
    for _ in 0..2 {
        let (parts, b) = r.propose("tok-b", reserve(false)).await;
        assert_eq!(parts.status.as_u16(), 263, "{b}");
    }
    let capped = r.propose("tok-b", reserve(false)).await;
    assert_refused(&r, capped, 463, "ERR_RCNS_REJECTED", Some("policy-refused")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unregistered_pair_is_answered_by_the_delivery_mode() {
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-1", "qty": 3, "warehouse": "BER-1", "order": "SO-1234"});
    let consent = [("allow-rcns", "true"), ("authority-scope", claim.as_str())];
    let confirm = Rcns::start("").await;
    let answer = confirm
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &consent,
            Some(&input),
        )
        .await;
    let b = assert_refused(&confirm, answer, 461, "ERR_RCNS_PROPOSE_FIRST", None).await;
    assert_eq!(b["patterns"][0]["recipe_name"], "reserve-stock");
    assert_eq!(b["propose"], "/.well-known/agtp/propose");
    // Without Allow-RCNS it is an ordinary request to a pair no binding serves.
    let (parts, plain) = confirm
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &[],
            Some(&input),
        )
        .await;
    assert_eq!(plain["code"], "ERR_UNBOUND_OPERATION", "{plain}");
    assert_eq!(parts.status, StatusCode::NOT_FOUND);

    let optimistic = Rcns::start("delivery = \"optimistic\"\n").await;
    let (parts, b) = optimistic
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &consent,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{b}");
    assert_eq!(
        parts.headers["contract-synthesized"],
        b["synthesis_id"].as_str().unwrap()
    );
    assert_eq!(b["negotiation_origin"], "rcns-gate");
    assert_eq!(b["contract_hash"].as_str().unwrap(), independent_hash(&b));
    // The gate holds for the implicit route too.
    let low = optimistic
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-low"),
            &consent,
            Some(&input),
        )
        .await;
    assert_refused(
        &optimistic,
        low,
        464,
        "ERR_RCNS_REFUSED",
        Some("trust-tier-insufficient"),
    )
    .await;
    assert!(optimistic.s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contracts_survive_a_restart_and_revocation_is_the_operators() {
    let r = Rcns::start("").await;
    let (_, kept) = r.propose("tok-a", reserve(true)).await;
    let (_, other) = r.propose("tok-a", reserve(false)).await;
    let id = kept["synthesis_id"].as_str().unwrap().to_owned();
    // Restart on the same store (SIGKILL: nothing is flushed on the way out).
    let Rcns { s, b, _bundle } = r;
    let Setup { upstream, p } = s;
    let dir = kill_and_keep_state(p);
    let extra = config(&b, dir.path(), "");
    let text = write_config(&upstream, dir.path(), "", &extra);
    let r = Rcns {
        s: Setup {
            upstream,
            p: Palisade::start_in(dir, &text),
        },
        b,
        _bundle,
    };
    let (s, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(s, StatusCode::OK, "{view}");
    assert_eq!(view["contract_hash"], kept["contract_hash"]);

    // Revocation: admin only, then 464 contract-revoked is what the agent learns on INSPECT's
    // list (gone) and the view (marked).
    let (status, _) = admin_post(
        r.s.p.admin,
        &format!("/admin/v1/rcns/contracts/{id}/revoke"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = r.get("INSPECT", &format!("/contracts/{id}"), "tok-a").await;
    assert_eq!(view["revoked"], true);
    assert_eq!(
        view["contract_hash"], kept["contract_hash"],
        "revocation is state, not contract"
    );
    let (_, list) = r.get("DISCOVER", "/contracts", "tok-a").await;
    let ids: Vec<&Value> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["synthesis_id"])
        .collect();
    assert_eq!(ids, vec![&other["synthesis_id"]]);
    let (status, _) = admin_post(r.s.p.admin, "/admin/v1/rcns/contracts/syn_none/revoke").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, listed) = admin_get(r.s.p.admin, "/admin/v1/rcns/contracts").await;
    assert_eq!(status, StatusCode::OK);
    assert!(listed.contains(&id));
    // The lifecycle events, in the same sinks as drift events.
    let events = drift_events(&r.s.p);
    let revoked: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_revoked")
        .collect();
    assert_eq!(revoked.len(), 1);
    assert_eq!(revoked[0]["synthesis_id"], id.as_str());
    assert!(r.s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn persistence_is_the_operators_to_refuse() {
    let r = Rcns::start("persistent = false\nsession_ttl = \"10m\"\n").await;
    let (parts, b) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(parts.status.as_u16(), 263);
    assert_eq!(
        (b["persistent"].as_bool(), b["persistent_refused"].as_bool()),
        (Some(false), Some(true))
    );
    assert!(parts.headers.get("session-id").is_some());
    // A session the agent names is kept.
    let claim = FULL.join(" ");
    let body = json!({"method": "PROPOSE", "parameters": reserve(false)});
    let (parts, b) = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[
                ("allow-rcns", "true"),
                ("authority-scope", &claim),
                ("session-id", "ses-agent-7"),
            ],
            Some(&body),
        )
        .await;
    assert_eq!(parts.headers["session-id"], "ses-agent-7");
    assert_eq!(b["session"], "ses-agent-7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_are_listed_even_when_negotiation_is_off() {
    let r = Rcns::start("enabled = false\n").await;
    for (method, path) in [
        ("DISCOVER", "/patterns"),
        ("GET", "/.well-known/agtp/patterns"),
    ] {
        let (parts, doc) = r.call(method, path, None, &[], None).await;
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(doc["rcns_enabled"], false);
        let p = &doc["patterns"][0];
        assert_eq!(
            (p["recipe_name"].as_str(), p["recipe_version"].as_str()),
            (Some("reserve-stock"), Some("1"))
        );
        assert_eq!(
            (p["method"].as_str(), p["path_exact"].as_str()),
            (Some("RESERVE"), Some("/stock-reservations"))
        );
        assert!(p.get("path_regex").is_none());
    }
    let b = assert_refused(
        &r,
        r.propose("tok-a", reserve(false)).await,
        464,
        "ERR_RCNS_REFUSED",
        Some("rcns-disabled"),
    )
    .await;
    assert_eq!(b["lock"], 1);
    let (parts, _) = r.call("DISCOVER", "/nothing", None, &[], None).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_edit_leaves_existing_contracts_on_their_captured_version() {
    let r = Rcns::start("").await;
    let (_, v1) = r.propose("tok-a", reserve(true)).await;
    // The operator edits the recipe (a new version, another second step) and reloads.
    let mut lock = r.b.lock();
    let mut set = palisade::cli::sample_bundle::recipes();
    set["recipes"][0]["version"] = json!("2");
    set["recipes"][0]["description"] = json!("Sets an item's stock only.");
    set["recipes"][0]["steps"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    set["recipes"][0]["output"] = json!("{item: steps[0], allocation: `null`}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(r.b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&r.b.lockfile, lock.to_string()).unwrap();
    let (status, doc) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");

    let (_, patterns) = r.call("DISCOVER", "/patterns", None, &[], None).await;
    assert_eq!(patterns["patterns"][0]["recipe_version"], "2");
    let (_, old) = r
        .get(
            "INSPECT",
            &format!("/contracts/{}", v1["synthesis_id"].as_str().unwrap()),
            "tok-a",
        )
        .await;
    assert_eq!(old["recipe_lineage"]["recipe_version"], "1");
    assert_eq!(old["contract_hash"], v1["contract_hash"]);
    // A new proposal gets the new version, and a new contract.
    let (_, v2) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(v2["recipe_lineage"]["recipe_version"], "2");
    assert_eq!(v2["endpoint"]["description"], "Sets an item's stock only.");
    assert_ne!(v2["synthesis_id"], v1["synthesis_id"]);
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

    /// With `more` config after `[rcns]`, the callers file replaced when `callers_doc` is
    /// given, and `auth` sent with every request.
    async fn start_with(
        rcns_extra: &str,
        more: &str,
        callers_doc: Option<(&Value, &str)>,
    ) -> WithSor {
        let sor_dir = tempfile::tempdir().unwrap();
        let sor =
            palisade::cli::sample_sor::SampleSor::open(&sor_dir.path().join("inventory.json"))
                .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(sor.clone().serve(listener));
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
        WithSor {
            p: Palisade::start_in(dir, &text),
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

/// Jobs the store has committed (`palisade_store_batch_jobs_sum`).
fn store_jobs(metrics: &str) -> f64 {
    metrics
        .lines()
        .find(|l| l.starts_with("palisade_store_batch_jobs_sum"))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or(0.0)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_synthesized_endpoint_runs_its_steps_as_enforced_writes() {
    let r = WithSor::start("").await;
    let (id, session, approved) = r.contract().await;
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let (_, metrics_before) = admin_get(r.p.admin, "/metrics").await;
    let sor_before = r.sor_app.requests();
    let (parts, out) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(parts.headers["contract-synthesized"], id.as_str());
    // Issue 35: a step is one plain enforced write. Its lease is granted in process, so the
    // SoR sees one pre-image GET and one write per step, and the store commits what a plain
    // write commits (the epoch advance, the receipt), plus what the invocation itself keeps.
    let sor_after = r.sor_app.requests();
    assert_eq!(
        (sor_after.0 - sor_before.0, sor_after.1 - sor_before.1),
        (2, 2),
        "(GETs, writes) the SoR answered for a two-step composition"
    );
    let (_, metrics_after) = admin_get(r.p.admin, "/metrics").await;
    // Two steps of two jobs each (the advance, the receipt) and the invocation's own two; a
    // grant adds none. (With the grant a lease-authority call of its own, it was 8, and the
    // SoR answered 4 GETs: docs/performance.md.)
    let jobs = store_jobs(&metrics_after) - store_jobs(&metrics_before);
    assert!(jobs <= 6.0, "store jobs for a two-step composition: {jobs}");
    // The answer is the recipe's output mapping over both steps' answers.
    assert_eq!(
        out["item"],
        json!({"id": "BOLT-9", "sku": "BOLT-9", "qty": 40, "warehouse": "BER-1"})
    );
    assert_eq!(out["allocation"]["AllocationID"], "SO-1234");
    assert_eq!(out["allocation"]["Quantity"], 40);
    // The SoR has both records, written by the two bound operations.
    let (s, item) = r.sor_get("/api/v2/items/BOLT-9").await;
    assert_eq!((s, item["qty"].as_u64()), (StatusCode::OK, Some(40)));
    let (s, alloc) = r.sor_get("/legacy/v1/allocations/SO-1234").await;
    assert_eq!(
        (s, alloc["ItemCode"].as_str()),
        (StatusCode::OK, Some("BOLT-9"))
    );
    // Each step left a signed commit receipt of its own lease, attributed to the contract.
    let receipts = step_receipts(&parts);
    assert_eq!(receipts.len(), 2);
    for (i, envelope) in receipts.iter().enumerate() {
        assert_receipt_verifies(envelope, "commit");
        let rec = &envelope["receipt"];
        assert_eq!(rec["synthesis_id"], id.as_str());
        assert_eq!(rec["contract_hash"], approved["contract_hash"]);
        assert_eq!(rec["negotiation_origin"], "propose");
        assert_eq!(rec["rcns_step"], i);
        assert_eq!(rec["method"], "PUT");
    }
    assert!(receipts[0]["receipt"]["sor_target_uri"]
        .as_str()
        .unwrap()
        .ends_with("/api/v2/items/BOLT-9"));
    assert!(receipts[1]["receipt"]["sor_target_uri"]
        .as_str()
        .unwrap()
        .ends_with("/legacy/v1/allocations/SO-1234"));
    // Both leases are the sidecar's, SNAPSHOT_RESTORE, for this caller.
    let events = drift_events(&r.p);
    let invoked: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_invoked")
        .collect();
    assert_eq!(
        (invoked.len(), invoked[0]["outcome"].as_str()),
        (1, Some("committed"))
    );
    let (_, metrics) = admin_get(r.p.admin, "/metrics").await;
    for line in [
        "palisade_rcns_contracts_synthesized_total{origin=\"propose\"} 1",
        "palisade_rcns_invocations_total{outcome=\"committed\"} 1",
        "palisade_rcns_events_total{event=\"rcns_contract_invoked\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in\n{metrics}");
    }

    // Under the contract: the input schema, the session, the agent, the method and path.
    let bad = json!({"sku": "BOLT-9", "qty": -1, "warehouse": "BER-1", "order": "SO-1234"});
    let (parts, b) = r.invoke(&id, &session, &claim, &bad).await;
    assert_eq!(
        (parts.status.as_u16(), b["code"].as_str()),
        (422, Some("ERR_CONTRACT_INPUT")),
        "{b}"
    );
    assert_eq!(b["violationLocation"], "/qty");
    let (parts, b) = r.invoke(&id, "ses-other", &claim, &input).await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (464, Some("contract-not-yours")),
        "{b}"
    );
    let (parts, b) = r
        .send(
            "RESERVE",
            "/stock-reservations",
            &[
                ("contract-synthesized", "syn_unknown"),
                ("authority-scope", &claim),
            ],
            &input,
        )
        .await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND, "{b}");
    // A scope dropped from the claim is refused before any step runs.
    let (parts, b) = r
        .invoke(
            &id,
            &session,
            "rcns:negotiate erp:stock:reserve erp:items:write",
            &input,
        )
        .await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (262, Some("scope-required")),
        "{b}"
    );
    // A revoked contract runs no more.
    let (status, _) = admin_post(r.p.admin, &format!("/admin/v1/rcns/contracts/{id}/revoke")).await;
    assert_eq!(status, StatusCode::OK);
    let (parts, b) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(
        (parts.status.as_u16(), b["reason"].as_str()),
        (464, Some("contract-revoked")),
        "{b}"
    );
    assert_receipt_verifies(&b["receipt"], "rejection");
    assert_eq!(b["receipt"]["receipt"]["synthesis_id"], id.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_composition_whose_second_step_fails_leaves_the_sor_as_it_was() {
    let r = WithSor::start("").await;
    let (id, session, _) = r.contract().await;
    let claim = FULL.join(" ");
    // BOLT-9 exists from an earlier reservation.
    let first = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    assert_eq!(
        r.invoke(&id, &session, &claim, &first).await.0.status,
        StatusCode::OK
    );
    let (_, before) = r.sor_get("/api/v2/items/BOLT-9").await;
    // Step 1 overwrites BOLT-9; step 2 is refused by the SoR (a closed order).
    let closed = json!({"sku": "BOLT-9", "qty": 7, "warehouse": "HAM-2", "order": "SO-0000"});
    let (parts, b) = r.invoke(&id, &session, &claim, &closed).await;
    assert_eq!(parts.status, StatusCode::CONFLICT, "{b}");
    assert_eq!(
        (b["code"].as_str(), b["reason"].as_str()),
        (Some("ERR_RCNS_STEP_FAILED"), Some("step-failed"))
    );
    assert_eq!(
        (b["step"].as_u64(), b["step_status"].as_u64()),
        (Some(1), Some(409))
    );
    assert_eq!(b["all_or_nothing"], true);
    // The first step's write and its compensation, both receipted; the SoR as it was.
    assert_eq!(b["receipts"].as_array().unwrap().len(), 1);
    assert_receipt_verifies(&b["receipts"][0], "commit");
    let comp = &b["compensated"][0];
    assert_eq!(comp["lease_id"], b["receipts"][0]["receipt"]["lease_id"]);
    assert_receipt_verifies(&comp["receipt"], "compensation");
    assert_eq!(
        comp["receipt"]["receipt"]["lease_id"],
        b["receipts"][0]["receipt"]["lease_id"]
    );
    let (_, after) = r.sor_get("/api/v2/items/BOLT-9").await;
    assert_eq!(after, before);
    let (s, _) = r.sor_get("/legacy/v1/allocations/SO-0000").await;
    assert_eq!(s, StatusCode::NOT_FOUND);
    assert_receipt_verifies(&b["receipt"], "rejection");
    assert_eq!(b["receipt"]["receipt"]["synthesis_id"], id.as_str());

    // A new item (absent before): compensation removes it again.
    let fresh = json!({"sku": "NUT-3", "qty": 5, "warehouse": "BER-1", "order": "SO-0000"});
    let (parts, b) = r.invoke(&id, &session, &claim, &fresh).await;
    assert_eq!(parts.status, StatusCode::CONFLICT, "{b}");
    let (s, _) = r.sor_get("/api/v2/items/NUT-3").await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "the first step's record was removed"
    );
    let events = drift_events(&r.p);
    let outcomes: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_invoked")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["committed", "compensated", "compensated"]);
}

/// The example recipe, edited: version 2 sets the item only.
fn edit_recipe(b: &BundleFiles) {
    let mut lock = b.lock();
    let mut set = palisade::cli::sample_bundle::recipes();
    set["recipes"][0]["version"] = json!("2");
    set["recipes"][0]["description"] = json!("Sets an item's stock only.");
    set["recipes"][0]["steps"]
        .as_array_mut()
        .unwrap()
        .truncate(1);
    set["recipes"][0]["output"] = json!("{item: steps[0], allocation: `null`}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&b.lockfile, lock.to_string()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contract_runs_the_recipe_it_was_made_with_after_a_hot_swap() {
    let r = WithSor::start("").await;
    let (v1, _, _) = r.contract_with(true).await;
    edit_recipe(&r.b);
    let (status, doc) = admin_post(r.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    let (v2, _, b2) = r.contract_with(true).await;
    assert_eq!(b2["recipe_lineage"]["recipe_version"], "2");
    let claim = FULL.join(" ");
    let input =
        |order: &str| json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": order});
    // v1, made before the swap, still allocates; v2 sets the item only.
    let (parts, out) = r.invoke(&v1, "", &claim, &input("SO-1111")).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(step_receipts(&parts).len(), 2);
    assert_eq!(
        r.sor_get("/legacy/v1/allocations/SO-1111").await.0,
        StatusCode::OK
    );
    let (parts, out) = r.invoke(&v2, "", &claim, &input("SO-2222")).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(out["allocation"], Value::Null);
    assert_eq!(step_receipts(&parts).len(), 1);
    assert_eq!(
        r.sor_get("/legacy/v1/allocations/SO-2222").await.0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_whose_answer_is_refused_after_the_write_is_compensated_too() {
    // The recording upstream answers `{"ok":true}` to everything: the legacy operation's
    // output contract refuses that answer after the write was sent, so both steps are undone.
    let r = Rcns::start("").await;
    let (_, c) = r.propose("tok-a", reserve(true)).await;
    let id = c["synthesis_id"].as_str().unwrap();
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = [
        ("contract-synthesized", id),
        ("authority-scope", claim.as_str()),
    ];
    let (parts, b) = r
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &headers,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{b}");
    assert_eq!(
        (b["step"].as_u64(), b["step_code"].as_str()),
        (Some(1), Some("ERR_CONTRACT_OUTPUT"))
    );
    let compensated: Vec<&str> = b["compensated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["receipt"]["receipt"]["sor_target_uri"].as_str().unwrap())
        .collect();
    assert_eq!(
        compensated,
        [
            "https://erp.example.com/legacy/v1/allocations/SO-1234",
            "https://erp.example.com/api/v2/items/BOLT-9"
        ],
        "last first"
    );
    // What the upstream saw: the two writes, then the two snapshots put back, last first,
    // each fenced with a newer epoch than the write it undoes.
    let puts: Vec<(String, String)> =
        r.s.upstream
            .requests()
            .into_iter()
            .filter(|s| s.method == "PUT")
            .map(|s| {
                let fence = s.headers["agent-fence-token"].to_str().unwrap().to_owned();
                (s.path_and_query, fence)
            })
            .collect();
    assert_eq!(
        puts,
        [
            ("/api/v2/items/BOLT-9".into(), "1".into()),
            ("/legacy/v1/allocations/SO-1234".into(), "1".into()),
            ("/legacy/v1/allocations/SO-1234".into(), "2".into()),
            ("/api/v2/items/BOLT-9".into(), "2".into()),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mtls_caller_is_known_by_its_spiffe_id() {
    const SPIFFE: &str = "spiffe://erp.example/ns/agents/sa/reserver";
    let upstream = Upstream::start().await;
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = BundleFiles::in_dir(bundle.path());
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    pki.write_server("palisade");
    let callers = dir.path().join("spiffe-callers.json");
    let doc = json!({"callers": [{"identity": SPIFFE, "agent_id": "agent-spiffe",
                                  "scopes": FULL, "trust_tier": 1}]});
    std::fs::write(&callers, doc.to_string()).unwrap();
    let extra = format!(
        "{}[rcns]\ncallers = \"{}\"\n",
        b.rich_toml(""),
        callers.display()
    );
    let text = write_config(&upstream, dir.path(), "", &extra).replacen(
        "[listen]\naddr = \"127.0.0.1:0\"\n",
        &format!(
            "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
            pki.path("server.crt").display(),
            pki.path("server.key").display(),
            pki.path("ca.pem").display()
        ),
        1,
    );
    let p = Palisade::start_in(dir, &text);
    let propose = || {
        Request::builder()
            .method(Method::from_bytes(b"PROPOSE").unwrap())
            .uri("/")
            .header("allow-rcns", "true")
            .header("authority-scope", FULL.join(" "))
            .header("content-type", "application/json")
            .body(full(
                json!({"method": "PROPOSE", "parameters": reserve(false)}).to_string(),
            ))
            .unwrap()
    };
    let agent = pki.issue_client_spiffe(SPIFFE);
    let mut c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&agent)))
        .await
        .unwrap();
    let (parts, body) = c.send(propose()).await.unwrap();
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(parts.status.as_u16(), 263, "{doc}");
    assert_eq!(doc["originating_agent_id"], "agent-spiffe");
    // A certificate from the same CA without that SPIFFE ID is another caller, unknown here.
    let other = pki.issue_client_spiffe("spiffe://erp.example/ns/agents/sa/other");
    let mut c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&other)))
        .await
        .unwrap();
    let (parts, body) = c.send(propose()).await.unwrap();
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (parts.status.as_u16(), doc["lock"].as_u64()),
        (464, Some(3)),
        "{doc}"
    );
    assert!(upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_required_admission_the_token_must_admit_every_step() {
    use support::tokens::{admission_toml, mint, ISSUER};
    let keys = tempfile::tempdir().unwrap();
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = BundleFiles::in_dir(bundle.path());
    let lock = b.lock();
    let op = |name: &str, bound: Option<Value>| {
        let c = &lock["capabilities"][name];
        let mut o = json!({"operation": c["operation"], "contractDigest": c["contractDigest"]});
        if let Some(bound) = bound {
            o["bound"] = bound;
        }
        o
    };
    let grant = |ops: Vec<Value>| json!([{"type": "rich_binding", "bindingId": b.binding_id, "operations": ops}]);
    let small =
        json!({"type": "object", "properties": {"qty": {"type": "integer", "maximum": 10}}});
    let custom = json!({
        "both": grant(vec![op("items.put", None), op("legacy.allocations.put", None)]),
        "first_only": grant(vec![op("items.put", None)]),
        "small": grant(vec![op("items.put", Some(small)), op("legacy.allocations.put", None)]),
    });
    let spec = json!({"resource": BASE, "issuer": ISSUER, "bindingId": b.binding_id,
                      "digests": {}, "custom": custom});
    let tokens = mint(keys.path(), &spec);
    // The token's subject is the caller (`sub:sha256:` of issuer and subject).
    let sub = Sha256Digest::of(format!("{ISSUER}\0agent-7").as_bytes()).to_hex();
    let doc = json!({"callers": [{"identity": format!("sub:sha256:{sub}"), "agent_id": "agent-7",
                                  "scopes": FULL, "trust_tier": 1}]});
    let token = |name: &str| format!("Bearer {}", tokens[name].as_str().unwrap());
    let r = WithSor::start_with(
        "",
        &admission_toml("required", keys.path()),
        Some((&doc, &token("both"))),
    )
    .await;
    let (id, session, _) = r.contract().await;
    let claim = FULL.join(" ");
    let input =
        |qty: u64| json!({"sku": "BOLT-9", "qty": qty, "warehouse": "BER-1", "order": "SO-1234"});
    let invoke_as = |name: &str, qty: u64| {
        let auth = token(name);
        let (id, session, claim) = (id.clone(), session.clone(), claim.clone());
        let (url, input) = (r.p.url("/stock-reservations"), input(qty));
        async move {
            let req = Request::builder()
                .method(Method::from_bytes(b"RESERVE").unwrap())
                .uri(url)
                .header("authorization", auth)
                .header("contract-synthesized", id)
                .header("session-id", session)
                .header("authority-scope", claim)
                .header("content-type", "application/json")
                .body(full(input.to_string()))
                .unwrap();
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    // A token naming only the first step's operation: refused before anything runs.
    let (status, b1) = invoke_as("first_only", 5).await;
    assert_eq!(
        (status, b1["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("ERR_NOT_ADMITTED")),
        "{b1}"
    );
    assert_eq!(
        r.sor_get("/api/v2/items/BOLT-9").await.0,
        StatusCode::NOT_FOUND
    );
    // A bound the first step's input exceeds: that step is refused, nothing was written.
    let (status, b2) = invoke_as("small", 50).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{b2}");
    assert_eq!(
        (b2["step"].as_u64(), b2["step_code"].as_str()),
        (Some(0), Some("ERR_NOT_ADMITTED"))
    );
    assert_eq!(
        r.sor_get("/api/v2/items/BOLT-9").await.0,
        StatusCode::NOT_FOUND
    );
    // Within the bound, and a token admitting both: the composition runs.
    let (status, b3) = invoke_as("small", 5).await;
    assert_eq!(status, StatusCode::OK, "{b3}");
    let (status, b4) = invoke_as("both", 50).await;
    assert_eq!(status, StatusCode::OK, "{b4}");
    assert_eq!(r.sor_get("/api/v2/items/BOLT-9").await.1["qty"], 50);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_session_contract_expires_after_its_idle_timeout() {
    let r = WithSor::start("session_idle = \"1s\"\nsession_ttl = \"1h\"\n").await;
    let (id, session, approved) = r.contract().await;
    assert_eq!(approved["idle_timeout_s"], 1);
    let claim = FULL.join(" ");
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    // Used within the idle timeout, it lives on: each use moves the timeout.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(600)).await;
        let (parts, out) = r.invoke(&id, &session, &claim, &input).await;
        assert_eq!(parts.status, StatusCode::OK, "{out}");
    }
    let (_, view) = r
        .send("INSPECT", &format!("/contracts/{id}"), &[], &json!(null))
        .await;
    assert!(view["idle_expires_at"].as_str().unwrap() < view["expires_at"].as_str().unwrap());
    assert_eq!(
        view["contract_hash"], approved["contract_hash"],
        "use is state, not contract"
    );
    // Unused for longer, it is gone.
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (parts, b) = r.invoke(&id, &session, &claim, &input).await;
    assert_eq!(parts.status, StatusCode::NOT_FOUND, "{b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_step_feeds_the_next_one_and_needs_no_lease() {
    let r = Rcns::start("").await;
    // A recipe whose first step is a bound read (`allocations.search`, sideEffect read).
    let mut set = palisade::cli::sample_bundle::recipes();
    set["capabilityScopes"]["allocations.search"] = json!(["erp:allocations:read"]);
    set["recipes"][0]["steps"] = json!([
        {"capability": "allocations.search", "body": "{sku: input.sku, warehouse: input.warehouse}"},
        {"capability": "items.put", "path": {"id": "input.sku"},
         "body": "{sku: input.sku, qty: input.qty, warehouse: input.warehouse}"}
    ]);
    set["recipes"][0]["output"] = json!("{item: steps[1], allocation: steps[0]}");
    let hex = Sha256Digest::of_json(&set).to_hex();
    std::fs::write(r.b.contracts.join(format!("{hex}.json")), set.to_string()).unwrap();
    let mut lock = r.b.lock();
    lock["rcns"]["recipesDigest"] = json!(format!("sha-256:{hex}"));
    std::fs::write(&r.b.lockfile, lock.to_string()).unwrap();
    let (status, doc) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    // Agent a lacks the read step's scope: refused before anything runs.
    let (parts, b) = r.propose("tok-a", reserve(true)).await;
    assert_eq!(parts.status.as_u16(), 455, "{b}");
    assert_eq!(b["required_scopes"], json!(["erp:allocations:read"]));
    // With it granted and claimed (the operator's file), the contract runs.
    let mut callers = callers();
    callers["callers"][0]["scopes"]
        .as_array_mut()
        .unwrap()
        .push(json!("erp:allocations:read"));
    std::fs::write(r.s.p.dir.path().join("callers.json"), callers.to_string()).unwrap();
    let (status, _) = admin_post(r.s.p.admin, "/admin/v1/reload").await;
    assert_eq!(status, StatusCode::OK);
    let claim = format!("{} erp:allocations:read", FULL.join(" "));
    let body = json!({"method": "PROPOSE", "parameters": reserve(true)});
    let (parts, c) = r
        .call(
            "PROPOSE",
            "/",
            Some("tok-a"),
            &[("allow-rcns", "true"), ("authority-scope", &claim)],
            Some(&body),
        )
        .await;
    assert_eq!(parts.status.as_u16(), 263, "{c}");
    let id = c["synthesis_id"].as_str().unwrap();
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = [
        ("contract-synthesized", id),
        ("authority-scope", claim.as_str()),
    ];
    let (parts, out) = r
        .call(
            "RESERVE",
            "/stock-reservations",
            Some("tok-a"),
            &headers,
            Some(&input),
        )
        .await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(
        out["allocation"],
        json!({"ok": true}),
        "the read's answer, as the upstream gave it"
    );
    // The read went without a lease or a fence; the write with both; one receipt, the write's.
    let seen: Vec<(String, String, bool)> =
        r.s.upstream
            .requests()
            .into_iter()
            .filter(|s| s.method != "GET")
            .map(|s| {
                (
                    s.method,
                    s.path_and_query,
                    s.headers.contains_key("agent-fence-token"),
                )
            })
            .collect();
    assert_eq!(
        seen,
        [
            ("POST".into(), "/api/v2/allocations/search".into(), false),
            ("PUT".into(), "/api/v2/items/BOLT-9".into(), true),
        ]
    );
    let receipts = step_receipts(&parts);
    assert_eq!(receipts.len(), 1);
    assert_eq!(verified_receipt(&receipts[0])["rcns_step"], 1);
}
