//! Criterion benches for the receipt log (issue 45): what integrating one store batch costs
//! the writer (its entries' stored hashes, the new root, each entry's inclusion proof) in a
//! log of a million entries, per batch size; and what signing its one checkpoint costs, which
//! replaces one receipt signature per entry.
//!
//! Run: `cargo bench -p palisade-policy --bench log`.
#![allow(clippy::unwrap_used)] // fixed inputs, checked once before timing

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion};
use palisade_policy::keys::KeyPair;
use palisade_policy::log::batch::integrate;
use palisade_policy::log::checkpoint::{self, Checkpoint, LogKey};
use palisade_policy::log::merkle::{self, MemoryHashes};

fn bench(c: &mut Criterion) {
    let mut log = MemoryHashes::default();
    let receipt = br#"{"at":"2026-12-05T12:00:00.000Z","caller":"spiffe://erp.example/ns/agents/sa/writer","cas_fence_epoch":1048579,"kind":"commit","lease_id":"urn:uuid:0190c9d6-6b8e-7cc0-8a3b-5a2f1d9e7c41","method":"PUT","receipt_id":"urn:uuid:0190c9d6-6b8e-7cc0-8a3b-5a2f1d9e7c42","receipt_version":"2.0","sor_target_uri":"https://erp.example.com/items/4711","trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","upstream_status":200}"#;
    for _ in 0..1_000_000 {
        log.append(receipt).unwrap();
    }
    let size = log.size();
    let mut group = c.benchmark_group("integrate into 1M entries");
    for batch in [1usize, 16, 64] {
        let entries: Vec<&[u8]> = (0..batch).map(|_| &receipt[..]).collect();
        group.bench_with_input(BenchmarkId::from_parameter(batch), &entries, |b, e| {
            b.iter(|| integrate(black_box(size), &log, e).unwrap())
        });
    }
    group.finish();
    let pair = KeyPair::from_seed([3; 32]);
    let key = LogKey::of_pair("erp.example.com/palisade", &pair).unwrap();
    let cp = Checkpoint {
        origin: key.origin().into(),
        size,
        root: merkle::root(size, &log).unwrap(),
    };
    c.bench_function("sign one checkpoint", |b| {
        b.iter(|| checkpoint::sign(black_box(&cp), &key, &pair).unwrap())
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
