//! Relay messages, RCNS records, budgets and freezes.

use super::*;

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
