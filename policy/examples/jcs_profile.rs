//! Canonicalises a 1 KiB ERP-like document N times (default 10,000): a fixed workload for
//! instruction counts, which stay repeatable on a noisy machine where wall-clock does not:
//!   cargo build --release -p palisade-policy --example jcs_profile
//!   valgrind --tool=callgrind target/release/examples/jcs_profile 1000
use serde_json::json;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000);
    let mut items = Vec::new();
    for i in 0..7 {
        items.push(json!({
            "id": format!("PO-{i:06}"), "sku": "BOLT-M8", "qty": i * 7 % 1000,
            "price": 0.25 + i as f64 / 100.0, "warehouse": "BER-1", "note": "Überprüfung ✓",
        }));
    }
    let doc = serde_json::to_vec(&json!({"items": items, "total": 7})).unwrap_or_default();
    let mut total = 0;
    for _ in 0..n {
        total += palisade_policy::canon::canonicalize(&doc, 128).map_or(0, |v| v.len());
    }
    println!(
        "{} bytes in, {} bytes out per run",
        doc.len(),
        total / n.max(1)
    );
}
