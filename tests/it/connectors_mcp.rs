//! RICH connections between MCP tools (issue 37), with the official MCP SDK on both sides: an
//! agent-facing `stock.set` (its own argument names) served by the SDK server's `set_level`,
//! and an agent-facing `sum` served by its `add`. The arguments are mapped and checked
//! against the legacy tool's contract; the result's `structuredContent` comes back mapped and
//! checked against the agent-facing output contract. Every refusal has its code, its receipt
//! naming both contracts and the connector, and its drift event; a call that cannot be mapped
//! reaches no one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

use crate::connectors::{connector, digest};
use crate::mcp::{client, meta, sidecar, tool_lease, McpServer};
use crate::support;
use support::bundles::*;
use support::wait;
use support::writes::*;

/// The legacy tools as the SDK server has them, and two agent-facing tools mapped onto them.
pub(crate) fn bundle(dir: &Path) -> (BundleFiles, Value) {
    let mut set_level = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"],
               "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 0}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"]}),
        "write",
        "compensable",
    );
    set_level["state"] = json!({"handle": "sku"});
    // The agent-facing write: `level`, at most 1,000 (the legacy tool takes any `qty`).
    let stock_set = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "level"],
               "additionalProperties": false,
               "properties": {"sku": {"type": "string"},
                              "level": {"type": "integer", "maximum": 1000}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "level"],
               "properties": {"level": {"type": "integer"}}}),
        "write",
        "compensable",
    );
    let add = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["a", "b"]}),
        json!({"$schema": DIALECT, "type": "object", "required": ["result"],
               "properties": {"result": {"type": "integer", "maximum": 100}}}),
        "read",
        "reversible",
    );
    // The agent-facing read: totals above 10 break its output contract (the legacy one allows
    // 100), which the mapped answer of 6 + 7 shows.
    let sum = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["x", "y"],
               "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["total"],
               "properties": {"total": {"type": "integer", "maximum": 10}}}),
        "read",
        "reversible",
    );
    let b = write_mcp_bundle(
        dir,
        "urn:palisade:test:mcp-connectors/1",
        &[
            ("set_level", "set_level", set_level.clone()),
            ("stock.set", "stock.set", stock_set.clone()),
            ("add", "add", add.clone()),
            ("sum", "sum", sum.clone()),
        ],
    );
    let c = &b.contracts;
    // The request connector's precondition (from the HTTP connector tests): capital SKUs.
    let mut stock = connector(
        c,
        &stock_set,
        &set_level,
        "urn:test:c/stock",
        "{sku: sku, qty: level}",
    );
    stock["response"] = connector(
        c,
        &set_level,
        &stock_set,
        "urn:test:c/stock-back",
        "{sku: sku, level: qty}",
    );
    let mut summed = connector(c, &sum, &add, "urn:test:c/sum", "{a: x, b: y}");
    summed["response"] = connector(c, &add, &sum, "urn:test:c/sum-back", "{total: result}");
    let mut lock = b.lock();
    lock["connections"] = json!([
        {"id": "stock", "source": "stock.set", "target": "set_level", "edgeKind": "data"},
        {"id": "sum", "source": "sum", "target": "add", "edgeKind": "data"},
    ]);
    for (i, refs) in [stock, summed].into_iter().enumerate() {
        for (k, v) in refs.as_object().unwrap() {
            lock["connections"][i][k] = v.clone();
        }
    }
    std::fs::write(&b.lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
    let files = BundleFiles {
        digest: digest(&lock),
        ..b
    };
    (files, lock)
}

