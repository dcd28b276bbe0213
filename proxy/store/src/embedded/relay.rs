//! The negotiation relay's messages in the embedded store (`store::relay`).
//!
//! [`RELAY_MESSAGES`] holds each message's record under its cursor; [`RELAY_INDEX`] finds
//! them, by a tag byte:
//!
//! ```text
//! 't' · len(txId) · txId · cursor   → ()             a transaction's messages, in order
//! 'a' · address(20) · cursor        → chain (u64)    a party's inbox, in order
//! 's' · signature                   → cursor         dedup by inner signature
//! ```
//! The cursor counter lives in `META` (`relay_next`), so cursors keep growing after every
//! message was swept. Cursors follow arrival, and arrival with one TTL is expiry order, so
//! the sweep takes messages from the front.

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata};

use crate::relay::Record;
use crate::{RelayEntry, RelayLimits, RelayMessage, RelayPosted, RelayQuery, StoreError};

use super::tables::{unavailable, Tables, RELAY_INDEX, RELAY_MESSAGES};

const TAG_TX: u8 = b't';
const TAG_PARTY: u8 = b'a';
const TAG_SIG: u8 = b's';
/// `META` key of the next cursor (big-endian u64).
const NEXT: &str = "relay_next";

fn tx_prefix(tx: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(tx.len() + 10);
    k.push(TAG_TX);
    k.push(u8::try_from(tx.len()).unwrap_or(u8::MAX));
    k.extend_from_slice(tx.as_bytes());
    k
}

fn party_prefix(address: &[u8; 20]) -> Vec<u8> {
    let mut k = Vec::with_capacity(29);
    k.push(TAG_PARTY);
    k.extend_from_slice(address);
    k
}

fn sig_key(sig: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(sig.len() + 1);
    k.push(TAG_SIG);
    k.extend_from_slice(sig.as_bytes());
    k
}

fn with_cursor(mut prefix: Vec<u8>, cursor: u64) -> Vec<u8> {
    prefix.extend_from_slice(&cursor.to_be_bytes());
    prefix
}

/// The cursor at the end of an index key.
fn cursor_of(key: &[u8]) -> Option<u64> {
    let tail = key.get(key.len().checked_sub(8)?..)?;
    Some(u64::from_be_bytes(tail.try_into().ok()?))
}

fn be_u64(v: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(v.try_into().ok()?))
}

fn record_of(bytes: &[u8]) -> Result<Record, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| unavailable("a relay record cannot be read"))
}

/// Inside the writer's transaction: dedup, caps, then the message and its index entries.
pub(super) fn post(
    t: &mut Tables<'_>,
    m: &RelayMessage,
    limits: RelayLimits,
) -> Result<RelayPosted, StoreError> {
    let now = t.now_ms;
    let sig = sig_key(&m.signature);
    let kept = t
        .relay_index
        .get(sig.as_slice())
        .map_err(unavailable)?
        .and_then(|v| be_u64(v.value()));
    if let Some(cursor) = kept {
        let live = match t.relay.get(cursor).map_err(unavailable)? {
            Some(rec) => record_of(rec.value())?.exp > now,
            None => false,
        };
        if live {
            return Ok(RelayPosted::Duplicate { cursor });
        }
        // Expired, not yet swept: it goes now, and the message is kept anew.
        remove(t, cursor)?;
    }
    let prefix = tx_prefix(&m.tx_id);
    let end = with_cursor(prefix.clone(), u64::MAX);
    let in_tx = t
        .relay_index
        .range::<&[u8]>(prefix.as_slice()..end.as_slice())
        .map_err(unavailable)?
        .take(usize::try_from(limits.per_tx).unwrap_or(usize::MAX))
        .count() as u64;
    if in_tx >= limits.per_tx {
        return Ok(RelayPosted::TxFull);
    }
    if t.relay.len().map_err(unavailable)? >= limits.total {
        return Ok(RelayPosted::Full);
    }
    let next = t
        .meta
        .get(NEXT)
        .map_err(unavailable)?
        .and_then(|v| be_u64(v.value()))
        .unwrap_or(1);
    let cursor = next;
    let record = Record::of(m);
    let bytes = serde_json::to_vec(&record).map_err(unavailable)?;
    t.put_relay(cursor, &bytes)?;
    t.put_relay_index(&with_cursor(prefix, cursor), &[])?;
    for (chain, address) in record.party_keys() {
        t.put_relay_index(
            &with_cursor(party_prefix(&address), cursor),
            &chain.to_be_bytes(),
        )?;
    }
    t.put_relay_index(&sig, &cursor.to_be_bytes())?;
    t.put_meta(NEXT, &(cursor + 1).to_be_bytes())?;
    Ok(RelayPosted::Stored { cursor })
}

