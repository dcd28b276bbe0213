//! Audit export's reader (`store::log_query`, SPEC §9) on a log of 10,500 receipts: its cursor
//! walks the whole log without a gap or a repeat, a filter's pages (bounded by the scan, not
//! only by `limit`) return exactly the receipts it names, and `since`/`until` find their
//! start by a binary search over the entries' times, not by reading the whole log.

use std::collections::BTreeSet;

use palisade::clock::SetClock;
use palisade::store::log_query::{self, SCAN};
use palisade::store::Store;
use palisade_policy::lease::format_rfc3339_ms;
use palisade_policy::log::query::Filter;
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use serde_json::Value;

use super::{key, T0};

const RECEIPTS: u64 = 10_500;
/// Appended this many at a time (one group commit, more or less); each batch two minutes
/// after the one before it, so time order holds between batches.
const BATCH: u64 = 150;

pub async fn audit_export_walks_the_log_without_gap_or_repeat(store: &dyn Store, _: &SetClock) {
    for b in 0..RECEIPTS.div_ceil(BATCH) {
        let at = format_rfc3339_ms(T0 + i64::try_from(b).unwrap() * 120_000);
        let appends = (b * BATCH..((b + 1) * BATCH).min(RECEIPTS)).map(|n| {
            let kind = if n % 7 == 0 {
                ReceiptKind::Rejection
            } else {
                ReceiptKind::Commit
            };
            let body = ReceiptBody {
                code: (n % 7 == 0).then(|| "ERR_LEASE_MISSING".to_owned()),
                operation: Some(format!("PUT /items/{}", n % 3)),
                ..ReceiptBody::new(format!("urn:uuid:export-{n}"), kind, at.clone())
            };
            store.append_receipt(body)
        });
        for sealed in futures_util::future::join_all(appends).await {
            sealed.unwrap();
        }
    }
    // What the log holds, read entry by entry: what every export below must return.
    let all: Vec<(u64, Value)> = store
        .log_entries(0, RECEIPTS)
        .await
        .unwrap()
        .into_iter()
        .map(|(i, e)| (i, serde_json::from_slice(&e).unwrap()))
        .collect();
    assert_eq!(all.len() as u64, RECEIPTS);
    let n_of = |r: &Value| -> u64 {
        r["receipt_id"].as_str().unwrap()["urn:uuid:export-".len()..]
            .parse()
            .unwrap()
    };

    // Unfiltered, 1,000 a page: every index once, in order, each envelope proven.
    let seen = walk(store, &Filter::default(), 1_000, true).await;
    assert_eq!(seen, (0..RECEIPTS).collect::<Vec<_>>());

    // A filter matching one receipt in seven, 100 a page: the pages end by `limit` and, where
    // fewer match, by the scan bound; together exactly the rejections.
    let refused = Filter {
        outcome: Some("refused".into()),
        ..Filter::default()
    };
    let want: Vec<u64> = all
        .iter()
        .filter(|(_, r)| n_of(r) % 7 == 0)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(walk(store, &refused, 100, false).await, want);
    // One matching one receipt in three, combined with a code: no page may lose one.
    let both = Filter {
        operation: Some("PUT /items/1".into()),
        code: Some("ERR_LEASE_MISSING".into()),
        ..Filter::default()
    };
    let want: Vec<u64> = all
        .iter()
        .filter(|(_, r)| n_of(r) % 7 == 0 && n_of(r) % 3 == 1)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(walk(store, &both, 1_000, false).await, want);

    // A time window: exactly the batches inside it. Its start is found by a binary search,
    // so its first page reaches receipts more than one scan bound (10,000) past the log's
    // start, which a scan from index 0 could not.
    let (from_batch, to_batch) = (67, 69);
    let window = Filter {
        since_ms: Some(T0 + from_batch * 120_000),
        until_ms: Some(T0 + to_batch * 120_000),
        ..Filter::default()
    };
    let want: BTreeSet<u64> = all
        .iter()
        .filter(|(_, r)| (from_batch..to_batch).contains(&i64::try_from(n_of(r) / BATCH).unwrap()))
        .map(|(i, _)| *i)
        .collect();
    let first = log_query::page(store, &window, None, 1_000).await.unwrap();
    assert_eq!(first.found.len(), want.len());
    assert!(
        first.next.is_none(),
        "past `until`, nothing later can match"
    );
    assert!(
        want.first().is_some_and(|i| *i > SCAN),
        "the window starts past one scan bound"
    );
    let got: BTreeSet<u64> = first.found.iter().map(|f| f.index).collect();
    assert_eq!(got, want);
    // Since a time after every receipt: an empty page that says nothing more can come.
    let late = Filter {
        since_ms: Some(T0 + 1_000 * 120_000),
        ..Filter::default()
    };
    let p = log_query::page(store, &late, None, 100).await.unwrap();
    assert!(p.found.is_empty() && p.next.is_none());
}

/// Every index `filter` gives, page after page, `limit` a page; `prove`: each page's
/// envelopes verify under the log's key.
async fn walk(store: &dyn Store, filter: &Filter, limit: usize, prove: bool) -> Vec<u64> {
    let (mut after, mut seen, mut pages) = (None, Vec::new(), 0);
    loop {
        let page = log_query::page(store, filter, after, limit).await.unwrap();
        assert!(page.found.len() <= limit);
        if prove {
            for env in log_query::envelopes(store, &page).await.unwrap() {
                let cp = env.verify(key().key()).unwrap();
                assert!(cp.size > env.index);
            }
        }
        seen.extend(page.found.iter().map(|f| f.index));
        pages += 1;
        assert!(pages < 1_000, "the cursor does not end");
        match page.next {
            Some(n) => {
                assert!(
                    after.is_none_or(|a| n > a),
                    "the cursor went back: {after:?} → {n}"
                );
                after = Some(n);
            }
            None => return seen,
        }
    }
}
