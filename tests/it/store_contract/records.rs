//! Fences, the receipt log, idempotency keys, escrows, compensation at most once.

use super::*;

/// Epochs only move forward; a stale intent changes nothing; what an advance stages is read
/// back as it was given.
pub async fn fences_only_move_forward(store: &dyn Store, _clock: &SetClock) {
    assert_eq!(store.epoch("/items/1").await.unwrap(), 0);
    let first = intent("/items/1", 5, "l5");
    assert_eq!(
        store.advance(first.clone()).await.unwrap(),
        Advance::Advanced
    );
    for stale in [5, 3] {
        assert_eq!(
            store
                .advance(intent("/items/1", stale, "stale"))
                .await
                .unwrap(),
            Advance::Stale { current: 5 }
        );
    }
    // The stale intents staged nothing.
    assert_eq!(store.lease_record("stale").await.unwrap(), None);
    assert_eq!(store.inverse("stale").await.unwrap(), None);
    assert_eq!(
        store.advance(intent("/items/1", 6, "l6")).await.unwrap(),
        Advance::Advanced
    );
    assert_eq!(store.epoch("/items/1").await.unwrap(), 6);
    // Another resource has its own fence.
    assert_eq!(store.epoch("/items/2").await.unwrap(), 0);
    assert_eq!(
        store.lease_record("l5").await.unwrap(),
        Some(first.lease_record)
    );
    assert_eq!(store.inverse("l5").await.unwrap(), first.inverse);
    assert_eq!(store.snapshot("l5").await.unwrap(), first.snapshot);
}

/// Receipts are entries of one log in one order: each answer is an envelope that verifies
/// with the log's key, the whole log audits, a later checkpoint extends an earlier one, and
/// each lease's receipts are found by its id.
pub async fn receipts_are_entries_of_one_verifiable_log(store: &dyn Store, _clock: &SetClock) {
    let empty = store.log_head().await.unwrap();
    assert_eq!(empty.size, 0);
    let mut sealed = Vec::new();
    for n in 0..5 {
        let lease = if n % 2 == 0 { Some("even") } else { None };
        sealed.push(
            store
                .append_receipt(body(n, lease, ReceiptKind::Commit))
                .await
                .unwrap(),
        );
    }
    let mut notes = Vec::new();
    for (n, s) in sealed.iter().enumerate() {
        assert_eq!(s.index, n as u64);
        let env: Envelope = serde_json::from_value(s.value.clone()).unwrap();
        let cp = env.verify(key().key()).unwrap();
        assert_eq!(env.receipt["receipt_version"], "2.0");
        assert!(env.receipt.get("prev").is_none() && env.receipt.get("signature").is_none());
        assert!(cp.size > s.index);
        notes.push(env.checkpoint);
    }
    let entries = store.log_entries(0, 5).await.unwrap();
    assert_eq!(entries.len(), 5);
    for ((i, got), want) in entries.iter().zip(&sealed) {
        assert_eq!((*i, got), (want.index, &want.entry));
    }
    let (head, audited) = log_read::audit(store, key().key()).await.unwrap();
    let audited = audited.unwrap();
    assert_eq!((head.size, audited.retained), (5, 5));
    for note in &notes {
        audit::verify_extends(&audited, note.as_bytes(), key().key()).unwrap();
    }
    let even: Vec<(Option<u64>, Vec<u8>)> = store
        .lease_receipts("even")
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.index, r.bytes))
        .collect();
    assert_eq!(
        even,
        [0, 2, 4].map(|i| (Some(sealed[i].index), sealed[i].entry.clone()))
    );
    assert!(store.lease_receipts("none").await.unwrap().is_empty());
}

/// An idempotency key: reserved by one request at a time, free again when released, its
/// outcome stored with its receipt in one transaction, and reusable once it expired.
pub async fn idempotency_keys_are_reserved_stored_and_expire(store: &dyn Store, clock: &SetClock) {
    let hold = T0 + 60_000;
    assert_eq!(
        store.reserve_key("k", "fp-a", "o1", hold).await.unwrap(),
        KeyState::Reserved
    );
    assert_eq!(
        store.reserve_key("k", "fp-b", "o2", hold).await.unwrap(),
        KeyState::Running {
            fingerprint: Some("fp-a".into())
        }
    );
    store.release_key("k".into(), "o1".into()).await.unwrap();
    assert_eq!(
        store.reserve_key("k", "fp-a", "o3", hold).await.unwrap(),
        KeyState::Reserved
    );
    let attach = Attachments {
        idempotency: Some(IdempotencyRecord {
            key: "k".into(),
            outcome: outcome("fp-a"),
            expires_ms: T0 + HOUR,
        }),
        escrow: None,
        freeze: None,
    };
    let sealed = store
        .append_receipt_with(body(1, None, ReceiptKind::Commit), attach)
        .await
        .unwrap()
        .expect("no escrow update to fail");
    // Released as the write path does once the outcome is durable: the outcome stays.
    store.release_key("k".into(), "o3".into()).await.unwrap();
    let KeyState::Stored(stored) = store.reserve_key("k", "fp-c", "o4", hold).await.unwrap() else {
        panic!("the outcome is stored")
    };
    assert_eq!(
        stored,
        StoredOutcome {
            receipt: Some(sealed.value.clone()),
            expires_ms: T0 + HOUR,
            ..outcome("fp-a")
        }
    );
    // Past its retention the key is free for a new request.
    clock.advance(Duration::from_millis(HOUR as u64 + 1));
    assert_eq!(
        store
            .reserve_key("k", "fp-d", "o5", T0 + 2 * HOUR)
            .await
            .unwrap(),
        KeyState::Reserved
    );
}