/// Removes the message at `cursor` and its index entries.
fn remove(t: &mut Tables<'_>, cursor: u64) -> Result<(), StoreError> {
    let Some(bytes) = t
        .relay
        .get(cursor)
        .map_err(unavailable)?
        .map(|v| v.value().to_vec())
    else {
        return Ok(());
    };
    let record = record_of(&bytes)?;
    t.delete_relay(cursor)?;
    t.delete_relay_index(&with_cursor(tx_prefix(&record.tx), cursor))?;
    for (_, address) in record.party_keys() {
        t.delete_relay_index(&with_cursor(party_prefix(&address), cursor))?;
    }
    // Only if it still names this message (a re-post after expiry names a newer one).
    let sig = sig_key(&record.sig);
    let names_this = t
        .relay_index
        .get(sig.as_slice())
        .map_err(unavailable)?
        .and_then(|v| be_u64(v.value()))
        == Some(cursor);
    if names_this {
        t.delete_relay_index(&sig)?;
    }
    Ok(())
}

/// Removes up to `limit` expired messages, oldest first.
pub(super) fn sweep(t: &mut Tables<'_>, now: u64, limit: usize) -> Result<(), StoreError> {
    let mut due = Vec::new();
    for row in t.relay.iter().map_err(unavailable)?.take(limit) {
        let (cursor, rec) = row.map_err(unavailable)?;
        if record_of(rec.value())?.exp > now as i64 {
            break;
        }
        due.push(cursor.value());
    }
    for cursor in due {
        remove(t, cursor)?;
    }
    Ok(())
}

