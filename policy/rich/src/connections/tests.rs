#![allow(clippy::unwrap_used)]
//! The compiler's connector duties (RICH §11.1) on a v2 → v1 pair of contracts.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::connector::artifact::{PROFILE_T0, PROFILE_T1};
use crate::Bundle;
use palisade_policy::digest::Sha256Digest;

const DIALECT: &str = crate::schema::DIALECT_2020_12;
/// 2026-12-05T00:00:00Z.
const NOW_MS: i64 = 1_796_428_800_000;

fn contract(input: Value, output: Value) -> Value {
    json!({
        "structural": {"input": input, "output": output},
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "not-applicable",
        "operational": {"sideEffect": "write", "reversibility": "compensable"}
    })
}

fn v2() -> Value {
    contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["item", "qty"],
               "additionalProperties": false,
               "properties": {"item": {"type": "string"}, "qty": {"type": "integer", "minimum": 1}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["allocationId"]}),
    )
}

fn v1() -> Value {
    contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["sku", "quantity"],
               "additionalProperties": false,
               "properties": {"sku": {"type": "string"}, "quantity": {"type": "integer"}}}),
        json!({"$schema": DIALECT, "type": "object", "required": ["id"]}),
    )
}

fn digest(doc: &Value) -> String {
    format!("sha-256:{}", Sha256Digest::of_json(doc).to_hex())
}

fn file(doc: &Value) -> (String, Vec<u8>) {
    (
        format!("{}.json", Sha256Digest::of_json(doc).to_hex()),
        serde_json::to_vec(doc).unwrap(),
    )
}

fn connector(class: &str, source: &Value, target: &Value, expr: &str) -> Value {
    json!({"id": "urn:test:connectors/alloc", "class": class, "purpose": "structural-adaptation",
           "sourceDigest": digest(source), "targetDigest": digest(target),
           "transform": {"lang": "jmespath", "expr": expr},
           "preconditions": {}, "postconditions": {"$schema": DIALECT, "required": ["sku"], "properties": {"sku": {"type": "string"}}},
           "qualification": "urn:test:qualifications/1"})
}

fn qualification(conn: &Value, decision: &str, expiry: &str) -> Value {
    json!({"subjectUri": conn["id"], "subjectDigest": digest(conn),
           "profile": "urn:test:qualification-profile:1", "evidence": [], "scope": "unit test",
           "findings": [], "decision": decision, "qualifier": "urn:test:qualifier",
           "expiry": expiry})
}

struct Case {
    v2: Value,
    v1: Value,
    conn: Value,
    qual: Value,
    connection: Value,
    target_op: &'static str,
}

impl Case {
    fn new() -> Case {
        let (v2, v1) = (v2(), v1());
        let conn = connector("T1", &v2, &v1, "{sku: item, quantity: qty}");
        let qual = qualification(&conn, "qualified", "2027-01-01T00:00:00Z");
        let connection = json!({"id": "alloc-v2-on-v1", "source": "alloc-v2", "target": "alloc-v1",
            "edgeKind": "data", "connectorDigest": digest(&conn), "connectorProfile": PROFILE_T1,
            "connectorQualificationDigest": digest(&qual)});
        Case {
            v2,
            v1,
            conn,
            qual,
            connection,
            target_op: "POST /legacy/stock/{id}/allocate",
        }
    }

    fn compile(&self) -> Result<Bundle, Vec<String>> {
        let lock = json!({"bindingId": "urn:test:b/1", "capabilities": {
            "alloc-v2": {"protocol": "http", "operation": "POST /v2/items/{id}/allocations",
                         "contractDigest": digest(&self.v2)},
            "alloc-v1": {"protocol": "http", "operation": self.target_op,
                         "contractDigest": digest(&self.v1)}},
            "connections": [self.connection]});
        let files: BTreeMap<_, _> = [&self.v2, &self.v1, &self.conn, &self.qual]
            .into_iter()
            .map(file)
            .collect();
        Bundle::compile_at(
            &serde_json::to_vec(&lock).unwrap(),
            &files,
            None,
            Some(NOW_MS),
        )
        .map_err(|ps| ps.iter().map(ToString::to_string).collect())
    }

