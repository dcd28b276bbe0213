#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::evaluate::{evaluate, gate, Refused};
use super::recipes::{is_path, PathMatch};
use super::*;
use crate::Bundle;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::ErrorCode;

mod contracts;
mod evaluation;
mod recipes;

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

fn contract() -> Value {
    json!({
        "structural": {"input": {"$schema": DIALECT, "type": "object"}, "output": "unknown"},
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "write", "reversibility": "compensable",
                        "idempotencyKey": "optional"}
    })
}

fn recipe() -> Value {
    json!({
        "name": "reserve", "version": "1", "method": "RESERVE", "path_exact": "/reservations",
        "required_scopes": ["stock:reserve"], "trust_tier": 2,
        "semantic": {"intent": "reserve stock"},
        "input_schema": {"$schema": DIALECT, "type": "object"},
        "output_schema": {"$schema": DIALECT},
        "steps": [{"capability": "items.put", "path": {"id": "input.sku"}, "body": "input"},
                  {"capability": "orders.create", "body": "{sku: input.sku}"}],
        "output": "{item: steps[0]}"
    })
}

fn recipes(list: Vec<Value>) -> Value {
    json!({"capabilityScopes": {"items.put": ["items:write"], "orders.create": ["orders:write"]},
           "recipes": list})
}

/// A bundle binding `PUT /items/{id}` and `POST /orders`, with `set` as its recipe file.
fn bundle_with(set: &Value) -> Result<Bundle, Vec<crate::Problem>> {
    let c = contract();
    let hex = Sha256Digest::of_json(&c).to_hex();
    let set_hex = Sha256Digest::of_json(set).to_hex();
    let lock = json!({
        "bindingId": "urn:test:rcns/1",
        "capabilities": {
            "items.put": {"protocol": "http", "operation": "PUT /items/{id}",
                          "contractDigest": format!("sha-256:{hex}")},
            "orders.create": {"protocol": "http", "operation": "POST /orders",
                              "contractDigest": format!("sha-256:{hex}")}
        },
        "rcns": {"recipesDigest": format!("sha-256:{set_hex}")}
    });
    let files = BTreeMap::from([
        (format!("{hex}.json"), serde_json::to_vec(&c).unwrap()),
        (format!("{set_hex}.json"), serde_json::to_vec(set).unwrap()),
    ]);
    Bundle::compile(&serde_json::to_vec(&lock).unwrap(), &files, None)
}

fn problems_of(set: Value) -> Vec<String> {
    bundle_with(&set)
        .expect_err("refused")
        .iter()
        .map(|p| p.to_string())
        .collect()
}

fn claim(scopes: &[&str]) -> BTreeSet<String> {
    scopes.iter().map(|s| s.to_string()).collect()
}
