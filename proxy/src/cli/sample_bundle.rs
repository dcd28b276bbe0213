//! A RICH bundle for a small ERP API: inventory items (what the sample SoR serves), stock
//! allocations, purchase orders and invoices. `palisade demo` runs with it, and
//! `examples/erp/` holds the same files for reading and for `palisade lock check`
//! (`cargo run -p palisade --example write_erp_bundle -- examples/erp` writes them; a test keeps
//! the two identical).

use std::path::Path;

use palisade_policy::digest::Sha256Digest;
use serde_json::{json, Value};

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

fn contract(
    input: Value,
    side_effect: &str,
    reversibility: &str,
    idempotency_key: &str,
    timeout: &str,
) -> Value {
    json!({
        "structural": {"input": input, "output": "unknown"},
        "representation": {"mediaType": "application/json", "encoding": "UTF-8"},
        "semantic": "unknown",
        "error": {"format": "application/problem+json"},
        "state": "not-applicable",
        "operational": {
            "sideEffect": side_effect,
            "reversibility": reversibility,
            "idempotencyKey": idempotency_key,
            "timeout": timeout,
            "modelMediation": "none"
        }
    })
}

fn object(required: &[&str], properties: Value) -> Value {
    json!({
        "$schema": DIALECT,
        "type": "object",
        "required": required,
        "additionalProperties": false,
        "properties": properties
    })
}

fn sku() -> Value {
    json!({"type": "string", "pattern": "^[A-Z0-9][A-Z0-9-]{1,31}$"})
}

fn warehouse() -> Value {
    json!({"type": "string", "pattern": "^[A-Z]{3}-[0-9]{1,3}$"})
}

fn qty() -> Value {
    json!({"type": "integer", "minimum": 0, "maximum": 1000000})
}

/// (capability name, operation, contract).
pub fn capabilities() -> Vec<(&'static str, &'static str, Value)> {
    let item = object(
        &["sku", "qty", "warehouse"],
        json!({"sku": sku(), "qty": qty(), "warehouse": warehouse()}),
    );
    vec![
        (
            "items.put",
            "PUT /api/v2/items/{id}",
            contract(item.clone(), "write", "compensable", "optional", "PT5S"),
        ),
        (
            "items.create",
            "POST /api/v2/items",
            contract(item, "write", "compensable", "optional", "PT5S"),
        ),
        (
            "items.delete",
            "DELETE /api/v2/items/{id}",
            contract(json!("unknown"), "write", "compensable", "optional", "PT5S"),
        ),
        (
            "allocations.put",
            "PUT /api/v2/allocations/{id}",
            contract(
                object(
                    &["sku", "qty", "warehouse", "order"],
                    json!({"sku": sku(), "qty": qty(), "warehouse": warehouse(),
                           "order": {"type": "string", "pattern": "^SO-[0-9]{4,10}$"}}),
                ),
                "write",
                "compensable",
                "optional",
                "PT10S",
            ),
        ),
        (
            "purchase-orders.create",
            "POST /api/v2/purchase-orders",
            contract(
                object(
                    &["supplier", "lines"],
                    json!({
                        "supplier": {"type": "string", "minLength": 1, "maxLength": 64},
                        "lines": {"type": "array", "minItems": 1, "maxItems": 200,
                                  "items": object(&["sku", "qty"], json!({"sku": sku(), "qty": qty()}))}
                    }),
                ),
                "write",
                "compensable",
                "required",
                "PT10S",
            ),
        ),
        (
            "invoices.pay",
            "POST /api/v2/invoices/{id}/pay",
            contract(
                object(
                    &["amount", "currency"],
                    json!({"amount": {"type": "string", "pattern": "^[0-9]{1,12}\\.[0-9]{2}$"},
                           "currency": {"enum": ["EUR", "USD", "GBP"]}}),
                ),
                "write",
                "irreversible",
                "required",
                "PT30S",
            ),
        ),
        (
            "allocations.search",
            "POST /api/v2/allocations/search",
            contract(
                object(&[], json!({"sku": sku(), "warehouse": warehouse()})),
                "read",
                "reversible",
                "none",
                "PT5S",
            ),
        ),
    ]
}

/// Writes the bundle under `dir` (`lock.json`, `contracts/<hex>.json`); returns the lockfile
/// digest.
pub fn write(dir: &Path) -> std::io::Result<String> {
    let contracts = dir.join("contracts");
    std::fs::create_dir_all(&contracts)?;
    let mut caps = serde_json::Map::new();
    for (name, operation, contract) in capabilities() {
        let digest = Sha256Digest::of_json(&contract);
        let mut text = serde_json::to_string_pretty(&contract).map_err(std::io::Error::other)?;
        text.push('\n');
        std::fs::write(contracts.join(format!("{}.json", digest.to_hex())), text)?;
        caps.insert(
            name.to_owned(),
            json!({
                "protocol": "http",
                "operation": operation,
                "contractDigest": format!("sha-256:{}", digest.to_hex()),
                "runtime": {"onDrift": "fail-closed", "onError": "route-to-error"}
            }),
        );
    }
    let lock = json!({
        "richVersion": "0.1",
        "bindingId": "urn:palisade:example:erp/1",
        "graphClosure": "closed",
        "capabilities": caps
    });
    let mut text = serde_json::to_string_pretty(&lock).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(dir.join("lock.json"), text)?;
    Ok(format!("sha-256:{}", Sha256Digest::of_json(&lock).to_hex()))
}
