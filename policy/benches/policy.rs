//! Criterion benches for the pure parts (issue targets in brackets):
//! - lease verification end to end (decode header + parse + JCS + verify_strict) against the
//!   bare `verify_strict` call on the same message [≤ 1.3×];
//! - JCS of 1 KiB [< 5 µs] and 64 KiB documents;
//! - receipt signing;
//! - lease signatures checked in batches of 2–64 against one by one (issue 36), per lease.
//!
//! Run: `cargo bench -p palisade-policy` (or `benches/compare --micro`).

use base64::Engine as _;
use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use ed25519_dalek::{Signature, Signer as _, SigningKey};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease::{self, RequestFacts, Reversibility, VerifyContext};
use palisade_policy::receipt::{self, ReceiptBody, ReceiptKind};
use palisade_policy::{canon, target};
use serde_json::{json, Value};

const TARGET: &str = "https://erp.example.com/api/v2/inventory/allocations/99281";

fn typical_lease(key: &KeyPair) -> Value {
    let fields = json!({
        "ptcl_version": "1.0",
        "lease_id": "urn:uuid:3a88e112-901c-4b77-8821-00912a34f119",
        "sor_target_uri": TARGET,
        "recovery_mode": "COMPENSATING_ACTION",
        "t_req_ms": 450,
        "t_granted_ms": 2000,
        "cas_fence_epoch": 1048579,
        "pre_image_state_hash": "sha256:2c26b46b68ffc68ff99b453c1d30413413422d706483bfa0f98a5e886266e7ae",
        "inverse_payload_jcs_hash": "sha256:4fc82b26aecb47d2868c4efbe3581732a3e7cbcc6c2efb32062c08170a05eeb8",
        "trace_anchor_ref": "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "issued_at": "2026-12-02T12:00:00.000Z",
    });
    lease::sign(fields.as_object().cloned().unwrap_or_default(), key)
}

/// A JSON document of about `size` bytes shaped like ERP records.
fn document(size: usize) -> Vec<u8> {
    let mut items = Vec::new();
    let mut i = 0;
    loop {
        items.push(json!({
            "id": format!("PO-{i:06}"), "sku": "BOLT-M8", "qty": i * 7 % 1000,
            "price": 0.25 + i as f64 / 100.0, "warehouse": "BER-1", "note": "Überprüfung ✓",
        }));
        let doc = serde_json::to_vec(&json!({"items": items, "total": i})).unwrap_or_default();
        if doc.len() >= size {
            return doc;
        }
        i += 1;
    }
}

fn leases(c: &mut Criterion) {
    let key = KeyPair::from_seed([42; 32]);
    let mut trust = TrustStore::new();
    trust.insert(key.trusted("bench")).expect("one key");
    let lease = typical_lease(&key);
    let raw = serde_json::to_vec(&lease).unwrap_or_default();
    let header = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
    let normalized = target::normalize(TARGET).unwrap_or_default();
    // issued_at is 2026-12-02T12:00Z; evaluate one second later.
    let cx = VerifyContext {
        now_ms: 1_796_212_801_000,
        max_clock_skew_ms: 60_000,
        first_seen: None,
        request: Some(RequestFacts {
            target: &normalized,
            reversibility: Some(Reversibility::Reversible),
        }),
    };
    assert!(
        lease::verify(&raw, &trust, &cx).is_ok(),
        "bench lease must verify"
    );

    // The bare primitive on the same signing input.
    let mut obj = lease.as_object().cloned().unwrap_or_default();
    obj.remove("signature");
    let message = canon::to_vec(&Value::Object(obj));
    let dalek = SigningKey::from_bytes(&[42; 32]);
    let sig: Signature = dalek.sign(&message);
    let vk = dalek.verifying_key();

    let mut g = c.benchmark_group("lease");
    g.bench_function("verify_strict (bare)", |b| {
        b.iter(|| {
            vk.verify_strict(black_box(&message), black_box(&sig))
                .is_ok()
        })
    });
    g.bench_function("verify end to end (header→VerifiedLease)", |b| {
        b.iter(|| {
            let decoded = lease::decode_header(black_box(header.as_bytes())).ok();
            decoded.map(|raw| lease::verify(&raw, &trust, &cx).is_ok())
        })
    });
    g.finish();

    // Check 4 for n leases: n × verify_strict against one batch (`lease::check_signatures`).
    let mut g = c.benchmark_group("lease check 4, per lease");
    for n in [1usize, 2, 4, 8, 16, 64] {
        let raws: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                let mut f = lease.as_object().cloned().unwrap_or_default();
                f.remove("signature");
                f.insert("lease_id".into(), json!(format!("urn:lease:{i}")));
                serde_json::to_vec(&lease::sign(f, &key)).unwrap_or_default()
            })
            .collect();
        let prepared = || -> Vec<lease::Unsigned> {
            raws.iter()
                .filter_map(|r| lease::prepare(r, &trust).ok())
                .collect()
        };
        assert_eq!(prepared().len(), n, "bench leases must prepare");
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("one by one, {n}"), |b| {
            b.iter_batched(
                prepared,
                |batch| {
                    batch
                        .into_iter()
                        .map(|u| u.check_signature().is_ok())
                        .filter(|ok| *ok)
                        .count()
                },
                criterion::BatchSize::SmallInput,
            )
        });
        g.bench_function(format!("batched, {n}"), |b| {
            b.iter_batched(
                prepared,
                |batch| lease::check_signatures(batch).len(),
                criterion::BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

fn jcs(c: &mut Criterion) {
    let mut g = c.benchmark_group("jcs");
    for size in [1024, 64 * 1024] {
        let doc = document(size);
        g.throughput(Throughput::Bytes(doc.len() as u64));
        g.bench_function(format!("canonicalize {} KiB", size / 1024), |b| {
            b.iter(|| canon::canonicalize(black_box(&doc), 128).map(|v| v.len()))
        });
    }
    g.finish();
}

fn receipts(c: &mut Criterion) {
    let key = KeyPair::from_seed([1; 32]);
    let body = ReceiptBody {
        lease_id: Some("urn:uuid:3a88e112-901c-4b77-8821-00912a34f119".into()),
        sor_target_uri: Some(TARGET.into()),
        cas_fence_epoch: Some(1048579),
        method: Some("PUT".into()),
        request_digest: Some(Sha256Digest::of(b"body").to_string()),
        upstream_status: Some(200),
        trace_id: Some("4bf92f3577b34da6a3ce929d0e0e4736".into()),
        ..ReceiptBody::new(
            "urn:uuid:r1".into(),
            ReceiptKind::Commit,
            "2026-12-02T12:00:00.000Z".into(),
        )
    };
    // A receipt is an entry of the log now: its JCS on the request's task; signing is one
    // checkpoint per store batch (`benches/log.rs`).
    let _ = &key;
    c.bench_function("receipt entry (JCS)", |b| {
        b.iter(|| receipt::entry(black_box(&body)).map(|e| e.jcs.len()))
    });
}

criterion_group!(benches, leases, jcs, receipts);
criterion_main!(benches);
