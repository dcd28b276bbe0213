//! AGTP-RCNS recipes whose steps are MCP tools (issue 37), with the official MCP SDK server
//! behind the sidecar: `RESTOCK /restock` sets one item's level (a write tool, under a lease
//! the sidecar grants with the recipe's inverse tool call staged), adds two numbers (a read
//! tool) and sets a second item's level from that sum. When the last step is refused, the
//! first is compensated by its inverse tool call, and the server shows both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use http::{Method, Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use serde_json::{json, Value};

use crate::connectors::{digest, put_file};
use crate::mcp::{sidecar_with, McpServer};
use crate::support;
use support::bundles::*;
use support::writes::*;
use support::*;

const CLAIM: &str = "rcns:negotiate erp:stock:restock erp:stock:write erp:stock:read";

/// The tools and the recipe set: step 0 writes `set_level` (inverse: the same sku back to 0),
/// step 1 reads `add`, step 2 writes `set_level` for `sku2` with step 1's sum.
fn bundle(dir: &Path) -> BundleFiles {
    bundle_with(dir, json!("unknown"))
}

/// [`bundle`], `set_level`'s answers held to `output`.
fn bundle_with(dir: &Path, output: Value) -> BundleFiles {
    let mut set_level = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "qty"],
               "properties": {"sku": {"type": "string"}, "qty": {"type": "integer", "minimum": 0}}}),
        output,
        "write",
        "compensable",
    );
    set_level["state"] = json!({"handle": "sku"});
    let add = contract_with_output(
        json!({"$schema": DIALECT, "type": "object", "required": ["a", "b"]}),
        json!({"$schema": DIALECT, "type": "object", "required": ["result"]}),
        "read",
        "reversible",
    );
    let b = write_mcp_bundle(
        dir,
        "urn:palisade:test:rcns-mcp/1",
        &[("set_level", "set_level", set_level), ("add", "add", add)],
    );
    let inverse = json!({"tool": "set_level", "arguments": "{sku: arguments.sku, qty: `0`}"});
    let recipes = json!({
        "capabilityScopes": {"set_level": ["erp:stock:write"], "add": ["erp:stock:read"]},
        "recipes": [{
            "name": "restock", "version": "1", "method": "RESTOCK", "path_exact": "/restock",
            "description": "Sets two items' levels, the second from a sum: both or neither.",
            "required_scopes": ["erp:stock:restock"], "trust_tier": 2,
            "semantic": {"intent": "restock two items"},
            "input_schema": {"$schema": DIALECT, "type": "object",
                             "required": ["sku", "qty", "sku2", "extra"]},
            "output_schema": {"$schema": DIALECT, "type": "object"},
            "steps": [
                {"capability": "set_level", "arguments": "{sku: input.sku, qty: input.qty}",
                 "inverse": inverse},
                {"capability": "add", "arguments": "{a: input.qty, b: input.extra}"},
                {"capability": "set_level", "arguments": "{sku: input.sku2, qty: steps[1].result}",
                 "inverse": inverse}
            ],
            "output": "{first: steps[0], total: steps[1].result, second: steps[2]}"
        }]
    });
    let mut lock = b.lock();
    lock["rcns"] = json!({"recipesDigest": put_file(&b.contracts, &recipes)});
    std::fs::write(&b.lockfile, serde_json::to_vec_pretty(&lock).unwrap()).unwrap();
    BundleFiles {
        digest: digest(&lock),
        ..b
    }
}

/// The callers file: `tok-a`'s identity holds every scope the recipe needs.
fn callers(dir: &Path) -> String {
    let id = Sha256Digest::of(b"bearer tok-a").to_hex();
    let doc = json!({"callers": [{"identity": format!("authz:sha256:{id}"),
        "agent_id": "agent-a", "scopes": CLAIM.split(' ').collect::<Vec<_>>(), "trust_tier": 1}]});
    let file = dir.join("callers.json");
    std::fs::write(&file, doc.to_string()).unwrap();
    format!("[rcns]\ncallers = \"{}\"\n", file.display())
}