/// A page of `query`'s messages after `after`, read in one read transaction.
pub(super) fn page(
    rtx: &ReadTransaction,
    query: &RelayQuery,
    after: u64,
    limit: usize,
    now: i64,
) -> Result<Vec<RelayEntry>, StoreError> {
    let index = rtx.open_table(RELAY_INDEX).map_err(unavailable)?;
    let messages = rtx.open_table(RELAY_MESSAGES).map_err(unavailable)?;
    let (prefix, chain) = match query {
        RelayQuery::Tx(tx) => (tx_prefix(tx), None),
        RelayQuery::Party { address, chain } => (party_prefix(address), *chain),
    };
    let from = with_cursor(prefix.clone(), after.saturating_add(1));
    let end = with_cursor(prefix, u64::MAX);
    let mut out = Vec::new();
    for row in index
        .range::<&[u8]>(from.as_slice()..end.as_slice())
        .map_err(unavailable)?
    {
        if out.len() >= limit {
            break;
        }
        let (k, v) = row.map_err(unavailable)?;
        if chain.is_some_and(|c| be_u64(v.value()) != Some(c)) {
            continue;
        }
        let Some(cursor) = cursor_of(k.value()) else {
            continue;
        };
        let Some(rec) = messages.get(cursor).map_err(unavailable)? else {
            continue;
        };
        let record = record_of(rec.value())?;
        if record.exp > now {
            out.push(record.entry(cursor));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::clock::SetClock;
    use std::sync::Arc;

    use palisade_policy::keys::KeyPair;

    use super::super::tables::{T_META, T_RELAY_INDEX, T_RELAY_MESSAGES};
    use super::super::writer::journal_path;
    use super::*;
    use crate::journal::{Journal, Redo};
    use crate::{embedded::EmbeddedStore, Relay};

    const PROVIDER: [u8; 20] = [0x19; 20];
    const CONSUMER: [u8; 20] = [0x15; 20];

    fn message(tx: &str, sig: u8, expires_ms: i64) -> RelayMessage {
        RelayMessage {
            tx_id: tx.into(),
            signature: format!("0x{}", hex::encode([sig; 65])),
            parties: [(84532, PROVIDER), (84532, CONSUMER)],
            envelope: format!("{{\"type\":\"t\", \"n\":{sig}}}").into_bytes(),
            received_at_s: 1_800_000_000,
            expires_ms,
        }
    }

    /// The tests' time (the store's clock is set to it).
    const T0: i64 = 1_796_299_200_000;

    fn later() -> i64 {
        T0 + 3_600_000
    }

    const LIMITS: RelayLimits = RelayLimits {
        per_tx: 3,
        total: 5,
    };

    fn open(dir: &tempfile::TempDir) -> EmbeddedStore {
        open_on(dir, &SetClock::at(T0))
    }

    fn open_on(dir: &tempfile::TempDir, clock: &Arc<SetClock>) -> EmbeddedStore {
        EmbeddedStore::open_with(
            &dir.path().join("s.redb"),
            Arc::new(
                palisade_policy::log::Signer::new(
                    "test.example/palisade",
                    Arc::new(KeyPair::from_seed([3; 32])),
                )
                .unwrap(),
            ),
            Default::default(),
            clock.clone(),
        )
        .unwrap()
    }

    async fn cursors(store: &EmbeddedStore, q: RelayQuery, after: u64) -> Vec<u64> {
        let page = store.relay_page(&q, after, 100).await.unwrap();
        page.iter().map(|e| e.cursor).collect()
    }

    #[tokio::test]
    async fn dedup_caps_and_pages() {
        let dir = tempfile::tempdir().unwrap();
        let store = open(&dir);
        for sig in 1..=3 {
            let r = store.relay_post(message("0xa", sig, later()), LIMITS).await;
            assert_eq!(r.unwrap(), RelayPosted::Stored { cursor: sig as u64 });
        }
        // The same signature again, also past the cap: a duplicate, nothing changes.
        let again = store.relay_post(message("0xa", 2, later()), LIMITS).await;
        assert_eq!(again.unwrap(), RelayPosted::Duplicate { cursor: 2 });
        let over = store.relay_post(message("0xa", 4, later()), LIMITS).await;
        assert_eq!(over.unwrap(), RelayPosted::TxFull);
        for sig in 5..=6 {
            store
                .relay_post(message("0xb", sig, later()), LIMITS)
                .await
                .unwrap();
        }
        let full = store.relay_post(message("0xc", 7, later()), LIMITS).await;
        assert_eq!(full.unwrap(), RelayPosted::Full);

        assert_eq!(
            cursors(&store, RelayQuery::Tx("0xa".into()), 0).await,
            [1, 2, 3]
        );
        assert_eq!(cursors(&store, RelayQuery::Tx("0xa".into()), 2).await, [3]);
        assert_eq!(
            cursors(&store, RelayQuery::Tx("0xb".into()), 0).await,
            [4, 5]
        );
        let inbox = |chain| RelayQuery::Party {
            address: CONSUMER,
            chain,
        };
        assert_eq!(cursors(&store, inbox(None), 1).await, [2, 3, 4, 5]);
        assert_eq!(cursors(&store, inbox(Some(84532)), 0).await.len(), 5);
        assert!(cursors(&store, inbox(Some(8453)), 0).await.is_empty());
        let page = store.relay_page(&inbox(None), 0, 2).await.unwrap();
        assert_eq!(page.len(), 2);
        assert_eq!(page[0].envelope, b"{\"type\":\"t\", \"n\":1}");
        assert_eq!(page[0].tx_id, "0xa");
    }

    #[tokio::test]
    async fn expired_messages_go_and_cursors_keep_growing() {
        let dir = tempfile::tempdir().unwrap();
        let clock = SetClock::at(T0);
        {
            let store = open_on(&dir, &clock);
            let soon = T0 + 30;
            store
                .relay_post(message("0xa", 1, soon), LIMITS)
                .await
                .unwrap();
            store
                .relay_post(message("0xa", 2, soon), LIMITS)
                .await
                .unwrap();
            clock.advance(std::time::Duration::from_millis(60));
            // Listed no more even before a sweep; a post's batch sweeps them.
            assert!(cursors(&store, RelayQuery::Tx("0xa".into()), 0)
                .await
                .is_empty());
            let r = store.relay_post(message("0xb", 3, later()), LIMITS).await;
            assert_eq!(r.unwrap(), RelayPosted::Stored { cursor: 3 });
            store.settle().await.unwrap();
            let rtx = store.db.begin_read().unwrap();
            assert_eq!(rtx.open_table(RELAY_MESSAGES).unwrap().len().unwrap(), 1);
            // An expired message posted again is kept anew, under a new cursor.
            let r = store.relay_post(message("0xa", 1, later()), LIMITS).await;
            assert_eq!(r.unwrap(), RelayPosted::Stored { cursor: 4 });
        }
        // After a reopen, too.
        let store = open_on(&dir, &clock);
        let r = store.relay_post(message("0xc", 9, later()), LIMITS).await;
        assert_eq!(r.unwrap(), RelayPosted::Stored { cursor: 5 });
        assert_eq!(cursors(&store, RelayQuery::Tx("0xa".into()), 0).await, [4]);
    }

    #[tokio::test]
    async fn journal_replay_restores_relay_messages() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(&dir));
        // What a crashed writer leaves: a journalled post not yet in the file.
        let m = message("0xa", 1, later());
        let record = serde_json::to_vec(&Record::of(&m)).unwrap();
        let mut redo = Redo::default();
        redo.put(T_RELAY_MESSAGES, &7u64.to_be_bytes(), &record);
        redo.put(T_RELAY_INDEX, &with_cursor(tx_prefix("0xa"), 7), &[]);
        redo.put(T_RELAY_INDEX, &sig_key(&m.signature), &7u64.to_be_bytes());
        redo.put(T_META, NEXT.as_bytes(), &8u64.to_be_bytes());
        let (mut journal, _) = Journal::open(&journal_path(&dir.path().join("s.redb"))).unwrap();
        journal.append(&redo.bytes).unwrap();
        drop(journal);
        let store = open(&dir);
        assert_eq!(cursors(&store, RelayQuery::Tx("0xa".into()), 0).await, [7]);
        let again = store.relay_post(m, LIMITS).await.unwrap();
        assert_eq!(again, RelayPosted::Duplicate { cursor: 7 });
        let next = store.relay_post(message("0xa", 2, later()), LIMITS).await;
        assert_eq!(next.unwrap(), RelayPosted::Stored { cursor: 8 });
    }
}
