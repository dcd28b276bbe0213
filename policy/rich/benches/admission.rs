//! Criterion benches for RICH admission (issue 22): a token's first verification (EdDSA,
//! claims, grant parsing with a bound compiled), and what each later call under the same
//! token costs once it is cached (its digest, a cache lookup, the grant matched against the
//! call, the arguments against the granted bound). Target for the cached path: ≤ 10 µs.
//!
//! Run: `cargo bench -p palisade-rich --bench admission`.
#![allow(clippy::unwrap_used)] // fixed inputs, checked once before timing

use std::collections::HashMap;

use base64::Engine as _;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use ed25519_dalek::pkcs8::EncodePrivateKey as _;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use palisade_policy::digest::Sha256Digest;
use palisade_rich::admission::{self, grant, Call, Keys, Rules};
use serde_json::json;

const DIGEST: &str = "sha-256:8bfc1719b3c44bd423dc9c62b05815189861040bdd56ca050ce39960305a0f09";

fn bench(c: &mut Criterion) {
    // A bench key, made here and nowhere kept.
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let der = key.to_pkcs8_der().unwrap();
    let x = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes());
    let jwks = json!({"keys": [{"kty": "OKP", "crv": "Ed25519", "x": x, "kid": "k1"}]});
    let keys = Keys::from_jwks(&[("jwks".into(), serde_json::to_vec(&jwks).unwrap())]).unwrap();
    let rules = Rules {
        issuers: vec!["https://as.example.com".into()],
        audience: "https://erp.example.com".into(),
        algorithms: vec![Algorithm::EdDSA],
        skew_s: 60,
    };
    let now = 1_800_000_000u64;
    let claims = json!({"iss": "https://as.example.com", "aud": "https://erp.example.com",
        "sub": "agent-7", "iat": now, "exp": now + 600,
        "authorization_details": [{"type": "rich_binding", "bindingId": "urn:b", "operations": [
            {"operation": "GET /items/{id}", "contractDigest": DIGEST},
            {"operation": "PUT /items/{id}", "contractDigest": DIGEST,
             "bound": {"type": "object", "required": ["qty"], "additionalProperties": false,
                       "properties": {"qty": {"type": "integer", "minimum": 0, "maximum": 100},
                                      "sku": {"type": "string", "maxLength": 32}}}}]}]});
    let mut header = Header::new(Algorithm::EdDSA);
    header.kid = Some("k1".into());
    header.typ = Some("at+jwt".into());
    let token =
        jsonwebtoken::encode(&header, &claims, &EncodingKey::from_ed_der(der.as_bytes())).unwrap();
    let call = Call {
        binding_id: "urn:b",
        operation: "PUT /items/{id}",
        contract_digest: DIGEST,
    };
    let input = json!({"qty": 42, "sku": "SKU-1042"});
    // Checked once: the bench measures passing calls.
    let verified = admission::verify(&token, &keys, &rules, now).unwrap();
    let grants = grant::parse(&verified.authorization_details).unwrap();
    admission::check_input(admission::admit(&grants, call).unwrap(), &input).unwrap();
    let mut cache = HashMap::new();
    cache.insert(verified.digest, grants);

    let mut g = c.benchmark_group("admission");
    g.bench_function(
        "first call: verify (EdDSA) + parse grants + compile bound",
        |b| {
            b.iter(|| {
                let v = admission::verify(black_box(&token), &keys, &rules, now).unwrap();
                grant::parse(&v.authorization_details).unwrap()
            })
        },
    );
    g.bench_function(
        "cached call: token digest + lookup + admit + bound check",
        |b| {
            b.iter(|| {
                let d = Sha256Digest::of(black_box(token.as_bytes()));
                let grants = cache.get(&d).unwrap();
                let op = admission::admit(grants, black_box(call)).unwrap();
                admission::check_input(op, black_box(&input)).unwrap()
            })
        },
    );
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
