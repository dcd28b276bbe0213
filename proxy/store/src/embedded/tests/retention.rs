//! Retention: expired leases, escrows, staged inverses, old log entries, v1 chains, journal
//! replay of deletions, budget spends.

use super::*;

fn retention(leases_ms: u64, receipts: Option<u64>) -> Retention {
    Retention {
        leases: std::time::Duration::from_millis(leases_ms),
        receipts: receipts.map(std::time::Duration::from_secs),
    }
}

fn lease_intent(resource: &str, epoch: u64, lease: &str, expires_at_ms: i64) -> WriteIntent {
    WriteIntent {
        expires_at_ms,
        lease_record: LeaseRecord::committed(lease, resource, epoch, expires_at_ms),
        ..intent(resource, epoch, lease)
    }
}

/// Any write: sweeps run at the end of every batch.
async fn nudge(store: &EmbeddedStore) {
    store
        .stage(
            "nudge".into(),
            Some(LeaseRecord::committed("nudge", "/nudge", 1, 0)),
            None,
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn expired_leases_are_swept_and_fence_epochs_stay() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_at(
        &dir.path().join("s.redb"),
        retention(0, None),
        &SetClock::at(T0),
    );
    let past = T0 - 1_000;
    let future = T0 + 3_600_000;
    store
        .advance(WriteIntent {
            snapshot: Some(b"{\"old\":true}".to_vec()),
            ..lease_intent("/a", 4, "old", past)
        })
        .await
        .unwrap();
    store
        .advance(lease_intent("/b", 2, "new", future))
        .await
        .unwrap();
    for (lease, i) in [("old", 0), ("new", 1)] {
        store
            .append_receipt(ReceiptBody {
                lease_id: Some(lease.into()),
                ..body(i)
            })
            .await
            .unwrap();
    }
    nudge(&store).await;
    assert_eq!(store.lease_record("old").await.unwrap(), None);
    assert_eq!(store.inverse("old").await.unwrap(), None);
    assert_eq!(store.snapshot("old").await.unwrap(), None);
    assert!(store.lease_receipts("old").await.unwrap().is_empty());
    // Epochs are never swept: a stale epoch must stay stale forever.
    assert_eq!(store.epoch("/a").await.unwrap(), 4);
    assert_eq!(
        store
            .advance(lease_intent("/a", 4, "again", future))
            .await
            .unwrap(),
        Advance::Stale { current: 4 }
    );
    // An unexpired lease keeps everything, and the receipts themselves stay.
    assert!(store.lease_record("new").await.unwrap().is_some());
    assert!(store.inverse("new").await.unwrap().is_some());
    assert_eq!(store.lease_receipts("new").await.unwrap().len(), 1);
    assert_eq!(store.receipts().await.unwrap().len(), 2);
}

#[tokio::test]
async fn escrows_go_with_their_leases_data_whatever_their_state() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = open_at(&path, retention(0, None), &SetClock::at(T0));
    let hold = |id: &str, expires_at_ms: i64| EscrowUpdate {
        id: id.into(),
        expect: None,
        record: EscrowRecord::held(id, "l"),
        expires_at_ms: Some(expires_at_ms),
    };
    let past = T0 - 1_000;
    let future = T0 + 3_600_000;
    assert!(store.escrow_put(hold("old", past)).await.unwrap());
    // Held in a receipt's transaction, as a HUMAN_ESCROW write is.
    let attach = Attachments {
        idempotency: None,
        escrow: Some(hold("old-held", past)),
        freeze: None,
    };
    store.append_receipt_with(body(0), attach).await.unwrap();
    assert!(store.escrow_put(hold("new", future)).await.unwrap());
    // A later state change keeps the removal scheduled at creation.
    let decided = EscrowUpdate {
        id: "new".into(),
        expect: Some(EscrowState::Held),
        record: EscrowRecord {
            state: EscrowState::Rejected,
            ..EscrowRecord::held("new", "l")
        },
        expires_at_ms: None,
    };
    assert!(store.escrow_put(decided).await.unwrap());
    nudge(&store).await;
    assert_eq!(store.escrow("old").await.unwrap(), None);
    assert_eq!(store.escrow("old-held").await.unwrap(), None);
    assert_eq!(
        store.escrow("new").await.unwrap().unwrap().state,
        EscrowState::Rejected
    );
    assert_eq!(store.escrows(10).await.unwrap().len(), 1);
    drop(store);
    // The removal was journalled and survives a reopen; "new" is still scheduled.
    let store = open_at(&path, retention(0, None), &SetClock::at(T0));
    assert_eq!(store.escrows(10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn an_inverse_staged_alone_goes_after_retention_unless_its_lease_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let clock = SetClock::at(T0);
    let store = open_at(&dir.path().join("s.redb"), retention(1_500, None), &clock);
    let inv = br#"{"method":"DELETE","path":"/x"}"#.to_vec();
    store
        .stage("orphan".into(), None, Some(inv.clone()))
        .await
        .unwrap();
    store
        .stage("used".into(), None, Some(inv.clone()))
        .await
        .unwrap();
    let future = T0 + 3_600_000;
    store
        .advance(WriteIntent {
            lease_record: LeaseRecord::committed("used", "/u", 1, future),
            ..lease_intent("/u", 1, "used", future)
        })
        .await
        .unwrap();
    nudge(&store).await;
    assert!(
        store.inverse("orphan").await.unwrap().is_some(),
        "kept for one retention period"
    );
    // The store's clock, not the wall's, decides.
    clock.advance(std::time::Duration::from_millis(1_700));
    nudge(&store).await;
    assert_eq!(store.inverse("orphan").await.unwrap(), None);
    assert!(store.inverse("used").await.unwrap().is_some());
    assert!(store.lease_record("used").await.unwrap().is_some());
}

#[tokio::test]
async fn old_entries_leave_the_log_and_its_tree_still_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let now = palisade_policy::lease::format_rfc3339_ms(T0);
    {
        // 100 receipts from yesterday (more than one sweep's worth), then 3 from now, kept
        // forever while they are written.
        let store = open_at(&path, retention(0, None), &SetClock::at(T0));
        for i in 0..100 {
            store.append_receipt(body(i)).await.unwrap();
        }
        for i in 100..103 {
            store
                .append_receipt(ReceiptBody {
                    at: now.clone(),
                    ..body(i)
                })
                .await
                .unwrap();
        }
    }
    {
        // Reopened with a retention of one hour: yesterday's go, 64 per transaction.
        let store = open_at(&path, retention(0, Some(3600)), &SetClock::at(T0));
        nudge(&store).await;
        // 64 plus one per job in the batch (one here).
        assert_eq!(store.log_entries(0, 200).await.unwrap().len(), 103 - 65);
        nudge(&store).await;
        let kept = store.log_entries(0, 200).await.unwrap();
        assert_eq!(
            kept.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            [100, 101, 102]
        );
        // The hashes stay: the tree of 103 still verifies, with the 3 entries retained.
        let (head, audited) = log_read::audit(&store, key().key()).await.unwrap();
        assert_eq!((head.size, audited.unwrap().retained), (103, 3));
    }
    // Reopened, the log goes on from its head.
    let store = open_at(&path, retention(0, Some(3600)), &SetClock::at(T0));
    let sealed = store
        .append_receipt(ReceiptBody {
            at: now.clone(),
            ..body(103)
        })
        .await
        .unwrap();
    assert_eq!(sealed.index, 103);
    let (head, audited) = log_read::audit(&store, key().key()).await.unwrap();
    assert_eq!((head.size, audited.unwrap().retained), (104, 4));
}

#[tokio::test]
async fn a_v1_chain_kept_from_before_the_log_stays_readable_and_goes_under_retention() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    drop(EmbeddedStore::open(&path, key()).unwrap());
    {
        // What a store written before the receipt log holds: chained v1 receipts.
        let db = redb::Database::open(&path).unwrap();
        let wtx = db.begin_write().unwrap();
        {
            let mut t = wtx.open_table(RECEIPTS).unwrap();
            for seq in 0..3u64 {
                let v1 = serde_json::json!({
                    "receipt_version": "1.0", "receipt_id": format!("urn:uuid:v1-{seq}"),
                    "kind": "commit", "at": "2026-12-02T00:00:00.000Z",
                    "prev": Sha256Digest::empty().to_string(),
                });
                t.insert(seq, serde_json::to_vec(&v1).unwrap().as_slice())
                    .unwrap();
            }
        }
        wtx.commit().unwrap();
    }
    {
        let store = open_at(&path, retention(0, None), &SetClock::at(T0));
        assert_eq!(store.receipt_log().await.unwrap().receipts.len(), 3);
        // New receipts go to the log, which starts empty beside the v1 chain.
        assert_eq!(store.append_receipt(body(0)).await.unwrap().index, 0);
        assert_eq!(store.receipt_log().await.unwrap().receipts.len(), 3);
    }
    let store = open_at(&path, retention(0, Some(3600)), &SetClock::at(T0));
    nudge(&store).await;
    let legacy = store.receipt_log().await.unwrap();
    assert!(
        legacy.receipts.is_empty(),
        "the v1 chain goes under retention too"
    );
    assert_eq!(legacy.anchor.unwrap().pruned, 3);
}