    /// Compiles, expecting a refusal whose text holds `needle`.
    fn refused(&self, needle: &str) {
        let problems = self.compile().unwrap_err();
        assert!(
            problems.iter().any(|p| p.contains(needle)),
            "{needle:?} not in {problems:#?}"
        );
    }

    /// Replaces the connector (and re-pins it and a qualification of it).
    fn with_connector(mut self, conn: Value) -> Case {
        self.qual = qualification(&conn, "qualified", "2027-01-01T00:00:00Z");
        self.connection["connectorDigest"] = json!(digest(&conn));
        self.connection["connectorQualificationDigest"] = json!(digest(&self.qual));
        self.conn = conn;
        self
    }

    fn with_qualification(mut self, qual: Value) -> Case {
        self.connection["connectorQualificationDigest"] = json!(digest(&qual));
        self.qual = qual;
        self
    }
}

#[test]
fn a_qualified_t1_connection_compiles_and_maps() {
    let b = Case::new().compile().unwrap();
    let source = b.route_index("POST", "/v2/items/7/allocations").unwrap();
    let conn = b.connection_of(source).unwrap();
    let target = &b.capabilities[conn.target];
    assert_eq!(target.name, "alloc-v1");
    assert_eq!(conn.request.profile, PROFILE_T1);
    let out = conn
        .request
        .run(&json!({"item": "SKU-1", "qty": 3}))
        .unwrap();
    assert_eq!(out, json!({"sku": "SKU-1", "quantity": 3}));
    // The postcondition (`sku` a string: JMESPath makes a missing member null) is the connector's own check on its output.
    let err = conn.request.run(&json!({"qty": 3})).unwrap_err();
    assert!(err.to_string().contains("postconditions"), "{err}");
    // The target capability itself has no connection.
    assert!(b.connection_of(conn.target).is_none());
}

#[test]
fn t3_and_t4_connectors_are_refused() {
    let c = Case::new();
    let t3 = connector("T3", &c.v2, &c.v1, "{sku: item}");
    Case::new()
        .with_connector(t3)
        .refused("T3 connectors cannot be enforced");
    let c = Case::new();
    let t4 = connector("T4", &c.v2, &c.v1, "{sku: item}");
    Case::new()
        .with_connector(t4)
        .refused("T4 connectors cannot be enforced");
}

#[test]
fn unknown_profiles_and_languages_are_refused() {
    let mut c = Case::new();
    c.connection["connectorProfile"] = json!("https://prof.example/t1-jsonata");
    c.refused("must be a profile this sidecar runs");
    let mut c = Case::new();
    c.connection["connectorProfile"] = json!(PROFILE_T0);
    c.refused("the connector runs under");
    let c = Case::new();
    let mut jsonata = connector("T1", &c.v2, &c.v1, "$");
    jsonata["transform"]["lang"] = json!("jsonata");
    Case::new()
        .with_connector(jsonata)
        .refused("\"jsonata\" is not a T1 profile");
}

#[test]
fn connectors_must_pin_the_two_contracts_digests() {
    let c = Case::new();
    // Pinned the other way round: v1 → v2 on a v2 → v1 edge.
    let reversed = connector("T1", &c.v1, &c.v2, "{sku: item}");
    let c = Case::new().with_connector(reversed);
    c.refused("sourceDigest is not the source capability's contract");
    c.refused("targetDigest is not the target capability's contract");
}

#[test]
fn unqualified_connectors_are_refused() {
    let mut c = Case::new();
    c.connection
        .as_object_mut()
        .unwrap()
        .remove("connectorQualificationDigest");
    c.refused("an unqualified connector cannot be enforced");
    let c = Case::new();
    let failed = qualification(&c.conn, "failed", "2027-01-01T00:00:00Z");
    c.with_qualification(failed)
        .refused("the connector is not qualified");
    let c = Case::new();
    let expired = qualification(&c.conn, "qualified", "2026-12-01T00:00:00Z");
    c.with_qualification(expired)
        .refused("the qualification has expired");
    let c = Case::new();
    let mut other = qualification(&c.conn, "qualified", "2027-01-01T00:00:00Z");
    other["subjectDigest"] = json!(digest(&c.v1));
    c.with_qualification(other)
        .refused("the record qualifies another subject");
    // A record the bundle does not hold.
    let mut c = Case::new();
    c.qual = json!({"unrelated": true});
    c.refused("no qualification record");
}