async fn send(
    p: &Palisade,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &Value,
) -> (http::response::Parts, Value) {
    let mut req = Request::builder()
        .method(Method::from_bytes(method.as_bytes()).unwrap())
        .uri(p.url(path))
        .header("authorization", "Bearer tok-a")
        .header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(full(body.to_string())).unwrap();
    let (parts, bytes) = support::send(&http1_client(), req).await;
    (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

/// PROPOSEs `RESTOCK /restock` as `tok-a`: the synthesis id and the session it lives in.
async fn propose_restock(p: &Palisade) -> (String, String) {
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {
        "method": "RESTOCK", "path": "/restock", "description": "restock",
        "semantic": {"intent": "restock two items"},
        "input_schema": {"$schema": DIALECT, "type": "object"}}, "persistent": false}});
    let headers = [("allow-rcns", "true"), ("authority-scope", CLAIM)];
    let (parts, body) = send(p, "PROPOSE", "/", &headers, &proposal).await;
    assert_eq!(parts.status.as_u16(), 263, "{body}");
    let id = body["synthesis_id"].as_str().unwrap().to_owned();
    let session = parts.headers["session-id"].to_str().unwrap().to_owned();
    (id, session)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recipe_of_tool_calls_commits_whole_or_is_compensated_by_inverse_tool_calls() {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    // A write budget on the tool (SPEC §14): composed tool calls spend it like any write.
    let budgets = "[budgets]\nrules = [{ name = \"levels\", per = [\"operation\"], limit = 5, window = \"1m\" }]\n";
    let p = sidecar_with(&server, &b, &(callers(dir.path()) + budgets));
    let (id, session) = propose_restock(&p).await;
    let invoke = [
        ("contract-synthesized", id.as_str()),
        ("session-id", session.as_str()),
        ("authority-scope", CLAIM),
    ];

    // All three steps: two writes the server ran, with the legacy names, and a read.
    let input = json!({"sku": "R-1", "qty": 5, "sku2": "R-2", "extra": 2});
    let (parts, out) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    assert_eq!(
        out,
        json!({"first": {"sku": "R-1", "qty": 5}, "total": 7, "second": {"sku": "R-2", "qty": 7}})
    );
    assert_eq!(server.executions(), ["set_level R-1 5", "set_level R-2 7"]);
    // Each write step left a commit receipt for its tool under a lease the sidecar granted
    // (COMPENSATING_ACTION: the inverse tool call staged with it), attributed to the contract.
    let h = parts.headers["agent-commit-receipts"].as_bytes();
    use base64::Engine as _;
    let receipts: Vec<Value> = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(h)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(receipts.len(), 2, "{receipts:?}");
    for (envelope, step) in receipts.iter().zip([0, 2]) {
        assert_receipt_verifies(envelope, "commit");
        let r = &envelope["receipt"];
        assert_eq!(r["sor_target_uri"], format!("{BASE}/mcp/tools/set_level"));
        assert_eq!(r["synthesis_id"], id.as_str());
        assert_eq!(r["rcns_step"], step);
    }

    // The last step's quantity comes out negative (5 + -20): the tool's contract refuses it
    // before it is sent, and the first step is undone by its inverse tool call.
    let input = json!({"sku": "R-3", "qty": 5, "sku2": "R-4", "extra": -20});
    let (parts, b) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert_eq!(parts.status.as_u16(), 422, "{b}");
    assert_eq!(
        (b["code"].as_str(), b["reason"].as_str()),
        (Some("ERR_RCNS_STEP_FAILED"), Some("step-failed"))
    );
    assert_eq!(
        (b["step"].as_u64(), b["step_code"].as_str()),
        (Some(2), Some("ERR_CONTRACT_INPUT"))
    );
    assert_receipt_verifies(&b["step_receipt"], "rejection");
    assert_eq!(b["all_or_nothing"], true, "{b}");
    assert_receipt_verifies(&b["receipts"][0], "commit");
    let comp = &b["compensated"][0];
    assert_receipt_verifies(&comp["receipt"], "compensation");
    assert_eq!(comp["lease_id"], b["receipts"][0]["receipt"]["lease_id"]);
    assert_receipt_verifies(&b["receipt"], "rejection");
    // The server ran the first step and its inverse; the refused step never reached it.
    assert_eq!(
        server.executions(),
        [
            "set_level R-1 5",
            "set_level R-2 7",
            "set_level R-3 5",
            "set_level R-3 0"
        ]
    );
    let events = drift_events(&p);
    assert!(
        events.iter().any(|e| e["code"] == "ERR_CONTRACT_INPUT"
            && e["observedIdentifier"] == "tools/call set_level"),
        "{events:?}"
    );
    let outcomes: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "rcns_contract_invoked")
        .map(|e| e["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["committed", "compensated"]);

    // The emergency stop (SPEC §14) holds for a composed tool call too: the operation
    // `mcp:tool/set_level` frozen, the first step is refused before check 1 and nothing runs.
    let freeze =
        json!({"scope": "operation", "value": "mcp:tool/set_level", "reason": "stock audit"});
    let req = Request::post(format!("http://{}/admin/v1/freeze", p.admin))
        .header("content-type", "application/json")
        .body(full(freeze.to_string()))
        .unwrap();
    let (parts, made) = support::send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::CREATED);
    let made: Value = serde_json::from_slice(&made).unwrap();
    let input = json!({"sku": "R-5", "qty": 1, "sku2": "R-6", "extra": 1});
    let (parts, b) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert_eq!(parts.status.as_u16(), 423, "{b}");
    assert_eq!(
        (b["step"].as_u64(), b["step_code"].as_str()),
        (Some(0), Some("ERR_FROZEN"))
    );
    let rejection = verified_receipt(&b["step_receipt"]);
    assert_eq!(rejection["freeze_id"], made["id"]);
    assert_eq!(server.executions().len(), 4, "nothing more ran");

    // Lifted: the tool's budget (5 a minute; 3 spent by the composed writes above, none by the
    // refused ones) lets one more composition through, and stops the next at its first step.
    let id = made["id"].as_str().unwrap();
    let req = Request::delete(format!("http://{}/admin/v1/freeze/{id}", p.admin))
        .header("content-type", "application/json")
        .body(full(""))
        .unwrap();
    assert_eq!(
        support::send(&http1_client(), req).await.0.status,
        StatusCode::OK
    );
    let input = json!({"sku": "R-7", "qty": 1, "sku2": "R-8", "extra": 1});
    let (parts, out) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert_eq!(parts.status, StatusCode::OK, "{out}");
    let input = json!({"sku": "R-9", "qty": 1, "sku2": "R-10", "extra": 1});
    let (parts, b) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert_eq!(parts.status.as_u16(), 429, "{b}");
    assert_eq!(
        (b["step"].as_u64(), b["step_code"].as_str()),
        (Some(0), Some("ERR_WRITE_BUDGET"))
    );
    assert_receipt_verifies(&b["step_receipt"], "rejection");
    assert_eq!(
        server.executions()[4..],
        ["set_level R-7 1", "set_level R-8 2"],
        "the composition over budget ran nothing"
    );
}

