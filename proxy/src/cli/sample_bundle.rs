//! A RICH bundle for a small ERP API: inventory items (what the sample SoR serves), stock
//! allocations, purchase orders and invoices. Allocations are the connector example (RICH
//! §9): agents see `PUT /api/v2/allocations/{id}` (`sku`, `qty`, `warehouse`, `order`); the SoR
//! serves the legacy `PUT /legacy/v1/allocations/{id}` (`ItemCode`, `Quantity`, `Location`,
//! `SalesOrder`); a qualified T1 connector maps the request, another maps the answer back. `palisade demo` runs with it, and
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
            allocation_v2(),
        ),
        (
            "legacy.allocations.put",
            "PUT /legacy/v1/allocations/{id}",
            allocation_v1(),
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

fn order() -> Value {
    json!({"type": "string", "pattern": "^SO-[0-9]{4,10}$"})
}

/// The agent-facing allocation contract (v2).
fn allocation_v2() -> Value {
    let fields = json!({"sku": sku(), "qty": qty(), "warehouse": warehouse(), "order": order()});
    let mut c = contract(
        object(&["sku", "qty", "warehouse", "order"], fields.clone()),
        "write",
        "compensable",
        "optional",
        "PT10S",
    );
    let mut answer = fields;
    answer["id"] = json!({"type": "string"});
    c["structural"]["output"] = object(&["id", "sku", "qty", "warehouse", "order"], answer);
    c
}

/// The legacy allocation contract (v1), as the SoR serves it.
fn allocation_v1() -> Value {
    let fields = json!({"ItemCode": sku(), "Quantity": qty(), "Location": warehouse(),
                        "SalesOrder": order()});
    let mut c = contract(
        object(
            &["ItemCode", "Quantity", "Location", "SalesOrder"],
            fields.clone(),
        ),
        "write",
        "compensable",
        "optional",
        "PT10S",
    );
    let mut answer = fields;
    answer["AllocationID"] = json!({"type": "string"});
    c["structural"]["output"] = object(
        &[
            "AllocationID",
            "ItemCode",
            "Quantity",
            "Location",
            "SalesOrder",
        ],
        answer,
    );
    c
}

/// A qualified T1 connector between two contracts: (connector, its qualification record).
fn connector(id: &str, source: &Value, target: &Value, expr: &str) -> (Value, Value) {
    let pin = |c: &Value| format!("sha-256:{}", Sha256Digest::of_json(c).to_hex());
    let conn = json!({
        "id": id, "class": "T1", "purpose": "structural-adaptation",
        "sourceDigest": pin(source), "targetDigest": pin(target),
        "transform": {"lang": "jmespath", "expr": expr},
        "preconditions": {}, "postconditions": {},
        "qualification": "urn:palisade:example:erp/qualifications/allocations"
    });
    // A record as a qualification service would issue it (RICH §8.2); here it records the
    // tests that exercise the mapping.
    let record = json!({
        "subjectUri": id, "subjectDigest": pin(&conn),
        "profile": palisade_rich::connector::artifact::PROFILE_T1,
        "evidence": [{"uri": "urn:palisade:tests:connectors", "kind": "test-suite"}],
        "scope": "field renames between the v2 and v1 allocation contracts",
        "findings": [], "decision": "qualified", "qualifier": "urn:palisade:example:qualifier",
        "expiry": "2100-01-01T00:00:00Z"
    });
    (conn, record)
}

fn write_doc(path: &Path, doc: &Value) -> std::io::Result<()> {
    let mut text = serde_json::to_string_pretty(doc).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(path, text)
}

/// The allocation connection: its lockfile entry, with the connector and qualification
/// files written to `contracts`.
fn allocation_connection(contracts: &Path) -> std::io::Result<Value> {
    let (v2, v1) = (allocation_v2(), allocation_v1());
    let mut refs = Vec::new();
    for (id, from, to, expr) in [
        (
            "urn:palisade:example:erp/connectors/allocation-v2-to-v1",
            &v2,
            &v1,
            "{ItemCode: sku, Quantity: qty, Location: warehouse, SalesOrder: order}",
        ),
        (
            "urn:palisade:example:erp/connectors/allocation-v1-to-v2",
            &v1,
            &v2,
            "{id: AllocationID, sku: ItemCode, qty: Quantity, warehouse: Location, order: SalesOrder}",
        ),
    ] {
        let (conn, record) = connector(id, from, to, expr);
        let mut pins = Vec::new();
        for doc in [&conn, &record] {
            let hex = Sha256Digest::of_json(doc).to_hex();
            write_doc(&contracts.join(format!("{hex}.json")), doc)?;
            pins.push(format!("sha-256:{hex}"));
        }
        refs.push(json!({
            "connectorDigest": pins[0],
            "connectorProfile": palisade_rich::connector::artifact::PROFILE_T1,
            "connectorQualificationDigest": pins[1]
        }));
    }
    let response = refs.pop();
    let mut edge = refs.pop().unwrap_or_default();
    edge["id"] = json!("allocations-v2-on-v1");
    edge["source"] = json!("allocations.put");
    edge["target"] = json!("legacy.allocations.put");
    edge["edgeKind"] = json!("data");
    edge["response"] = response.unwrap_or_default();
    edge["runtime"] = json!({"onDrift": "fail-closed"});
    Ok(edge)
}

/// The RCNS recipe set (seed 000 §3.5): `RESERVE /stock-reservations` sets an item's stock
/// and allocates it to a sales order, composed from two bound operations. Agents need
/// `erp:stock:reserve` for the composition and the scopes of both steps.
pub fn recipes() -> Value {
    let fields = json!({"sku": sku(), "qty": qty(), "warehouse": warehouse(), "order": order()});
    json!({
        "capabilityScopes": {
            "items.put": ["erp:items:write"],
            "legacy.allocations.put": ["erp:allocations:write"]
        },
        "recipes": [{
            "name": "reserve-stock",
            "version": "1",
            "method": "RESERVE",
            "path_exact": "/stock-reservations",
            "description": "Sets an item's stock and allocates it to a sales order: both or neither.",
            "required_scopes": ["erp:stock:reserve"],
            "trust_tier": 2,
            "semantic": {"intent": "reserve stock for a sales order", "sideEffect": "write"},
            "input_schema": object(&["sku", "qty", "warehouse", "order"], fields),
            "output_schema": {"$schema": DIALECT, "type": "object",
                              "required": ["item", "allocation"]},
            "steps": [
                {"capability": "items.put", "path": {"id": "input.sku"},
                 "body": "{sku: input.sku, qty: input.qty, warehouse: input.warehouse}"},
                {"capability": "legacy.allocations.put", "path": {"id": "input.order"},
                 "body": "{ItemCode: input.sku, Quantity: input.qty, Location: input.warehouse, SalesOrder: input.order}"}
            ],
            "output": "{item: steps[0], allocation: steps[1]}"
        }]
    })
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
    let recipes = recipes();
    let recipes_digest = Sha256Digest::of_json(&recipes).to_hex();
    write_doc(&contracts.join(format!("{recipes_digest}.json")), &recipes)?;
    let lock = json!({
        "richVersion": "0.1",
        "bindingId": "urn:palisade:example:erp/1",
        "graphClosure": "closed",
        "capabilities": caps,
        "connections": [allocation_connection(&contracts)?],
        "rcns": {"recipesDigest": format!("sha-256:{recipes_digest}")}
    });
    let mut text = serde_json::to_string_pretty(&lock).map_err(std::io::Error::other)?;
    text.push('\n');
    std::fs::write(dir.join("lock.json"), text)?;
    Ok(format!("sha-256:{}", Sha256Digest::of_json(&lock).to_hex()))
}