async fn connected_tool_calls(mode: &'static str) {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (b, lock) = bundle(dir.path());
    let p = sidecar(&server, &b);
    let steps = json!([
        // 0: mapped both ways; the lease names the legacy tool the server runs.
        {"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": 5},
         "meta": meta(tool_lease("set_level", 1))},
        // 1: a read tool, mapped both ways.
        {"op": "call", "name": "sum", "args": {"x": 2, "y": 3}},
        // 2: the source contract (level ≤ 1,000).
        {"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": 4321},
         "meta": meta(tool_lease("set_level", 2))},
        // 3: the connector's precondition (capital SKUs).
        {"op": "call", "name": "stock.set", "args": {"sku": "bolt m8", "level": 1},
         "meta": meta(tool_lease("set_level", 2))},
        // 4: the target contract after mapping (qty ≥ 0).
        {"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": -3},
         "meta": meta(tool_lease("set_level", 2))},
        // 5: a lease that names the agent-facing tool, not the one the server runs.
        {"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": 6},
         "meta": meta(tool_lease("stock.set", 2))},
        // 6: the answer, mapped, breaks the agent-facing output contract (13 > 10).
        {"op": "call", "name": "sum", "args": {"x": 6, "y": 7}},
    ]);
    let out = client(p.url("/mcp"), mode, steps).await;
    assert_eq!(out.len(), 7, "{out:?}");
    // The mapped result, and a commit receipt for the legacy tool naming the connection.
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(
        out[0]["result"],
        json!({"sku": "SKU-1", "level": 5}),
        "{out:?}"
    );
    let r = verified_receipt(&out[0]["meta"]["commitReceipt"]);
    assert_eq!(r["kind"], "commit");
    assert_eq!(r["sor_target_uri"], format!("{BASE}/mcp/tools/set_level"));
    let caps = &lock["capabilities"];
    assert_eq!(
        r["connector"],
        json!({"source_contract_digest": caps["stock.set"]["contractDigest"],
               "target_contract_digest": caps["set_level"]["contractDigest"],
               "connector_digest": lock["connections"][0]["connectorDigest"],
               "response_connector_digest": lock["connections"][0]["response"]["connectorDigest"]})
    );
    assert_eq!(out[1]["result"], json!({"total": 5}), "{out:?}");

    // The refusals: code, location, a rejection receipt naming the connector, no value.
    let cases = [
        (2, "ERR_CONTRACT_INPUT", "/level", "4321"),
        (3, "ERR_CONNECTOR_FAILED", "/sku", "bolt m8"),
        (4, "ERR_CONNECTOR_POSTCONDITION", "/qty", "-3"),
    ];
    for (i, code, location, value) in cases {
        let e = &out[i]["error"]["data"];
        assert_eq!(e["code"], code, "{i}: {out:?}");
        assert_eq!(e["violationLocation"], location, "{i}: {e}");
        // The problem's own words (its receipt's hashes and ids are not text of the call).
        let mut words = e.clone();
        words.as_object_mut().unwrap().remove("receipt");
        words.as_object_mut().unwrap().remove("instance");
        assert!(!words.to_string().contains(value), "no value echoed: {e}");
        assert_receipt_verifies(&e["receipt"], "rejection");
        assert_eq!(
            e["receipt"]["receipt"]["connector"]["connector_digest"],
            lock["connections"][0]["connectorDigest"],
            "{e}"
        );
    }
    assert_eq!(
        out[5]["error"]["data"]["code"], "ERR_TARGET_MISMATCH",
        "{out:?}"
    );
    let e = &out[6]["error"]["data"];
    assert_eq!(e["code"], "ERR_CONNECTOR_POSTCONDITION", "{out:?}");
    assert_eq!(e["violationLocation"], "/structuredContent/total");
    assert_receipt_verifies(&e["receipt"], "rejection");

    // The server ran the one permitted write, with the legacy argument names.
    assert_eq!(server.executions(), vec!["set_level SKU-1 5"]);

    // The answer's drift events may follow the answer (it is checked as it is relayed).
    wait::until(
        "the connector-failed drift event is kept",
        Duration::from_secs(5),
        || {
            drift_events(&p)
                .iter()
                .any(|e| e["code"] == "ERR_CONNECTOR_FAILED")
        },
    )
    .await;
    let events = drift_events(&p);
    let failed = events
        .iter()
        .find(|e| e["code"] == "ERR_CONNECTOR_FAILED")
        .expect("a connector-failed drift event");
    assert_eq!(
        failed["expectedDigest"],
        lock["connections"][0]["connectorDigest"]
    );
    assert_eq!(failed["observedIdentifier"], "tools/call stock.set");
    let answer = events
        .iter()
        .find(|e| e["violationLocation"] == "/structuredContent/total")
        .expect("the mapped answer's drift event");
    assert_eq!(
        answer["expectedDigest"],
        lock["connections"][1]["response"]["connectorDigest"]
    );
    assert_eq!(answer["actionTaken"], "blocked");
    assert!(!serde_json::to_string(&events).unwrap().contains("bolt m8"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_tool_call_is_mapped_both_ways_stateless_2026_07_28() {
    connected_tool_calls("2026-07-28").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connected_tool_call_is_mapped_both_ways_with_sessions_and_sse() {
    connected_tool_calls("legacy").await;
}

/// An MCP tool cannot be connected to an HTTP operation.
#[test]
fn a_tool_connected_to_an_http_operation_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let (b, mut lock) = bundle(dir.path());
    lock["capabilities"]["set_level"]["protocol"] = json!("http");
    lock["capabilities"]["set_level"]["operation"] = json!("POST /stock");
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let out = lock_check(&b.lockfile, &b.contracts);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("joins two capabilities of one protocol"),
        "{text}"
    );
}