#[tokio::test]
async fn journal_replay_applies_deletions() {
    use super::tables::{
        expiry_key, lease_key, Part, T_LEASE_DATA, T_LEASE_EXPIRY, T_LOG_ENTRIES, T_META,
    };
    use crate::journal::{Journal, Redo};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path, key()).unwrap();
        store
            .advance(lease_intent("/a", 1, "l1", 1_800_000_000_000))
            .await
            .unwrap();
        store.append_receipt(body(0)).await.unwrap();
    }
    // What a crashed writer leaves: journalled deletions not yet in the file.
    let anchor = br#"{"pruned":1,"prev":"sha256:0000000000000000000000000000000000000000000000000000000000000000"}"#;
    let mut redo = Redo::default();
    redo.delete(T_LEASE_DATA, &lease_key("l1", Part::Inverse, None));
    redo.delete(T_LOG_ENTRIES, &0u64.to_be_bytes());
    redo.delete(T_LEASE_EXPIRY, &expiry_key(1, "l1"));
    redo.put(T_META, b"receipt_anchor", anchor);
    let (mut journal, _) = Journal::open(&journal_path(&path)).unwrap();
    journal.append(&redo.bytes).unwrap();
    drop(journal);
    let store = EmbeddedStore::open(&path, key()).unwrap();
    assert_eq!(store.inverse("l1").await.unwrap(), None);
    assert!(store.lease_record("l1").await.unwrap().is_some());
    assert!(store.log_entries(0, 1).await.unwrap().is_empty());
    assert_eq!(store.log_head().await.unwrap().size, 1, "the hashes stay");
    assert_eq!(store.receipt_log().await.unwrap().anchor.unwrap().pruned, 1);
    assert_eq!(store.epoch("/a").await.unwrap(), 1);
}