/// Escrow updates are compare-and-set on the state; one whose expected state does not hold
/// stores nothing, not even the receipt it came with.
pub async fn escrow_updates_are_compare_and_set(store: &dyn Store, _clock: &SetClock) {
    let held = |expect| EscrowUpdate {
        id: "e1".into(),
        expect,
        record: EscrowRecord::held("e1", "l1"),
        expires_at_ms: Some(T0 + HOUR),
    };
    assert!(store.escrow_put(held(None)).await.unwrap());
    assert!(!store.escrow_put(held(None)).await.unwrap(), "exists");
    let releasing = EscrowUpdate {
        id: "e1".into(),
        expect: Some(EscrowState::Held),
        record: EscrowRecord {
            state: EscrowState::Releasing,
            ..EscrowRecord::held("e1", "l1")
        },
        expires_at_ms: None,
    };
    assert!(store.escrow_put(releasing.clone()).await.unwrap());
    assert!(!store.escrow_put(releasing).await.unwrap(), "decided once");
    // A rejection racing the release: its receipt is not stored either.
    let before = store.log_head().await.unwrap().size;
    let reject = Attachments {
        idempotency: None,
        freeze: None,
        escrow: Some(EscrowUpdate {
            id: "e1".into(),
            expect: Some(EscrowState::Held),
            record: EscrowRecord {
                state: EscrowState::Rejected,
                ..EscrowRecord::held("e1", "l1")
            },
            expires_at_ms: None,
        }),
    };
    let lost = store
        .append_receipt_with(body(1, None, ReceiptKind::Escrow), reject)
        .await
        .unwrap();
    assert!(lost.is_none());
    assert_eq!(store.log_head().await.unwrap().size, before);
    // The release's end, with its receipt in the record.
    let released = Attachments {
        idempotency: None,
        freeze: None,
        escrow: Some(EscrowUpdate {
            id: "e1".into(),
            expect: Some(EscrowState::Releasing),
            record: EscrowRecord {
                state: EscrowState::Released,
                upstream_status: Some(200),
                ..EscrowRecord::held("e1", "l1")
            },
            expires_at_ms: None,
        }),
    };
    let sealed = store
        .append_receipt_with(body(2, Some("l1"), ReceiptKind::Commit), released)
        .await
        .unwrap()
        .expect("releasing held");
    let rec = store.escrow("e1").await.unwrap().unwrap();
    assert_eq!(rec.state, EscrowState::Released);
    assert_eq!(rec.receipt, Some(sealed.value));
    assert_eq!(store.escrow("e2").await.unwrap(), None);
    let all = store.escrows(10).await.unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].escrow_id, "e1");
}

/// A committed lease is compensated once, with its resource's fence advanced in the same
/// transaction; a granted, interim or unknown lease is not.
pub async fn a_lease_is_compensated_at_most_once(store: &dyn Store, _clock: &SetClock) {
    store.advance(intent("/c", 3, "lc")).await.unwrap();
    assert_eq!(
        store
            .begin_compensation("lc".into(), "/c".into())
            .await
            .unwrap(),
        Compensation::Started { epoch: 4 }
    );
    assert_eq!(store.epoch("/c").await.unwrap(), 4);
    let rec = store.lease_record("lc").await.unwrap().unwrap();
    assert_eq!(rec.state, LeaseState::Compensated);
    assert_eq!(rec.compensation_epoch, Some(4));
    assert_eq!(
        store
            .begin_compensation("lc".into(), "/c".into())
            .await
            .unwrap(),
        Compensation::AlreadyCompensated
    );
    assert_eq!(store.epoch("/c").await.unwrap(), 4);
    // The inverse writes another resource (a POST's member, SPEC §5.4): that resource is
    // fenced, with its own next epoch, and the written one stays where it was.
    store.advance(intent("/m", 2, "lm")).await.unwrap();
    store.advance(intent("/m/1", 9, "lm1")).await.unwrap();
    assert_eq!(
        store
            .begin_compensation("lm".into(), "/m/1".into())
            .await
            .unwrap(),
        Compensation::Started { epoch: 10 }
    );
    assert_eq!(store.epoch("/m/1").await.unwrap(), 10);
    assert_eq!(store.epoch("/m").await.unwrap(), 2);
    // Granted only (staged, never written).
    let granted = LeaseRecord {
        state: LeaseState::Granted,
        path: None,
        ..LeaseRecord::committed("lg", "/g", 1, T0 + HOUR)
    };
    store
        .stage("lg".into(), Some(granted.clone()), Some(b"{}".to_vec()))
        .await
        .unwrap();
    assert_eq!(store.lease_record("lg").await.unwrap(), Some(granted));
    assert_eq!(
        store.epoch("/g").await.unwrap(),
        0,
        "a grant moves no epoch"
    );
    assert_eq!(
        store
            .begin_compensation("lg".into(), "/g".into())
            .await
            .unwrap(),
        Compensation::NotCommitted
    );
    // Sent but not completed: an interim receipt marks it so (SPEC §7).
    store.advance(intent("/i", 1, "li")).await.unwrap();
    store
        .append_receipt(body(1, Some("li"), ReceiptKind::Interim))
        .await
        .unwrap();
    assert_eq!(
        store.lease_record("li").await.unwrap().unwrap().state,
        LeaseState::Interim
    );
    assert_eq!(
        store
            .begin_compensation("li".into(), "/i".into())
            .await
            .unwrap(),
        Compensation::NotCommitted
    );
    assert_eq!(
        store
            .begin_compensation("unknown".into(), "/u".into())
            .await
            .unwrap(),
        Compensation::NotCommitted
    );
}
