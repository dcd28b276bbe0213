//! Criterion benches for RICH bindings (issue 5): schema validation of a typical ~1 KiB
//! request body against its compiled schema, routing-table lookup in a 500-capability bundle,
//! and compiling that bundle (target: a reload of 500 capabilities compiles in under 1 s).
//!
//! Run: `cargo bench -p palisade-rich --bench rich`.

use std::collections::BTreeMap;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use palisade_policy::digest::Sha256Digest;
use palisade_rich::{check_input, Bundle};
use serde_json::{json, Value};

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// A purchase-order contract: nested lines, patterns, bounds.
fn contract(n: usize) -> Value {
    json!({
        "structural": {
            "input": {
                "$schema": DIALECT, "type": "object", "required": ["supplier", "lines"],
                "additionalProperties": false,
                "properties": {
                    "supplier": {"type": "string", "minLength": 1, "maxLength": 64},
                    "reference": {"type": "string", "pattern": "^PO-[0-9]{4,10}$"},
                    "currency": {"enum": ["EUR", "USD", "GBP"]},
                    "variant": {"const": n},
                    "lines": {"type": "array", "minItems": 1, "maxItems": 200, "items": {
                        "type": "object", "required": ["sku", "qty"], "additionalProperties": false,
                        "properties": {
                            "sku": {"type": "string", "pattern": "^[A-Z0-9][A-Z0-9-]{1,31}$"},
                            "qty": {"type": "integer", "minimum": 0, "maximum": 1000000},
                            "warehouse": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{1,3}$"},
                            "note": {"type": "string", "maxLength": 200}
                        }
                    }}
                }
            },
            "output": "unknown"
        },
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "write", "reversibility": "compensable",
                        "idempotencyKey": "optional", "timeout": "PT10S"}
    })
}

fn body_1k() -> Vec<u8> {
    let lines: Vec<Value> = (0..12)
        .map(|i| {
            json!({"sku": format!("BOLT-M{i}"), "qty": 100 + i, "warehouse": "BER-1",
                        "note": "deliver to dock 4"})
        })
        .collect();
    let body = json!({"supplier": "Acme Fasteners GmbH", "reference": "PO-20261202",
                      "currency": "EUR", "variant": 0, "lines": lines});
    serde_json::to_vec(&body).unwrap_or_default()
}

/// 500 capabilities, each with its own contract, over `/api/v2/r{i}/items/{id}`.
fn bundle_500() -> (Vec<u8>, BTreeMap<String, Vec<u8>>) {
    let mut files = BTreeMap::new();
    let mut caps = serde_json::Map::new();
    for i in 0..500 {
        let c = contract(i);
        let d = Sha256Digest::of_json(&c).to_hex();
        files.insert(
            format!("{d}.json"),
            serde_json::to_vec(&c).unwrap_or_default(),
        );
        caps.insert(
            format!("cap{i}"),
            json!({"protocol": "http", "operation": format!("PUT /api/v2/r{i}/items/{{id}}"),
                   "contractDigest": format!("sha-256:{d}")}),
        );
    }
    let lock = json!({"richVersion": "0.1", "bindingId": "urn:bench", "capabilities": caps});
    (serde_json::to_vec(&lock).unwrap_or_default(), files)
}

fn rich(c: &mut Criterion) {
    let (lock, files) = bundle_500();
    let mut g = c.benchmark_group("rich");
    g.sample_size(10);
    g.bench_function("compile 500 capabilities", |b| {
        b.iter(|| Bundle::compile(black_box(&lock), &files, None).map(|b| b.capabilities.len()))
    });
    g.finish();
    let Ok(bundle) = Bundle::compile(&lock, &files, None) else {
        return;
    };
    let body = body_1k();
    let Some(cap) = bundle.route("PUT", "/api/v2/r0/items/7") else {
        return;
    };
    c.bench_function(&format!("check_input {} B body", body.len()), |b| {
        b.iter(|| check_input(&cap.contract, black_box(&body), 128).is_ok())
    });
    c.bench_function("route among 500 (last)", |b| {
        b.iter(|| {
            bundle
                .route("PUT", black_box("/api/v2/r499/items/7"))
                .is_some()
        })
    });
}

criterion_group!(benches, rich);
criterion_main!(benches);
