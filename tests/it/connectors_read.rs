//! Read connections (issue 37, RICH §9) through the real binary and a real upstream: an
//! agent-facing `GET /v2/stock/{id}` with its own query names and answer, served by a legacy
//! `GET /legacy/stock/{id}`. The query is mapped, checked against the legacy parameters and
//! sent; the answer comes back mapped and checked against the agent-facing output contract.
//! Every refusal has its code, its receipt naming both contracts and the connector, and its
//! drift event; a request that cannot be mapped reaches no one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use http::{Request, StatusCode};
use serde_json::{json, Value};

use crate::connectors::{connector, digest};
use crate::support;
use support::bundles::*;
use support::writes::*;
use support::*;

/// The agent-facing read: `warehouse` (required) and `min` (an integer) in the query.
fn v2(output: Value) -> Value {
    let mut c = contract_with_output("unknown".into(), output, "read", "reversible");
    c["structural"]["parameters"] = json!({"query": {
        "warehouse": {"required": true, "schema": {"$schema": DIALECT, "type": "string"}},
        "min": {"schema": {"$schema": DIALECT, "type": "integer", "minimum": 0}}}});
    c
}

/// The legacy read: `Location` in the SoR's own form; answers `{"ok": true}`.
fn v1() -> Value {
    let mut c = contract_with_output(
        "unknown".into(),
        json!({"$schema": DIALECT, "type": "object", "required": ["ok"],
               "properties": {"ok": {"type": "boolean"}}}),
        "read",
        "reversible",
    );
    c["structural"]["parameters"] = json!({"query": {
        "Location": {"required": true,
                     "schema": {"$schema": DIALECT, "type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}},
        "MinQty": {"schema": {"$schema": DIALECT, "type": "integer"}}}});
    c
}

const QUERY_MAP: &str = "{Location: warehouse, MinQty: min}";

/// `/v2/stock/{id}` (mapped both ways); `/v2/strict/{id}`, whose answer must say
/// `inStock: false`, which the response connector never makes; `/v2/notify/{id}`, the same
/// under `onDrift: notify`.
fn bundle(dir: &Path) -> (BundleFiles, Value) {
    let ok = json!({"$schema": DIALECT, "type": "object", "required": ["inStock"],
                    "properties": {"inStock": {"const": true}}});
    let strict = json!({"$schema": DIALECT, "type": "object", "required": ["inStock"],
                        "properties": {"inStock": {"const": false}}});
    let (v2, v2_strict, v1) = (v2(ok), v2(strict), v1());
    let b = write_bundle(
        dir,
        "urn:palisade:test:read-connectors/1",
        &[
            ("stock.v2", "GET /v2/stock/{id}", v2.clone(), None),
            ("strict.v2", "GET /v2/strict/{id}", v2_strict.clone(), None),
            ("notify.v2", "GET /v2/notify/{id}", v2_strict.clone(), None),
            ("stock.v1", "GET /legacy/stock/{id}", v1.clone(), None),
        ],
    );
    let c = &b.contracts;
    let edge = |source: &Value, id: &str| {
        let mut e = connector(c, source, &v1, &format!("urn:test:c/{id}"), QUERY_MAP);
        e["response"] = connector(
            c,
            &v1,
            source,
            &format!("urn:test:c/{id}-back"),
            "{inStock: ok}",
        );
        e
    };
    let mut notify = edge(&v2_strict, "strict");
    notify["runtime"] = json!({"onDrift": "notify"});
    let edges = [
        ("stock", "stock.v2", edge(&v2, "stock")),
        ("strict", "strict.v2", edge(&v2_strict, "strict")),
        ("notify", "notify.v2", notify),
    ];
    let mut lock = b.lock();
    lock["connections"] = edges
        .into_iter()
        .map(|(id, source, mut refs)| {
            refs["id"] = json!(id);
            refs["source"] = json!(source);
            refs["target"] = json!("stock.v1");
            refs["edgeKind"] = json!("data");
            refs
        })
        .collect();
    std::fs::write(&b.lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
    let files = BundleFiles {
        digest: digest(&lock),
        ..b
    };
    (files, lock)
}

struct Reads {
    s: Setup,
    b: BundleFiles,
    lock: Value,
    _dir: tempfile::TempDir,
}

impl Reads {
    async fn start() -> Reads {
        let dir = tempfile::tempdir().unwrap();
        let (b, lock) = bundle(dir.path());
        let s = start_configured(
            Upstream::start().await,
            tempfile::tempdir().unwrap(),
            "",
            &b.rich_toml(""),
        );
        Reads {
            s,
            b,
            lock,
            _dir: dir,
        }
    }

    async fn get(&self, path: &str) -> (http::response::Parts, Value) {
        let req = Request::get(self.s.p.url(path)).body(full("")).unwrap();
        let (parts, bytes) = send(&http1_client(), req).await;
        (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// What the upstream received, as `METHOD path?query`.
    fn seen(&self) -> Vec<String> {
        self.s
            .upstream
            .requests()
            .into_iter()
            .map(|s| format!("{} {}", s.method, s.path_and_query))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v2_read_reaches_the_legacy_read_mapped_and_its_answer_comes_back_mapped() {
    let r = Reads::start().await;
    let (parts, doc) = r.get("/v2/stock/7?warehouse=BER-1&min=3").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    assert_eq!(doc, json!({"inStock": true}), "{{ok:true}} mapped back");
    assert_eq!(
        parts.headers.get("content-length").unwrap(),
        &serde_json::to_vec(&doc).unwrap().len().to_string()
    );
    // The upstream received the legacy read, its query in the legacy names, nothing else:
    // no body, and `min` as the integer the contract reads it as.
    let seen = r.s.upstream.requests();
    assert_eq!(r.seen(), ["GET /legacy/stock/7?Location=BER-1&MinQty=3"]);
    assert_eq!(seen[0].body_len, 0);
    // A read leaves no receipt: the answer carries none.
    assert!(parts.headers.get("agent-commit-receipt").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_connector_refusals_have_their_codes_receipts_and_events_and_reach_no_one() {
    let r = Reads::start().await;
    let conn = &r.lock["connections"][0];
    // (path, code, status, location): the source contract's parameters; the connector's
    // precondition (capital SKUs, on an undeclared name it sees as text); the legacy
    // parameters after mapping (`Location`'s pattern); a body on a read.
    let cases = [
        (
            "/v2/stock/7?warehouse=BER-1&min=many",
            "ERR_CONTRACT_INPUT",
            422,
            Some("/query/min"),
        ),
        (
            "/v2/stock/7?warehouse=BER-1&sku=bolt%20m8",
            "ERR_CONNECTOR_FAILED",
            422,
            Some("/sku"),
        ),
        (
            "/v2/stock/7?warehouse=berlin-7777",
            "ERR_CONNECTOR_POSTCONDITION",
            422,
            Some("/query/Location"),
        ),
    ];
    for (path, code, status, location) in cases {
        let (parts, doc) = r.get(path).await;
        assert_eq!(parts.status.as_u16(), status, "{code}: {doc}");
        assert_eq!(doc["code"], code, "{doc}");
        if let Some(l) = location {
            assert_eq!(doc["violationLocation"], l, "{doc}");
        }
        for value in ["bolt", "berlin-7777", "many"] {
            assert!(!doc.to_string().contains(value), "no value echoed: {doc}");
        }
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    // The mapping's refusals name the connection; the first was the source contract's own.
    let (_, doc) = r.get("/v2/stock/7?warehouse=berlin-7777").await;
    assert_eq!(
        doc["receipt"]["receipt"]["connector"],
        json!({"source_contract_digest": r.lock["capabilities"]["stock.v2"]["contractDigest"],
               "target_contract_digest": r.lock["capabilities"]["stock.v1"]["contractDigest"],
               "connector_digest": conn["connectorDigest"],
               "response_connector_digest": conn["response"]["connectorDigest"]})
    );
    // A read that says it has a body: its connector maps the query, so it is refused.
    let req = Request::get(r.s.p.url("/v2/stock/7?warehouse=BER-1"))
        .header("content-type", "application/json")
        .body(full(r#"{"Location":"ZZZ-1"}"#))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT");
    assert_eq!(doc["violationLocation"], "");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert!(
        r.seen().is_empty(),
        "nothing reached the upstream: {:?}",
        r.seen()
    );

    // An answer the connector maps into something the v2 contract refuses: 502, a receipt,
    // no commit receipt (a read commits nothing).
    let (parts, doc) = r.get("/v2/strict/7?warehouse=BER-1").await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONNECTOR_POSTCONDITION");
    assert_eq!(doc["violationLocation"], "/inStock");
    assert_eq!(doc["upstream_status"], 200);
    assert!(doc.get("commit_receipt").is_none(), "{doc}");
    assert_receipt_verifies(&doc["receipt"], "rejection");
    // Under notify, the legacy answer as it came.
    let (parts, doc) = r.get("/v2/notify/7?warehouse=BER-1").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    assert_eq!(doc, json!({"ok": true}));
    assert_eq!(
        r.seen(),
        [
            "GET /legacy/stock/7?Location=BER-1",
            "GET /legacy/stock/7?Location=BER-1"
        ]
    );

    let events = drift_events(&r.s.p);
    let failed = events
        .iter()
        .find(|e| e["code"] == "ERR_CONNECTOR_FAILED")
        .expect("a connector-failed drift event");
    assert_eq!(failed["expectedDigest"], conn["connectorDigest"]);
    assert_eq!(failed["bindingId"], r.b.binding_id);
    let post: Vec<&Value> = events
        .iter()
        .filter(|e| e["code"] == "ERR_CONNECTOR_POSTCONDITION")
        .collect();
    let actions: Vec<&Value> = post.iter().map(|e| &e["actionTaken"]).collect();
    // The request side twice (two refused reads), the answer side blocked, then notified.
    assert_eq!(post.len(), 4, "{events:?}");
    assert!(actions.contains(&&json!("notify")), "{actions:?}");
    let input = events
        .iter()
        .filter(|e| e["code"] == "ERR_CONTRACT_INPUT")
        .count();
    assert_eq!(input, 2, "the source parameters and the body: {events:?}");
    assert!(!serde_json::to_string(&events).unwrap().contains("berlin"));
}

/// The compiler's side: a read cannot stand in for a write, and a read connection maps its
/// answer.
#[test]
fn a_read_connection_without_an_answer_mapping_or_onto_a_write_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let (b, mut lock) = bundle(dir.path());
    lock["connections"][0]
        .as_object_mut()
        .unwrap()
        .remove("response");
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let out = lock_check(&b.lockfile, &b.contracts);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("is required on a read connection"), "{text}");
}