/// The compiler's side: a write tool step without its inverse, and an inverse naming a tool
/// the lockfile does not bind, do not load.
#[test]
fn a_tool_step_without_a_bound_inverse_does_not_load() {
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    let mut lock = b.lock();
    let recipes_file = b.contracts.join(format!(
        "{}.json",
        &lock["rcns"]["recipesDigest"].as_str().unwrap()["sha-256:".len()..]
    ));
    let mut recipes: Value = serde_json::from_slice(&std::fs::read(recipes_file).unwrap()).unwrap();
    recipes["recipes"][0]["steps"][0]
        .as_object_mut()
        .unwrap()
        .remove("inverse");
    recipes["recipes"][0]["steps"][2]["inverse"]["tool"] = json!("drop_everything");
    lock["rcns"]["recipesDigest"] = json!(put_file(&b.contracts, &recipes));
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let out = lock_check(&b.lockfile, &b.contracts);
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("is compensated by its inverse tool call"),
        "{text}"
    );
    assert!(
        text.contains("must name an MCP tool bound in the lockfile"),
        "{text}"
    );
}

/// A step the server ran whose answer then broke its output contract (issue 55): the step
/// fails with `ERR_CONTRACT_OUTPUT` and the commit receipt the MCP leg returned to the step,
/// typed; since the call may have applied, it is compensated with the step before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_step_whose_answer_breaks_its_contract_is_compensated_too() {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    // `set_level` answers the level it set; its contract says a level is at most 100.
    let capped = json!({"$schema": DIALECT, "type": "object",
                        "properties": {"qty": {"type": "integer", "maximum": 100}}});
    let b = bundle_with(dir.path(), capped);
    let p = sidecar_with(&server, &b, &callers(dir.path()));
    let (id, session) = propose_restock(&p).await;
    let invoke = [
        ("contract-synthesized", id.as_str()),
        ("session-id", session.as_str()),
        ("authority-scope", CLAIM),
    ];

    // 5 + 200: the second write's input is valid, the server sets 205, and its answer says so.
    let input = json!({"sku": "C-1", "qty": 5, "sku2": "C-2", "extra": 200});
    let (parts, b) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert!(
        parts.status.is_client_error() || parts.status.is_server_error(),
        "{b}"
    );
    assert_eq!(
        (
            b["code"].as_str(),
            b["step"].as_u64(),
            b["step_code"].as_str()
        ),
        (
            Some("ERR_RCNS_STEP_FAILED"),
            Some(2),
            Some("ERR_CONTRACT_OUTPUT")
        ),
        "{b}"
    );
    // The step's receipt is the commit of the call the server ran (not a rejection).
    assert_receipt_verifies(&b["step_receipt"], "commit");
    assert_eq!(b["step_receipt"]["receipt"]["rcns_step"], 2, "{b}");
    // Both writes are undone, the one whose answer was refused included.
    let compensated = b["compensated"].as_array().expect("compensated");
    assert_eq!(compensated.len(), 2, "{b}");
    for c in compensated {
        assert_receipt_verifies(&c["receipt"], "compensation");
    }
    let ran = server.executions();
    assert_eq!(
        &ran[..2],
        ["set_level C-1 5", "set_level C-2 205"],
        "{ran:?}"
    );
    let mut undone = ran[2..].to_vec();
    undone.sort();
    assert_eq!(undone, ["set_level C-1 0", "set_level C-2 0"], "{ran:?}");
}

