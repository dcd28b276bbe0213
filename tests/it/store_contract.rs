//! The state store's contract (`palisade::store::Store`), one scenario a function, run against
//! every backend: the embedded store here (`store.rs`), PostgreSQL in `tests/postgres.rs`.
//! A backend passes when it gives the same answers; each scenario names what it checks.
//!
//! Every store runs on a `SetClock`, so expiry is tested by moving the clock, not by sleeping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use palisade::clock::SetClock;
use palisade::store::log_read;
use palisade::store::{
    Advance, Attachments, Compensation, EscrowRecord, EscrowState, EscrowUpdate, IdempotencyRecord,
    KeyState, LeaseRecord, LeaseState, RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, RelayLimits,
    RelayMessage, RelayPosted, RelayQuery, Store, StoredOutcome, WriteIntent,
};
use palisade_policy::keys::KeyPair;
use palisade_policy::log::{audit, Envelope, Signer};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};

/// The time every store starts at: 2026-12-03T12:00:00Z.
pub const T0: i64 = 1_796_299_200_000;
const HOUR: i64 = 3_600_000;

/// The key the stores under test sign the log's checkpoints with (a test key).
pub fn key() -> Arc<Signer> {
    Arc::new(
        Signer::new(
            "contract.example/palisade",
            Arc::new(KeyPair::from_seed([7; 32])),
        )
        .unwrap(),
    )
}

