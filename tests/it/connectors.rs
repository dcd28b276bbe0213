//! RICH connectors on the data plane (issue 23, RICH §3.2/§9/§11.2) through the real binary and
//! a real upstream: an agent-facing v2 contract in front of a legacy v1 operation. What the
//! upstream received is asserted byte for byte; every refusal has its code, its signed receipt
//! naming both contracts and the connector, and its drift event, and reaches no one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::writes::*;
use support::*;

mod mapped;

const T1: &str = "urn:palisade:connector-profile:t1-jmespath:1";

pub(crate) fn digest(doc: &Value) -> String {
    format!("sha-256:{}", Sha256Digest::of_json(doc).to_hex())
}

pub(crate) fn put_file(dir: &Path, doc: &Value) -> String {
    std::fs::write(
        dir.join(format!("{}.json", Sha256Digest::of_json(doc).to_hex())),
        serde_json::to_vec_pretty(doc).unwrap(),
    )
    .unwrap();
    digest(doc)
}

/// The agent-facing contract: `sku`, `qty`, `warehouse`; answers `{"allocated": true}`.
fn v2(output: Value) -> Value {
    contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty", "warehouse"],
               "additionalProperties": false,
               "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 1},
                              "warehouse": {"type": "string"}}}),
        output,
        "write",
        "compensable",
    )
}

/// The legacy contract: other names, a stricter `Location`; answers `{"ok": true}`.
fn v1() -> Value {
    contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["ItemCode", "Quantity", "Location"],
               "additionalProperties": false,
               "properties": {"ItemCode": {"type": "string"}, "Quantity": {"type": "integer"},
                              "Location": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]+$"}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["ok"],
               "properties": {"ok": {"type": "boolean"}}}),
        "write",
        "compensable",
    )
}

/// A T1 connector from `source` to `target` and a qualification record of it, written to
/// `contracts`; the lockfile's reference to both.
/// Its precondition: SKUs in capitals, which the v2 contract does not demand.
pub(crate) fn connector(
    contracts: &Path,
    source: &Value,
    target: &Value,
    id: &str,
    expr: &str,
) -> Value {
    let conn = json!({"id": id, "class": "T1", "purpose": "structural-adaptation",
        "sourceDigest": digest(source), "targetDigest": digest(target),
        "transform": {"lang": "jmespath", "expr": expr},
        "preconditions": {"$schema": DIALECT,
                          "properties": {"sku": {"type": "string", "pattern": "^[A-Z0-9-]+$"}}},
        "postconditions": {},
        "qualification": "urn:test:qualifications/allocations"});
    let qual = json!({"subjectUri": id, "subjectDigest": digest(&conn),
        "profile": "urn:test:qualification-profile:1", "evidence": [], "scope": "integration test",
        "findings": [], "decision": "qualified", "qualifier": "urn:test:qualifier",
        "expiry": "2099-01-01T00:00:00Z"});
    json!({"connectorDigest": put_file(contracts, &conn), "connectorProfile": T1,
           "connectorQualificationDigest": put_file(contracts, &qual)})
}

const REQUEST_MAP: &str = "{ItemCode: sku, Quantity: qty, Location: warehouse}";