/// A server's own JSON-RPC error whose `data` imitates the sidecar's problem (a code of ours,
/// a 5xx status, a receipt) names no code of the sidecar's in the step's failure, and its
/// "receipt" is not the step's: the step's code, receipt and "may have applied" come typed
/// from the engine (issue 55), and the receipt is the commit of the call that was sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_servers_error_that_imitates_our_problem_is_not_taken_for_it() {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let b = bundle(dir.path());
    let p = sidecar_with(&server, &b, &callers(dir.path()));
    let (id, session) = propose_restock(&p).await;
    let invoke = [
        ("contract-synthesized", id.as_str()),
        ("session-id", session.as_str()),
        ("authority-scope", CLAIM),
    ];
    let input = json!({"sku": "C-1", "qty": 5, "sku2": "FORGE", "extra": 1});
    let (parts, b) = send(&p, "RESTOCK", "/restock", &invoke, &input).await;
    assert!(!parts.status.is_success(), "{b}");
    assert_eq!(
        (b["code"].as_str(), b["step"].as_u64()),
        (Some("ERR_RCNS_STEP_FAILED"), Some(2)),
        "{b}"
    );
    // Not the forged code, and not the forged receipt: the commit receipt of the call the
    // sidecar sent, signed, naming the step.
    assert_ne!(b["step_code"], "ERR_CONTRACT_OUTPUT", "{b}");
    assert_ne!(
        b["step_receipt"]["receipt"]["receipt_id"], "urn:uuid:forged",
        "{b}"
    );
    assert_receipt_verifies(&b["step_receipt"], "commit");
    assert_eq!(b["step_receipt"]["receipt"]["rcns_step"], 2, "{b}");
    // The server's own error is its answer, not a sidecar failure after sending: only the
    // step before it is undone.
    let compensated = b["compensated"].as_array().expect("compensated");
    assert_eq!(compensated.len(), 1, "{b}");
    let ran = server.executions();
    assert_eq!(
        ran,
        ["set_level C-1 5", "set_level FORGE 6", "set_level C-1 0"],
        "{ran:?}"
    );
}
