//! Criterion benches for RCNS (issue 21): what a PROPOSE costs once its body is read (parse,
//! the seed's evaluation against a recipe set, the contract and its `contract_hash`), and
//! what a composed invocation adds per step before its write (the step's request built from
//! the mappings). Neither is on the data plane's hot path; they are here so a change that
//! makes them expensive shows.
//!
//! Run: `cargo bench -p palisade-rich --bench rcns`.
#![allow(clippy::unwrap_used)] // fixed inputs, checked once before timing

use std::collections::{BTreeMap, BTreeSet};

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use palisade_policy::digest::Sha256Digest;
use palisade_rich::rcns::compose;
use palisade_rich::rcns::{evaluate, Caller, Proposal};
use palisade_rich::Bundle;
use serde_json::json;

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

fn bench(c: &mut Criterion) {
    let contract = json!({"structural": {"input": {"$schema": DIALECT, "type": "object"},
        "output": "unknown"}, "representation": "unknown", "semantic": "unknown",
        "error": "unknown", "state": "not-applicable", "operational": {"sideEffect": "write",
        "reversibility": "compensable", "idempotencyKey": "optional"}});
    let fields = json!({"sku": {"type": "string"}, "qty": {"type": "integer"},
                        "warehouse": {"type": "string"}, "order": {"type": "string"}});
    let recipes = json!({"capabilityScopes": {"items.put": ["erp:items:write"],
                                              "alloc.put": ["erp:allocations:write"]},
        "recipes": [{"name": "reserve-stock", "version": "1", "method": "RESERVE",
            "path_exact": "/stock-reservations", "required_scopes": ["erp:stock:reserve"],
            "trust_tier": 2, "semantic": {"intent": "reserve"},
            "input_schema": {"$schema": DIALECT, "type": "object", "properties": fields},
            "output_schema": {"$schema": DIALECT, "type": "object"},
            "steps": [{"capability": "items.put", "path": {"id": "input.sku"},
                       "body": "{sku: input.sku, qty: input.qty, warehouse: input.warehouse}"},
                      {"capability": "alloc.put", "path": {"id": "input.order"},
                       "body": "{ItemCode: input.sku, Quantity: input.qty, SalesOrder: input.order}"}],
            "output": "{item: steps[0], allocation: steps[1]}"}]});
    let (ch, rh) = (
        Sha256Digest::of_json(&contract).to_hex(),
        Sha256Digest::of_json(&recipes).to_hex(),
    );
    let lock = json!({"bindingId": "urn:bench", "capabilities": {
        "items.put": {"protocol": "http", "operation": "PUT /items/{id}", "contractDigest": format!("sha-256:{ch}")},
        "alloc.put": {"protocol": "http", "operation": "PUT /allocations/{id}", "contractDigest": format!("sha-256:{ch}")}},
        "rcns": {"recipesDigest": format!("sha-256:{rh}")}});
    let files = BTreeMap::from([
        (format!("{ch}.json"), serde_json::to_vec(&contract).unwrap()),
        (format!("{rh}.json"), serde_json::to_vec(&recipes).unwrap()),
    ]);
    let bundle = Bundle::compile(&serde_json::to_vec(&lock).unwrap(), &files, None).unwrap();
    let set = bundle.recipes.as_deref().unwrap();
    let scopes: BTreeSet<String> = [
        "rcns:negotiate",
        "erp:stock:reserve",
        "erp:items:write",
        "erp:allocations:write",
    ]
    .map(String::from)
    .into();
    let caller = Caller {
        agent_id: "agent-1".into(),
        scopes: scopes.clone(),
        trust_tier: 1,
    };
    let body = serde_json::to_vec(
        &json!({"method": "PROPOSE", "task_id": "t-1", "parameters": {
        "endpoint": {"method": "RESERVE", "path": "/stock-reservations",
                     "semantic": {"intent": "reserve stock"},
                     "input_schema": {"$schema": DIALECT, "type": "object"}}}}),
    )
    .unwrap();
    // Checked once: the bench measures an accepted proposal.
    let p = Proposal::parse(&body).unwrap();
    let m = evaluate::evaluate(&p, &caller, &scopes, Some(set), Some(&bundle)).unwrap();
    let input = json!({"sku": "BOLT-9", "qty": 40, "warehouse": "BER-1", "order": "SO-1234"});
    let cx = compose::context(&input, &[json!({"id": "BOLT-9", "qty": 40})]);

    let mut g = c.benchmark_group("rcns");
    g.bench_function("PROPOSE: parse + evaluate (seed §3.6)", |b| {
        b.iter(|| {
            let p = Proposal::parse(black_box(&body)).unwrap();
            evaluate::evaluate(&p, &caller, &scopes, Some(set), Some(&bundle)).unwrap()
        })
    });
    g.bench_function("contract_hash (JCS + SHA-256 of the contract)", |b| {
        let c = palisade_rich::rcns::SynthesizedContract {
            synthesis_id: "syn_0123456789abcdef0123456789abcdef".into(),
            method: p.method.clone(),
            path: p.path.clone(),
            endpoint: m.recipe.endpoint(&p.method, &p.path),
            recipe_name: m.recipe.name.clone(),
            recipe_version: m.recipe.version.clone(),
            recipe: m.recipe.source.clone(),
            originating_agent_id: "agent-1".into(),
            negotiation_origin: palisade_rich::rcns::contract::ORIGIN_PROPOSE,
            task_id: None,
            persistent: false,
            session: Some("ses_1".into()),
            issued_at_ms: 1_800_000_000_000,
            expires_at_ms: 1_800_003_600_000,
            idle_timeout_ms: Some(900_000),
            revoked: false,
            required_scopes: m.recipe.all_scopes.iter().cloned().collect(),
            fingerprint: None,
        };
        b.iter(|| black_box(&c).contract_hash())
    });
    g.bench_function("step request (path + body mappings, step 2)", |b| {
        b.iter(|| compose::step_request(1, &m.recipe.steps[1], black_box(&cx)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
