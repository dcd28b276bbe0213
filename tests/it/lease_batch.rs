//! Leases verified together across concurrent requests (issue 36), through the real binary:
//! writes sent at once, two of them with signatures that do not verify, each refused alone
//! with its code, receipt and drift event, and the upstream saw none of them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::Value;

use crate::support::writes::*;
use crate::support::*;

const WRITES: usize = 24;
const TAMPERED: usize = 7;
const BORROWED: usize = 15;

fn path(i: usize) -> String {
    format!("/items/batch-{i}")
}

fn decoded(lease: &str) -> Value {
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(lease).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_leases_are_checked_together_and_a_bad_one_is_refused_alone() {
    let s = std::sync::Arc::new(start("").await);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut leases: Vec<String> = (0..WRITES)
        .map(|i| lease_for(&agent, &path(i), 1, |_| {}))
        .collect();
    // One changed after signing; one carrying another lease's signature.
    let mut tampered = decoded(&leases[TAMPERED]);
    tampered["t_req_ms"] = Value::from(tampered["t_req_ms"].as_u64().unwrap() + 1);
    leases[TAMPERED] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&tampered).unwrap());
    let mut borrowed = decoded(&leases[BORROWED]);
    borrowed["signature"] = decoded(&leases[BORROWED + 1])["signature"].clone();
    leases[BORROWED] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&borrowed).unwrap());

    let at_once: Vec<_> = leases
        .into_iter()
        .enumerate()
        .map(|(i, lease)| {
            let s = s.clone();
            tokio::spawn(async move {
                send(
                    &http1_client(),
                    put(&s.p, &path(i), Some(&lease), Some(&inverse_for(&path(i)))),
                )
                .await
            })
        })
        .collect();
    for (i, t) in at_once.into_iter().enumerate() {
        let (parts, body) = t.await.unwrap();
        if i == TAMPERED || i == BORROWED {
            assert_eq!(parts.status, StatusCode::FORBIDDEN, "write {i}");
            let problem: Value = serde_json::from_slice(&body).unwrap();
            assert_eq!(problem["code"], "ERR_LEASE_SIGNATURE", "write {i}");
            assert_receipt_verifies(&problem["receipt"], "rejection");
        } else {
            assert_eq!(
                parts.status,
                StatusCode::OK,
                "write {i}: {}",
                String::from_utf8_lossy(&body)
            );
            assert_receipt_verifies(&envelope_of(&parts.headers), "commit");
        }
    }

    // The upstream got every good write, once, and neither bad one.
    let mut seen: Vec<String> = s
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.path_and_query)
        .collect();
    seen.sort();
    let mut want: Vec<String> = (0..WRITES)
        .filter(|i| *i != TAMPERED && *i != BORROWED)
        .map(path)
        .collect();
    want.sort();
    assert_eq!(seen, want);

    let refused: Vec<Value> = drift_events(&s.p)
        .into_iter()
        .filter(|e| e["code"] == "ERR_LEASE_SIGNATURE")
        .collect();
    assert_eq!(refused.len(), 2, "{refused:?}");

    // Every lease's signature went through the batch queue (the batches' sizes add up to
    // the writes); how many batches formed depends on timing, so it is only printed.
    let (status, metrics) = admin_get(s.p.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics"))
    };
    let (sum, count) = (
        value("palisade_lease_signature_batch_sum"),
        value("palisade_lease_signature_batch_count"),
    );
    assert_eq!(sum as usize, WRITES);
    assert!(count >= 1.0 && count <= WRITES as f64);
    eprintln!("{WRITES} leases in {count} signature batches");
}
