#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::future::Future as _;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease::{self, Unsigned};
use serde_json::json;

use super::*;

fn key() -> KeyPair {
    KeyPair::from_seed([5; 32])
}

fn trust() -> TrustStore {
    let mut t = TrustStore::new();
    t.insert(key().trusted("test")).unwrap();
    t
}

fn raw(i: usize, good: bool) -> Vec<u8> {
    let unsigned = json!({
        "ptcl_version": "1.0",
        "lease_id": format!("urn:lease:{i}"),
        "sor_target_uri": "https://erp.example.com/items/1",
        "recovery_mode": "COMPENSATING_ACTION",
        "t_req_ms": 450,
        "t_granted_ms": 2000,
        "cas_fence_epoch": 7,
        "pre_image_state_hash": format!("sha256:{}", "0".repeat(64)),
        "inverse_payload_jcs_hash": format!("sha256:{}", "1".repeat(64)),
        "trace_anchor_ref": format!("sha256:{}", "2".repeat(64)),
    });
    let mut signed = lease::sign(unsigned.as_object().unwrap().clone(), &key());
    if !good {
        signed["cas_fence_epoch"] = json!(8);
    }
    serde_json::to_vec(&signed).unwrap()
}

fn unsigned(i: usize, good: bool) -> Unsigned {
    lease::prepare(&raw(i, good), &trust()).unwrap()
}

#[tokio::test]
async fn concurrent_checks_share_batches_and_each_gets_its_own_verdict() {
    let queue = Arc::new(SignatureQueue::default());
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let queue = queue.clone();
            let lease = unsigned(i, i != 13);
            tokio::spawn(async move { queue.check(lease).await.map_err(|r| r.code) })
        })
        .collect();
    for (i, task) in tasks.into_iter().enumerate() {
        let verdict = task.await.unwrap();
        if i == 13 {
            assert_eq!(verdict.err(), Some(ErrorCode::LeaseSignature));
        } else {
            assert!(verdict.is_ok(), "lease {i}");
        }
    }
    let batches = queue.batches.load(std::sync::atomic::Ordering::Relaxed);
    assert!(batches < 4, "32 concurrent checks took {batches} batches");
}

#[tokio::test]
async fn a_lone_check_is_verified_at_once() {
    let queue = SignatureQueue::default();
    assert!(queue.check(unsigned(1, true)).await.is_ok());
    assert_eq!(
        queue.check(unsigned(2, false)).await.err().map(|r| r.code),
        Some(ErrorCode::LeaseSignature)
    );
}

#[test]
fn a_cancelled_leader_still_answers_those_queued_behind_it() {
    let queue = SignatureQueue::default();
    let mut cx = Context::from_waker(Waker::noop());
    let mut leader = Box::pin(queue.check(unsigned(1, true)));
    assert!(
        leader.as_mut().poll(&mut cx).is_pending(),
        "the leader yields"
    );
    let mut follower = Box::pin(queue.check(unsigned(2, true)));
    assert!(
        follower.as_mut().poll(&mut cx).is_pending(),
        "queued behind the leader"
    );
    drop(leader);
    match follower.as_mut().poll(&mut cx) {
        Poll::Ready(verdict) => assert!(verdict.is_ok()),
        Poll::Pending => panic!("the follower was left waiting"),
    }
}
