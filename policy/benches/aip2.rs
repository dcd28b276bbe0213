//! Criterion benches for the AIP-2.1 quote channel (issue 20): EIP-712 signer recovery
//! against a bare `k256` recovery of the same prehash (target: ≤ 1.5×), the struct hash,
//! and the whole check of one SDK-signed quote (schema, binding, TTL, recovery).
//!
//! Run: `cargo bench -p palisade-policy --bench aip2`.
#![allow(clippy::unwrap_used)] // fixed inputs, checked once before timing

use std::collections::BTreeMap;

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use k256::ecdsa::{RecoveryId, Signature, VerifyingKey};
use palisade_policy::aip2::{self, eip712, message, Kind, Rules};
use serde_json::Value;

const TX: &str = "0xabababababababababababababababababababababababababababababababab";

fn bench(c: &mut Criterion) {
    let v: Value = serde_json::from_str(include_str!("../tests/vectors/aip2_sdk.json")).unwrap();
    let at = v["at"].as_u64().unwrap();
    let kernel = message::address(v["kernel"].as_str().unwrap()).unwrap();
    let rules = Rules {
        kernels: BTreeMap::from([(84532, kernel)]),
        grace_s: 30,
        max_ttl_s: 86_400,
    };
    let envelope = &v["messages"][0];
    let body = serde_json::to_vec(envelope).unwrap();
    let checked = aip2::check(&body, "84532", TX, &rules, at).unwrap();
    let digest = checked.digest;
    let sig_hex = envelope["message"]["signature"].as_str().unwrap();
    let sig: [u8; 65] = hex::decode(&sig_hex[2..]).unwrap().try_into().unwrap();

    let mut g = c.benchmark_group("aip2");
    g.bench_function("k256_recover_from_prehash (baseline)", |b| {
        let s = Signature::from_slice(&sig[..64]).unwrap();
        let id = RecoveryId::from_byte(sig[64] - 27).unwrap();
        b.iter(|| VerifyingKey::recover_from_prehash(black_box(&digest), &s, id).unwrap())
    });
    g.bench_function("eip712::recover (address, low-s check)", |b| {
        b.iter(|| eip712::recover(black_box(&digest), black_box(&sig)).unwrap())
    });
    let msg = &envelope["message"];
    g.bench_function("struct hash + signing digest", |b| {
        b.iter(|| {
            let values = message::struct_values(Kind::Quote, black_box(msg)).unwrap();
            let h = Kind::Quote.struct_type().hash(&values).unwrap();
            let d = eip712::domain_separator("AGIRAILS", "1", 84532, kernel);
            eip712::signing_digest(&d, &h)
        })
    });
    g.bench_function("guard::check (whole message)", |b| {
        b.iter(|| aip2::check(black_box(&body), "84532", TX, &rules, at).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
