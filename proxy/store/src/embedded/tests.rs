use super::tables::RECEIPTS;
use super::*;
use crate::clock::SetClock;
use crate::log_read;
use crate::{EscrowRecord, EscrowState, LeaseRecord, RcnsRecords};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use palisade_policy::log::{audit, Envelope};
use palisade_policy::receipt::ReceiptKind;
use serde::Deserialize as _;

mod batches;
mod retention;

pub(super) fn key() -> Arc<Signer> {
    Arc::new(
        Signer::new(
            "test.example/palisade",
            Arc::new(KeyPair::from_seed([3; 32])),
        )
        .unwrap(),
    )
}

/// The tests' time: 2026-12-03T12:00:00Z, a day after the receipts [`body`] makes. Every store
/// here runs on a [`SetClock`] from it, so expiry is judged without sleeping or the date.
const T0: i64 = 1_796_299_200_000;

/// The store at `path` with `retention`, on `clock`.
fn open_at(path: &std::path::Path, retention: Retention, clock: &Arc<SetClock>) -> EmbeddedStore {
    EmbeddedStore::open_with(path, key(), retention, clock.clone()).unwrap()
}

fn intent(resource: &str, epoch: u64, lease: &str) -> WriteIntent {
    WriteIntent {
        resource: resource.into(),
        epoch,
        lease_id: lease.into(),
        expires_at_ms: 1_800_000_000_000,
        lease_record: LeaseRecord::committed(lease, resource, epoch, 1_800_000_000_000),
        inverse: Some(br#"{"method":"DELETE","path":"/x"}"#.to_vec()),
        snapshot: None,
    }
}

fn body(i: usize) -> ReceiptBody {
    ReceiptBody {
        cas_fence_epoch: Some(i as u64),
        ..ReceiptBody::new(
            format!("urn:uuid:r{i}"),
            ReceiptKind::Commit,
            "2026-12-02T12:00:00.000Z".into(),
        )
    }
}

#[tokio::test]
async fn epochs_only_move_forward() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(&dir.path().join("s.redb"), key()).unwrap();
    assert_eq!(store.epoch("/items/1").await.unwrap(), 0);
    assert_eq!(
        store.advance(intent("/items/1", 5, "l1")).await.unwrap(),
        Advance::Advanced
    );
    assert_eq!(store.epoch("/items/1").await.unwrap(), 5);
    for stale in [5, 4, 1] {
        assert_eq!(
            store
                .advance(intent("/items/1", stale, "l2"))
                .await
                .unwrap(),
            Advance::Stale { current: 5 },
            "epoch {stale}"
        );
    }
    // A stale intent stages nothing.
    assert_eq!(store.inverse("l2").await.unwrap(), None);
    assert!(store.inverse("l1").await.unwrap().is_some());
    assert_eq!(
        store.advance(intent("/items/1", 9, "l3")).await.unwrap(),
        Advance::Advanced
    );
    assert_eq!(store.epoch("/items/1").await.unwrap(), 9);
    assert_eq!(
        store.epoch("/items/2").await.unwrap(),
        0,
        "resources are independent"
    );
}

#[tokio::test]
async fn state_and_the_receipt_chain_survive_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    {
        let store = EmbeddedStore::open(&path, key()).unwrap();
        store.advance(intent("/a", 3, "l1")).await.unwrap();
        for i in 0..3 {
            store.append_receipt(body(i)).await.unwrap();
        }
    }
    let store = EmbeddedStore::open(&path, key()).unwrap();
    assert_eq!(store.epoch("/a").await.unwrap(), 3);
    assert_eq!(
        store.advance(intent("/a", 3, "l9")).await.unwrap(),
        Advance::Stale { current: 3 }
    );
    assert!(store.inverse("l1").await.unwrap().is_some());
    // The log goes on where it stopped: one tree across the restart, extending the last
    // checkpoint before it.
    let before = store.log_head().await.unwrap();
    let sealed = store.append_receipt(body(3)).await.unwrap();
    assert_eq!(sealed.index, 3);
    let (head, audited) = log_read::audit(&store, key().key()).await.unwrap();
    let audited = audited.unwrap();
    assert_eq!((head.size, audited.retained), (4, 4));
    audit::verify_extends(&audited, before.note.as_bytes(), key().key()).unwrap();
    Envelope::deserialize(&sealed.value)
        .unwrap()
        .verify(key().key())
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_share_commits_and_exactly_one_wins_each_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(EmbeddedStore::open(&dir.path().join("s.redb"), key()).unwrap());
    let before = store.commits();
    // 64 writers race for epoch 1 of one resource; 64 more append receipts.
    let mut tasks = Vec::new();
    for i in 0..64 {
        let s = store.clone();
        tasks.push(tokio::spawn(async move {
            let a = s
                .advance(intent("/hot", 1, &format!("l{i}")))
                .await
                .unwrap();
            s.append_receipt(body(i)).await.unwrap();
            a
        }));
    }
    let mut won = 0;
    for t in tasks {
        if t.await.unwrap() == Advance::Advanced {
            won += 1;
        }
    }
    assert_eq!(won, 1, "exactly one writer advanced epoch 1");
    let commits = store.commits() - before;
    assert!(
        commits < 128,
        "128 jobs took {commits} commits: no group commit"
    );
    let (head, audited) = log_read::audit(store.as_ref(), key().key()).await.unwrap();
    assert_eq!((head.size, audited.unwrap().retained), (64, 64));
}

#[tokio::test]
async fn an_unopenable_file_is_unavailable_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.redb");
    std::fs::write(
        &path,
        b"this is not a redb file, it is a test of the error path",
    )
    .unwrap();
    assert!(matches!(
        EmbeddedStore::open(&path, key()),
        Err(StoreError::Unavailable(_))
    ));
    let missing_dir = dir.path().join("no/such/dir/s.redb");
    assert!(matches!(
        EmbeddedStore::open(&missing_dir, key()),
        Err(StoreError::Unavailable(_))
    ));
}
