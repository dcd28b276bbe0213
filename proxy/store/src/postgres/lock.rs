//! The per-resource write lock as a session advisory lock (see the module doc of `postgres`).

use deadpool_postgres::{Object, Pool};

use crate::{ResourceGuard, StoreError};

use super::tx::{unavailable, unavailable_msg};

/// A lock connection with `resource`'s advisory lock held; unlocked before it goes back.
pub(super) struct Held {
    client: Option<Object>,
    key: i64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let (Some(client), key) = (self.client.take(), self.key) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    let unlocked =
                        match client.prepare_cached("SELECT pg_advisory_unlock($1)").await {
                            Ok(st) => client.execute(&st, &[&key]).await.is_ok(),
                            Err(_) => false,
                        };
                    if !unlocked {
                        // The session may still hold the lock: never reuse it.
                        let _ = Object::take(client);
                    }
                });
            }
            // No runtime to unlock with: drop the session, which releases the lock.
            Err(_) => drop(Object::take(client)),
        }
    }
}

/// Takes `resource`'s advisory lock on a connection from `locks`.
pub(super) async fn lock(locks: &Pool, resource: &str) -> Result<ResourceGuard, StoreError> {
    Ok(lock_and_epoch(locks, resource).await?.0)
}

/// The lock and the resource's epoch in one round trip: the 64-bit hash of the key (a
/// collision only makes two resources share a lock), locked, then the epoch read. The read
/// comes after the lock is granted but sees the statement's snapshot, taken before the wait:
/// it may miss an epoch committed meanwhile, which the fence advance (the authority) then
/// refuses; it can never show one that was not committed.
pub(super) async fn lock_and_epoch(
    locks: &Pool,
    resource: &str,
) -> Result<(ResourceGuard, u64), StoreError> {
    let client = locks.get().await.map_err(unavailable)?;
    let st = client
        .prepare_cached(
            "SELECT h.k, (SELECT epoch FROM fences WHERE resource = $1)
             FROM (SELECT hashtextextended($1, 0) AS k) h, LATERAL pg_advisory_lock(h.k)",
        )
        .await
        .map_err(unavailable)?;
    let row = client
        .query_one(&st, &[&resource])
        .await
        .map_err(unavailable)?;
    let key: i64 = row.get(0);
    let epoch = row.get::<_, Option<i64>>(1).map_or(0, |e| e as u64);
    let guard = ResourceGuard::new(Held {
        client: Some(client),
        key,
    });
    Ok((guard, epoch))
}

/// The session that took the lock answers, so it still holds it (a session keeps its
/// advisory locks until it unlocks or ends). One round trip on the lock's own connection.
pub(super) async fn confirm(guard: &ResourceGuard) -> Result<(), StoreError> {
    let lost = || {
        unavailable_msg("the resource's write lock was lost (its session ended): nothing forwarded")
    };
    let client = guard
        .held::<Held>()
        .and_then(|h| h.client.as_ref())
        .ok_or_else(lost)?;
    if client.is_closed() {
        return Err(lost());
    }
    client.simple_query("").await.map_err(|_| lost())?;
    Ok(())
}