#[test]
fn edges_and_templates_the_runtime_cannot_serve_are_refused() {
    let mut c = Case::new();
    c.connection["edgeKind"] = json!("tool");
    c.refused("cannot be flattened into a data flow");
    let mut c = Case::new();
    c.target_op = "POST /legacy/stock/{sku}/allocate";
    c.refused("path parameter {sku} is not a parameter of the source's path");
    let mut c = Case::new();
    c.target_op = "GET /legacy/stock/{id}/allocate";
    c.refused("a read connects to a read and a write to a write");
    let mut c = Case::new();
    c.target_op = "HEAD /legacy/stock/{id}/allocate";
    c.refused("HEAD operations have no body to map");
    let mut c = Case::new();
    c.connection["target"] = json!("alloc-v3");
    c.refused("must name a capability of this lockfile");
    let mut c = Case::new();
    c.connection["connectorDigest"] = json!(format!("sha-256:{}", "ab".repeat(32)));
    c.refused("no connector file");
    // A connector expression outside the profile is the compiler's to refuse too.
    let c = Case::new();
    let wide = connector("T1", &c.v2, &c.v1, "sum(qty)");
    Case::new()
        .with_connector(wide)
        .refused("`sum` is not a function of the T1 profile");
}

#[test]
fn target_paths_take_the_source_parameters_by_name() {
    use super::target_path;
    assert_eq!(
        target_path(
            "POST /v2/items/{id}/allocations",
            "POST /legacy/stock/{id}/allocate",
            "/v2/items/SKU%2D1/allocations"
        )
        .as_deref(),
        Some("/legacy/stock/SKU%2D1/allocate")
    );
    assert_eq!(
        target_path("PUT /a/{x}/{y}", "PUT /b/{y}/c/{x}", "/a/1/2").as_deref(),
        Some("/b/2/c/1")
    );
    assert_eq!(target_path("PUT /a/{x}", "PUT /b/{x}", "/a/1/extra"), None);
}

/// A read connection: both sides GET, its answer mapped back, so a response connector is
/// required.
#[test]
fn a_read_connects_to_a_read_and_maps_its_answer() {
    let compile = |source_op: &str, target_op: &str, response: bool| {
        let (v2, v1) = (v2(), v1());
        let conn = connector("T1", &v2, &v1, "{sku: item}");
        let back = connector("T1", &v1, &v2, "{allocationId: id}");
        let (q1, q2) = (
            qualification(&conn, "qualified", "2027-01-01T00:00:00Z"),
            qualification(&back, "qualified", "2027-01-01T00:00:00Z"),
        );
        let mut connection = json!({"id": "r", "source": "v2", "target": "v1", "edgeKind": "data",
            "connectorDigest": digest(&conn), "connectorProfile": PROFILE_T1,
            "connectorQualificationDigest": digest(&q1)});
        if response {
            connection["response"] = json!({"connectorDigest": digest(&back),
                "connectorProfile": PROFILE_T1, "connectorQualificationDigest": digest(&q2)});
        }
        let lock = json!({"bindingId": "urn:test:b/1", "capabilities": {
            "v2": {"protocol": "http", "operation": source_op, "contractDigest": digest(&v2)},
            "v1": {"protocol": "http", "operation": target_op, "contractDigest": digest(&v1)}},
            "connections": [connection]});
        let files: BTreeMap<_, _> = [&v2, &v1, &conn, &back, &q1, &q2]
            .into_iter()
            .map(file)
            .collect();
        Bundle::compile_at(
            &serde_json::to_vec(&lock).unwrap(),
            &files,
            None,
            Some(NOW_MS),
        )
        .map_err(|ps| ps.iter().map(ToString::to_string).collect::<Vec<_>>())
    };
    let b = compile("GET /v2/items/{id}", "GET /legacy/items/{id}", true).unwrap();
    assert!(b.connections[0].read);
    let b = compile("POST /v2/items/{id}", "POST /legacy/items/{id}", true).unwrap();
    assert!(!b.connections[0].read);
    let problems = compile("GET /v2/items/{id}", "GET /legacy/items/{id}", false).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("is required on a read connection")),
        "{problems:?}"
    );
    let problems = compile("GET /v2/items/{id}", "PUT /legacy/items/{id}", true).unwrap_err();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("a read connects to a read")),
        "{problems:?}"
    );
}
