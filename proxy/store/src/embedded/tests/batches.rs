//! Commits shared by batches, changes read before redb holds them, RCNS records.

use super::*;

/// Whether redb itself (not the overlay) holds `resource`'s fence.
fn redb_fence(store: &EmbeddedStore, resource: &str) -> Option<u64> {
    let rtx = store.db.begin_read().unwrap();
    let table = rtx.open_table(FENCES).unwrap();
    let v = table.get(resource.as_bytes()).unwrap();
    v.map(|v| v.value())
}

#[tokio::test]
async fn answered_changes_are_read_before_redb_holds_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let store = EmbeddedStore::open(&path, key()).unwrap();
    store.advance(intent("/o", 4, "lo")).await.unwrap();
    let receipt = ReceiptBody {
        lease_id: Some("lo".into()),
        ..body(0)
    };
    store.append_receipt(receipt).await.unwrap();
    // Two batches in the writer's open transaction: redb has not seen them (the writer
    // commits after `COMMIT_BATCHES` batches or `COMMIT_IDLE`), but every point read has.
    assert!(store.unsettled.load(Ordering::Acquire) > 0);
    assert_eq!(redb_fence(&store, "/o"), None, "redb lags the journal");
    assert_eq!(store.epoch("/o").await.unwrap(), 4);
    assert!(store.inverse("lo").await.unwrap().is_some());
    assert!(store.lease_record("lo").await.unwrap().is_some());
    assert_eq!(
        store.advance(intent("/o", 4, "lp")).await.unwrap(),
        Advance::Stale { current: 4 },
        "the writer's own checks see its open transaction"
    );
    // A range read commits first, so it sees the receipt.
    assert_eq!(store.lease_receipts("lo").await.unwrap().len(), 1);
    assert_eq!(store.unsettled.load(Ordering::Acquire), 0);
    assert_eq!(redb_fence(&store, "/o"), Some(4));
    // A quiet writer commits on its own.
    store.advance(intent("/q", 1, "lq")).await.unwrap();
    assert_eq!(redb_fence(&store, "/q"), None);
    tokio::time::sleep(writer::COMMIT_IDLE * 20).await;
    assert_eq!(redb_fence(&store, "/q"), Some(1));
    assert_eq!(store.unsettled.load(Ordering::Acquire), 0);
}

#[tokio::test]
async fn many_batches_share_a_commit_and_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path, key()).unwrap();
        // Sequential, so one batch each: more batches than one commit holds.
        for i in 1..=(writer::COMMIT_BATCHES as u64 * 3 + 1) {
            store
                .advance(intent("/m", i, &format!("l{i}")))
                .await
                .unwrap();
            assert_eq!(store.epoch("/m").await.unwrap(), i);
        }
        assert!(store.commits() > writer::COMMIT_BATCHES as u64 * 3);
    }
    let store = EmbeddedStore::open(&path, key()).unwrap();
    assert_eq!(
        store.epoch("/m").await.unwrap(),
        writer::COMMIT_BATCHES as u64 * 3 + 1
    );
}

#[tokio::test]
async fn rcns_records_keep_their_caps_expire_and_survive_reopening() {
    use crate::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let now = T0;
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
    let later = now + 60_000;
    let clock = SetClock::at(T0);
    {
        let store = open_at(&path, Retention::default(), &clock);
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
            put(record("s2", "a", now + 200)).await.unwrap(),
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
        // Another kind is counted apart.
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
        clock.advance(std::time::Duration::from_millis(300));
        assert!(store
            .rcns_get(RcnsKind::Contract, "s2")
            .await
            .unwrap()
            .is_none());
        // Expired, not yet swept: its key and its place under the caps are free.
        assert_eq!(
            put(record("s2", "a", later)).await.unwrap(),
            RcnsPut::Stored
        );
        let mut changed = record("s1", "a", later);
        changed.body["revoked"] = true.into();
        let replaced = store.rcns_put(changed, RcnsPutMode::Replace).await.unwrap();
        assert_eq!(replaced, RcnsPut::Stored);
    }
    let store = open_at(&path, Retention::default(), &clock);
    let s1 = store
        .rcns_get(RcnsKind::Contract, "s1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s1.body["revoked"], true);
    let all = store.rcns_list(RcnsKind::Contract, None, 10).await.unwrap();
    assert_eq!(all.len(), 3);
    assert_eq!(
        store
            .rcns_list(RcnsKind::Attempt, None, 10)
            .await
            .unwrap()
            .len(),
        1
    );
}
