//! The per-resource write lock as a session advisory lock (see the module doc of `postgres`).

use deadpool_postgres::{Object, Pool};

use crate::store::{LockProof, ResourceGuard, StoreError};

use super::tx::unavailable;

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
                    if client
                        .execute("SELECT pg_advisory_unlock($1)", &[&key])
                        .await
                        .is_err()
                    {
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
    let client = locks.get().await.map_err(unavailable)?;
    // One round trip: the 64-bit hash of the key (a collision only makes two resources share
    // a lock), locked, and returned for the unlock.
    let st = client
        .prepare_cached(
            "SELECT k, pg_backend_pid() FROM (SELECT hashtextextended($1, 0) AS k) h,
             LATERAL pg_advisory_lock(h.k)",
        )
        .await
        .map_err(unavailable)?;
    let row = client
        .query_one(&st, &[&resource])
        .await
        .map_err(unavailable)?;
    let key: i64 = row.get(0);
    let session: i32 = row.get(1);
    Ok(ResourceGuard::held_by(
        Held {
            client: Some(client),
            key,
        },
        LockProof { session, key },
    ))
}