/// v2 → v1 connections: `/v2/items/{id}/allocations` (answers mapped back);
/// `/v2/strict/{id}/allocations`, whose v2 answer must be `allocated: false`, which the response
/// connector never produces (the response-side postcondition); `/v2/notify/{id}/allocations`,
/// the same under `onDrift: notify`; `/v2/badout/{id}/allocations` in front of a legacy
/// operation whose output contract the upstream's answer breaks (`id` required).
fn bundle(dir: &Path) -> (BundleFiles, Value) {
    let ok = json!({"$schema": DIALECT, "type": "object", "required": ["allocated"],
                    "properties": {"allocated": {"const": true}}});
    let strict = json!({"$schema": DIALECT, "type": "object", "required": ["allocated"],
                        "properties": {"allocated": {"const": false}}});
    let (v2, v2_strict, v1) = (v2(ok), v2(strict), v1());
    let mut v1_badout = v1.clone();
    v1_badout["structural"]["output"]["required"] = json!(["ok", "id"]);
    let b = write_bundle(
        dir,
        "urn:palisade:test:connectors/1",
        &[
            (
                "alloc.v2",
                "POST /v2/items/{id}/allocations",
                v2.clone(),
                None,
            ),
            (
                "strict.v2",
                "POST /v2/strict/{id}/allocations",
                v2_strict.clone(),
                None,
            ),
            (
                "alloc.v1",
                "POST /legacy/items/{id}/allocate",
                v1.clone(),
                None,
            ),
            (
                "notify.v2",
                "POST /v2/notify/{id}/allocations",
                v2_strict.clone(),
                None,
            ),
            (
                "badout.v2",
                "POST /v2/badout/{id}/allocations",
                v2.clone(),
                None,
            ),
            (
                "badout.v1",
                "POST /legacy/badout/{id}/allocate",
                v1_badout.clone(),
                None,
            ),
        ],
    );
    let c = &b.contracts;
    let mut first = connector(c, &v2, &v1, "urn:test:c/alloc", REQUEST_MAP);
    first["response"] = connector(c, &v1, &v2, "urn:test:c/alloc-back", "{allocated: ok}");
    let mut second = connector(c, &v2_strict, &v1, "urn:test:c/strict", REQUEST_MAP);
    second["response"] = connector(
        c,
        &v1,
        &v2_strict,
        "urn:test:c/strict-back",
        "{allocated: ok}",
    );
    // The same connectors (the same contracts) under the notify policy.
    let mut notify = second.clone();
    notify["runtime"] = json!({"onDrift": "notify"});
    let mut badout = connector(c, &v2, &v1_badout, "urn:test:c/badout", REQUEST_MAP);
    badout["response"] = connector(
        c,
        &v1_badout,
        &v2,
        "urn:test:c/badout-back",
        "{allocated: ok}",
    );
    let mut lock = b.lock();
    // `strict.v2` and `notify.v2` have the same legacy target as `alloc.v2`: several
    // agent-facing revisions on one operation.
    let edges = [
        ("alloc", "alloc.v2", "alloc.v1", first),
        ("strict", "strict.v2", "alloc.v1", second),
        ("notify", "notify.v2", "alloc.v1", notify),
        ("badout", "badout.v2", "badout.v1", badout),
    ];
    lock["connections"] = edges
        .into_iter()
        .map(|(id, source, target, mut refs)| {
            refs["id"] = json!(id);
            refs["source"] = json!(source);
            refs["target"] = json!(target);
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

/// A sidecar with [`bundle`] loaded in front of a real upstream.
struct Connected {
    s: Setup,
    b: BundleFiles,
    lock: Value,
    agent: KeyPair,
    _bundle_dir: tempfile::TempDir,
}

impl Connected {
    async fn start(rich_extra: &str) -> Connected {
        let bundle_dir = tempfile::tempdir().unwrap();
        let (b, lock) = bundle(bundle_dir.path());
        let s = start_configured(
            Upstream::start().await,
            tempfile::tempdir().unwrap(),
            "",
            &b.rich_toml(rich_extra),
        );
        Connected {
            s,
            b,
            lock,
            agent: KeyPair::from_seed(AGENT_SEED),
            _bundle_dir: bundle_dir,
        }
    }

    /// A lease for `path` (the legacy target) at `epoch`.
    fn lease(&self, path: &str, epoch: u64) -> String {
        lease_for(&self.agent, path, epoch, |_| {})
    }

    /// POSTs `body` to `path` with `lease` and the test inverse.
    async fn post(&self, path: &str, lease: &str, body: &str) -> (http::response::Parts, Value) {
        let req = Request::post(self.s.p.url(path))
            .header("content-type", "application/json")
            .header(
                "agent-compensation-inverse",
                URL_SAFE_NO_PAD.encode(inverse_for_lease(lease)),
            )
            .header("agent-compensation-lease", lease)
            .body(full(body.to_owned()))
            .unwrap();
        let (parts, bytes) = send(&http1_client(), req).await;
        let doc = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        (parts, doc)
    }

    /// The writes the upstream received.
    fn writes(&self) -> Vec<Seen> {
        self.s
            .upstream
            .requests()
            .into_iter()
            .filter(|s| s.method != "GET")
            .collect()
    }
}

/// The receipt of an answer, verified with the log key.
fn receipt_of(parts: &http::response::Parts) -> Value {
    verified_receipt(&envelope(parts))
}

/// The envelope in an answer's `Agent-Commit-Receipt`.
fn envelope(parts: &http::response::Parts) -> Value {
    let h = parts
        .headers
        .get("agent-commit-receipt")
        .expect("a receipt");
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h.as_bytes()).unwrap()).unwrap()
}

const V2_BODY: &str = r#"{"sku":"B","qty":5,"warehouse":"BER-1"}"#;
