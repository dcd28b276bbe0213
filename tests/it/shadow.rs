//! A candidate bundle in shadow (SPEC §15, issue 56): the `examples/erp` bundle in force, and
//! a candidate that tightens one contract (a PUT of an item's `qty` at most 300) and adds one
//! rule (deleting an item is held). 200 mixed writes through the real binary: the counts per
//! operation and decision pair are what the candidate's changes imply, every disagreement is
//! a `shadow` drift event, and the writes themselves are decided by the bundle in force alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use palisade_policy::Sha256Digest;
use serde_json::{json, Value};

use crate::support;
use support::writes::*;
use support::*;

/// A copy of `examples/erp` in `dir` whose `PUT /api/v2/items/{id}` caps `qty` at 300.
fn tightened(dir: &std::path::Path) {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/erp");
    std::fs::create_dir_all(dir.join("contracts")).unwrap();
    for e in std::fs::read_dir(src.join("contracts")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), dir.join("contracts").join(e.file_name())).unwrap();
    }
    let mut lock: Value =
        serde_json::from_slice(&std::fs::read(src.join("lock.json")).unwrap()).unwrap();
    let caps = lock["capabilities"].as_object_mut().unwrap();
    let cap = caps
        .values_mut()
        .find(|c| c["operation"] == "PUT /api/v2/items/{id}")
        .unwrap();
    let old = cap["contractDigest"]
        .as_str()
        .unwrap()
        .split(':')
        .nth(1)
        .unwrap()
        .to_owned();
    let mut contract: Value = serde_json::from_slice(
        &std::fs::read(src.join("contracts").join(format!("{old}.json"))).unwrap(),
    )
    .unwrap();
    contract["structural"]["input"]["properties"]["qty"]["maximum"] = json!(300);
    let digest = Sha256Digest::of_json(&contract);
    std::fs::write(
        dir.join("contracts")
            .join(format!("{}.json", digest.to_hex())),
        serde_json::to_vec(&contract).unwrap(),
    )
    .unwrap();
    cap["contractDigest"] = json!(format!("sha-256:{}", digest.to_hex()));
    std::fs::write(dir.join("lock.json"), serde_json::to_vec(&lock).unwrap()).unwrap();
    std::fs::write(
        dir.join("rules.toml"),
        "[[rule]]\nname = \"hold-deletes\"\non = [\"DELETE /api/v2/items/{id}\"]\naction = \"hold\"\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_candidate_s_counts_are_right_on_two_hundred_mixed_writes() {
    let cand = tempfile::tempdir().unwrap();
    tightened(cand.path());
    let erp = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/erp");
    let c = cand.path().display();
    let extra = format!(
        "[ptcl]\npre_image = \"off\"\n[rich]\nlockfile = \"{}\"\ncontracts = \"{}\"\n\
         candidate = {{ lockfile = \"{c}/lock.json\", contracts = \"{c}/contracts\", rules = \"{c}/rules.toml\" }}\n",
        erp.join("lock.json").display(),
        erp.join("contracts").display(),
    );
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &extra,
    );
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut want: BTreeMap<(String, String, String), u64> = BTreeMap::new();
    let client = http1_client();
    for i in 0..200u64 {
        let (method, path, body, op) = match i % 10 {
            0..=3 => (
                "PUT",
                format!("/api/v2/items/shadow-{i}"),
                json!({"sku": format!("SKU-{i}"), "qty": (i * 7) % 600, "warehouse": "BER-1"}),
                "PUT /api/v2/items/{id}",
            ),
            4..=6 => (
                "DELETE",
                format!("/api/v2/items/shadow-{i}"),
                Value::Null,
                "DELETE /api/v2/items/{id}",
            ),
            _ => (
                "POST",
                "/api/v2/items".to_owned(),
                json!({"sku": format!("SKU-{i}"), "qty": i, "warehouse": "BER-1"}),
                "POST /api/v2/items",
            ),
        };
        let candidate = match (method, body["qty"].as_u64()) {
            ("PUT", Some(q)) if q > 300 => "refused:ERR_CONTRACT_INPUT",
            ("DELETE", _) => "held:hold-deletes",
            _ => "allowed",
        };
        *want
            .entry((op.to_owned(), "allowed".to_owned(), candidate.to_owned()))
            .or_default() += 1;
        let lease = lease_for(&agent, &path, 1, |_| {});
        let inverse = base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            inverse_for(&path),
        );
        let req = Request::builder()
            .method(method)
            .uri(s.p.url(&path))
            .header("content-type", "application/json")
            .header("agent-compensation-lease", lease)
            .header("agent-compensation-inverse", inverse)
            .body(full(if body.is_null() {
                String::new()
            } else {
                body.to_string()
            }))
            .unwrap();
        let (parts, _) = send(&client, req).await;
        // The bundle in force decides: nothing is held or refused for the candidate's sake.
        assert_ne!(parts.status, StatusCode::ACCEPTED, "write {i} held");
        assert_ne!(
            parts.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "write {i} refused"
        );
    }
    let (_, body) = admin_get(s.p.admin, "/admin/v1/shadow").await;
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["compared"], 200, "{doc}");
    let got: BTreeMap<(String, String, String), u64> = doc["counts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                (
                    c["operation"].as_str().unwrap().to_owned(),
                    c["in_force"].as_str().unwrap().to_owned(),
                    c["candidate"].as_str().unwrap().to_owned(),
                ),
                c["writes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want, "{doc}");
    let disagreed: u64 = want
        .iter()
        .filter(|((_, f, k), _)| f != k)
        .map(|(_, n)| n)
        .sum();
    assert_eq!(doc["disagreed"], disagreed, "{doc}");
    let events = drift_events(&s.p);
    let shadow: Vec<&Value> = events
        .iter()
        .filter(|e| e["category"] == "shadow")
        .collect();
    assert_eq!(shadow.len() as u64, disagreed);
    let e = shadow[0];
    assert_eq!(e["actionTaken"], "notify");
    assert_eq!(e["diagnostics"]["inForce"], "allowed");
    assert!(
        e["expectedDigest"]
            .as_str()
            .unwrap()
            .starts_with("sha-256:"),
        "{e}"
    );
}