/// Budget spends no window can reach (older than a day) are swept, whatever key they are under,
/// so a key never spent again leaves nothing behind (SPEC §14).
#[tokio::test]
async fn budget_spends_a_day_old_are_swept() {
    use crate::{BudgetSpend, BudgetVerdict};
    use redb::ReadableTableMetadata as _;
    let dir = tempfile::tempdir().unwrap();
    let clock = SetClock::at(T0);
    let store = open_at(&dir.path().join("s.redb"), retention(0, None), &clock);
    let spend = |key: u8| BudgetSpend {
        key: [key; 16],
        limit: 10,
        window_ms: 60_000,
    };
    for k in 0..3 {
        let v = store.budget_spend(vec![spend(k)]).await.unwrap();
        assert!(matches!(v, BudgetVerdict::Spent(_)));
    }
    let rows = |store: &EmbeddedStore| {
        let rtx = store.db.begin_read().unwrap();
        let n = rtx
            .open_table(super::tables::BUDGETS)
            .unwrap()
            .len()
            .unwrap();
        let m = rtx
            .open_table(super::tables::BUDGET_AGE)
            .unwrap()
            .len()
            .unwrap();
        (n, m)
    };
    store.settle().await.unwrap();
    assert_eq!(rows(&store), (3, 3));
    clock.advance(std::time::Duration::from_secs(86_401));
    nudge(&store).await;
    store.settle().await.unwrap();
    assert_eq!(
        rows(&store),
        (0, 0),
        "swept: nothing of the three keys is left"
    );
}