fn intent(resource: &str, epoch: u64, lease: &str) -> WriteIntent {
    WriteIntent {
        resource: resource.into(),
        epoch,
        lease_id: lease.into(),
        expires_at_ms: T0 + HOUR,
        lease_record: LeaseRecord::committed(lease, resource, epoch, T0 + HOUR),
        inverse: Some(format!(r#"{{"method":"DELETE","path":"{resource}"}}"#).into_bytes()),
        snapshot: Some(br#"{"before":true}"#.to_vec()),
    }
}

fn body(n: u64, lease: Option<&str>, kind: ReceiptKind) -> ReceiptBody {
    ReceiptBody {
        lease_id: lease.map(str::to_owned),
        cas_fence_epoch: Some(n),
        ..ReceiptBody::new(
            format!("urn:uuid:contract-{n}"),
            kind,
            "2026-12-03T12:00:00.000Z".into(),
        )
    }
}

fn outcome(fingerprint: &str) -> StoredOutcome {
    StoredOutcome {
        fingerprint: fingerprint.into(),
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body_b64: "e30=".into(),
        receipt: None,
        expires_ms: 0,
    }
}

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

fn message(tx: &str, sig: u8, expires_ms: i64) -> RelayMessage {
    RelayMessage {
        tx_id: tx.into(),
        signature: format!("0x{}", hex::encode([sig; 65])),
        parties: [(84532, [0x19; 20]), (84532, [0x15; 20])],
        envelope: format!("{{\"n\":{sig}}}").into_bytes(),
        received_at_s: 1_800_000_000,
        expires_ms,
    }
}

/// Relay messages: one per signature, caps per transaction and in all, pages in cursor
/// order, gone once expired (and their place under the caps with them).
pub async fn relay_messages_dedup_cap_page_and_expire(store: &dyn Store, clock: &SetClock) {
    let limits = RelayLimits {
        per_tx: 2,
        total: 3,
    };
    let soon = T0 + 1_000;
    let post = |m| store.relay_post(m, limits);
    assert_eq!(
        post(message("0xa", 1, soon)).await.unwrap(),
        RelayPosted::Stored { cursor: 1 }
    );
    assert_eq!(
        post(message("0xa", 1, soon)).await.unwrap(),
        RelayPosted::Duplicate { cursor: 1 }
    );
    assert_eq!(
        post(message("0xa", 2, soon)).await.unwrap(),
        RelayPosted::Stored { cursor: 2 }
    );
    assert_eq!(
        post(message("0xa", 3, soon)).await.unwrap(),
        RelayPosted::TxFull
    );
    assert_eq!(
        post(message("0xb", 4, T0 + HOUR)).await.unwrap(),
        RelayPosted::Stored { cursor: 3 }
    );
    assert_eq!(
        post(message("0xc", 5, T0 + HOUR)).await.unwrap(),
        RelayPosted::Full
    );
    let page = store
        .relay_page(&RelayQuery::Tx("0xa".into()), 0, 10)
        .await
        .unwrap();
    assert_eq!(page.iter().map(|e| e.cursor).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(page[0].envelope, b"{\"n\":1}");
    let after_first = store
        .relay_page(&RelayQuery::Tx("0xa".into()), 1, 10)
        .await
        .unwrap();
    assert_eq!(after_first.len(), 1);
    let party = RelayQuery::Party {
        address: [0x15; 20],
        chain: Some(84532),
    };
    assert_eq!(store.relay_page(&party, 0, 10).await.unwrap().len(), 3);
    // The store's clock passes the first two messages' expiry.
    clock.advance(Duration::from_millis(2_000));
    assert!(store
        .relay_page(&RelayQuery::Tx("0xa".into()), 0, 10)
        .await
        .unwrap()
        .is_empty());
    let again = post(message("0xa", 1, T0 + HOUR)).await.unwrap();
    assert!(
        matches!(again, RelayPosted::Stored { cursor } if cursor > 3),
        "an expired message posted again is kept anew, under a new cursor: {again:?}"
    );
}

/// RCNS records: one per key, caps per owner and in all, per kind; expired ones free their
/// key and their place; `Replace` changes a record in place.
pub async fn rcns_records_keep_caps_and_expire(store: &dyn Store, clock: &SetClock) {
    let record = |key: &str, owner: &str, expires_ms| RcnsRecord {
        kind: RcnsKind::Contract,
        key: key.into(),
        owner: owner.into(),
        body: serde_json::json!({"synthesis_id": key}),
        expires_ms,
    };
    let create = RcnsPutMode::Create {
        per_owner: 2,
        total: 3,
    };
    let later = T0 + HOUR;
    let put = |r| store.rcns_put(r, create);
    assert_eq!(
        put(record("s1", "a", later)).await.unwrap(),
        RcnsPut::Stored
    );
    assert!(matches!(
        put(record("s1", "b", later)).await.unwrap(),
        RcnsPut::Exists(old) if old.owner == "a"
    ));
    assert_eq!(
        put(record("s2", "a", T0 + 200)).await.unwrap(),
        RcnsPut::Stored
    );
    assert_eq!(
        put(record("s3", "a", later)).await.unwrap(),
        RcnsPut::OwnerFull
    );
    assert_eq!(
        put(record("s4", "b", later)).await.unwrap(),
        RcnsPut::Stored
    );
    assert_eq!(put(record("s5", "c", later)).await.unwrap(), RcnsPut::Full);
    let mut attempt = record("t1", "a", later);
    attempt.kind = RcnsKind::Attempt;
    assert_eq!(
        store.rcns_put(attempt, create).await.unwrap(),
        RcnsPut::Stored
    );
    let mine = store
        .rcns_list(RcnsKind::Contract, Some("a"), 10)
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["s1", "s2"]
    );
    clock.advance(Duration::from_millis(300));
    assert_eq!(
        store.rcns_get(RcnsKind::Contract, "s2").await.unwrap(),
        None
    );
    assert_eq!(
        put(record("s2", "a", later)).await.unwrap(),
        RcnsPut::Stored
    );
    let mut changed = record("s1", "a", later);
    changed.body["revoked"] = true.into();
    assert_eq!(
        store.rcns_put(changed, RcnsPutMode::Replace).await.unwrap(),
        RcnsPut::Stored
    );
    let s1 = store
        .rcns_get(RcnsKind::Contract, "s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s1.body["revoked"], true);
    assert_eq!(
        store
            .rcns_list(RcnsKind::Contract, None, 10)
            .await
            .unwrap()
            .len(),
        3
    );
}

/// Runs each scenario above as a test of its own on the store `$open` makes: an async fn
/// returning `(Arc<dyn Store>, Arc<SetClock>, guard)`, the guard keeping the store's files or
/// database alive until the test ends.
/// SPEC §14: a budget's window slides exactly; a check over any rule spends nothing; a refund
/// gives the units back; freezes are stored with their receipt, and lifted the same way.
pub async fn budgets_slide_and_freezes_are_stored_with_their_receipts(
    store: &dyn Store,
    clock: &SetClock,
) {
    use palisade::store::{BudgetSpend, BudgetVerdict, FreezeChange};
    let rule = |key: u8, limit: u32| BudgetSpend {
        key: [key; 16],
        limit,
        window_ms: 10_000,
    };
    let spent = |v: BudgetVerdict| match v {
        BudgetVerdict::Spent(rows) => rows,
        other => panic!("{other:?}"),
    };
    let first = spent(
        store
            .budget_spend(vec![rule(1, 2), rule(2, 5)])
            .await
            .unwrap(),
    );
    assert_eq!(first.len(), 2);
    clock.advance(Duration::from_secs(4));
    spent(
        store
            .budget_spend(vec![rule(1, 2), rule(2, 5)])
            .await
            .unwrap(),
    );
    // Rule 1 is full: nothing of rule 2 is spent either, and one fits 6 s later.
    assert_eq!(
        store
            .budget_spend(vec![rule(2, 5), rule(1, 2)])
            .await
            .unwrap(),
        BudgetVerdict::Over {
            rule: 1,
            retry_after_ms: 6_000
        }
    );
    // A refund gives a unit back.
    store.budget_refund(first).await.unwrap();
    spent(store.budget_spend(vec![rule(1, 2)]).await.unwrap());
    assert!(matches!(
        store.budget_spend(vec![rule(1, 2)]).await.unwrap(),
        BudgetVerdict::Over { rule: 0, .. }
    ));
    // The window slides: 10 s after the second spend, both it and the refunded one are gone.
    clock.advance(Duration::from_secs(10));
    spent(store.budget_spend(vec![rule(1, 2)]).await.unwrap());
    // Rule 2's two spends (at 0 s and 4 s) left its window too: five fit again, not six.
    for _ in 0..5 {
        spent(store.budget_spend(vec![rule(2, 5)]).await.unwrap());
    }
    assert!(matches!(
        store.budget_spend(vec![rule(2, 5)]).await.unwrap(),
        BudgetVerdict::Over { rule: 0, .. }
    ));

    // A freeze, stored with its receipt; then lifted with another.
    let freeze = |record: Option<&[u8]>| Attachments {
        freeze: Some(FreezeChange {
            id: "0193-f".into(),
            record: record.map(<[u8]>::to_vec),
        }),
        ..Attachments::default()
    };
    assert!(store.freezes().await.unwrap().is_empty());
    let made = store
        .append_receipt_with(
            body(1, None, ReceiptKind::Freeze),
            freeze(Some(b"{\"id\":1}")),
        )
        .await
        .unwrap();
    assert!(made.is_some());
    assert_eq!(store.freezes().await.unwrap(), [b"{\"id\":1}".to_vec()]);
    store
        .append_receipt_with(body(2, None, ReceiptKind::Freeze), freeze(None))
        .await
        .unwrap();
    assert!(store.freezes().await.unwrap().is_empty());
}

macro_rules! contract_tests {
    ($open:path) => {
        $crate::store_contract::contract_tests!(
            @ $open,
            fences_only_move_forward,
            receipts_are_entries_of_one_verifiable_log,
            idempotency_keys_are_reserved_stored_and_expire,
            escrow_updates_are_compare_and_set,
            a_lease_is_compensated_at_most_once,
            relay_messages_dedup_cap_page_and_expire,
            rcns_records_keep_caps_and_expire,
            budgets_slide_and_freezes_are_stored_with_their_receipts
        );
    };
    (@ $open:path, $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (store, clock, _guard) = $open().await;
                $crate::store_contract::$name(&*store, &clock).await;
            }
        )*
    };
}
pub(crate) use contract_tests;
