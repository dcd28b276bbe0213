//! Criterion bench for operator rules (issue 56): what deciding one write costs with 20 rules
//! in the file, 5 of which apply to the write's operation (each with a condition on its body,
//! its caller or a header; none matches, so all 5 are evaluated), against the same write with
//! no rule applying. Target (issue 56): ≤ 5 µs added to an enforced write.
//!
//! Run: `cargo bench -p palisade-rules --bench rules`.
#![allow(clippy::unwrap_used)] // fixed inputs, checked once before timing

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use palisade_rules::{Facts, LeaseFacts, RuleSet};
use serde_json::json;

fn file() -> String {
    file_with(|w| w.to_owned())
}

/// The same rules, each `when` rewritten by `shape`.
fn file_with(shape: impl Fn(&str) -> String) -> String {
    let mut text = String::new();
    for i in 0..15 {
        text.push_str(&format!(
            "[[rule]]\nname = \"other-{i}\"\non = [\"POST /api/v2/other{i}\"]\n\
             when = 'has(body.amount) && body.amount > 10.0'\naction = \"deny\"\n"
        ));
    }
    for (i, when) in [
        "has(body.amount) && body.amount > 10000.0",
        "caller.startsWith(\"spiffe://cluster.local/ns/experiments/\")",
        "\"x-tenant\" in headers && headers[\"x-tenant\"] == \"blocked\"",
        "has(body.lines) && body.lines.exists(l, l.qty > 500)",
        "lease.recovery_mode == \"DRY_RUN_SHADOW\" && method == \"DELETE\"",
    ]
    .iter()
    .enumerate()
    {
        text.push_str(&format!(
            "[[rule]]\nname = \"orders-{i}\"\non = [\"POST /api/v2/orders\"]\n\
             when = '{}'\naction = \"hold\"\n",
            shape(when)
        ));
    }
    text
}

fn bench(c: &mut Criterion) {
    let rules = RuleSet::load(file().as_bytes()).unwrap();
    assert_eq!(rules.rules().len(), 20);
    let body = json!({"amount": 120.5, "currency": "EUR", "customer": "C-1",
        "lines": [{"sku": "BOLT-M8", "qty": 12}, {"sku": "NUT-M8", "qty": 40}]});
    let facts = |operation| Facts {
        caller: Some("spiffe://cluster.local/ns/prod/sa/agent"),
        operation,
        resource: "https://erp.example.com/api/v2/orders",
        method: "POST",
        path: "/api/v2/orders",
        query: None,
        body: Some(&body),
        lease: Some(LeaseFacts {
            recovery_mode: "COMPENSATING_ACTION",
            t_granted_ms: 30_000,
            agent_id: Some("agent-7"),
            issuer: Some("k1"),
        }),
        headers: vec![("x-tenant", "acme")],
        now_ms: 1_800_000_000_000,
        ..Facts::default()
    };
    let orders = facts("POST /api/v2/orders");
    let d = rules.decide(&orders);
    assert!(d.decided.is_none() && d.failed.is_empty(), "{d:?}");
    c.bench_function("rules: 20 rules, 5 apply, none matches", |b| {
        b.iter(|| rules.decide(black_box(&orders)))
    });
    // The same five in a shape the fast path leaves to CEL's interpreter (a conditional):
    // what a rule outside the common shapes costs.
    let cel_only =
        RuleSet::load(file_with(|w| format!("({w}) ? true : false")).as_bytes()).unwrap();
    let d = cel_only.decide(&orders);
    assert!(d.decided.is_none() && d.failed.is_empty(), "{d:?}");
    c.bench_function(
        "rules: 20 rules, 5 apply, none matches, all by CEL's interpreter",
        |b| b.iter(|| cel_only.decide(black_box(&orders))),
    );
    let other = facts("PUT /api/v2/items/{id}");
    c.bench_function("rules: 20 rules, none applies", |b| {
        b.iter(|| rules.decide(black_box(&other)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
