//! The per-resource write lock of a store used by one process (SPEC §5.3).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use tokio::sync::OwnedMutexGuard;

/// In-process per-resource write locks (SPEC §5.3). One sidecar owns an embedded store, so an
/// in-process lock is the lock every writer respects; a shared (PostgreSQL) store takes its
/// lock in the database instead.
#[derive(Default)]
pub struct ResourceLocks {
    /// Weak entries: a lock lives as long as someone holds or waits for it; dead entries are
    /// swept when the map grows.
    map: Mutex<HashMap<String, Weak<tokio::sync::Mutex<()>>>>,
}

impl ResourceLocks {
    pub async fn lock(&self, resource: &str) -> OwnedMutexGuard<()> {
        let lock = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(l) = map.get(resource).and_then(Weak::upgrade) {
                l
            } else {
                if map.len() > 4096 {
                    map.retain(|_, w| w.strong_count() > 0);
                }
                let l = Arc::new(tokio::sync::Mutex::new(()));
                map.insert(resource.to_owned(), Arc::downgrade(&l));
                l
            }
        };
        lock.lock_owned().await
    }
}

/// Idempotency keys whose first request is still running in this process, with that request's
/// fingerprint (SPEC §5.6): the reservations of a store one process owns. Holds only what
/// running requests hold.
#[derive(Default)]
pub struct InFlightKeys {
    map: Mutex<HashMap<String, String>>,
}

impl InFlightKeys {
    /// Takes `key` for `fingerprint`; `Err` with the holder's fingerprint when it is taken.
    pub fn take(&self, key: &str, fingerprint: &str) -> Result<(), String> {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(running) = map.get(key) {
            return Err(running.clone());
        }
        map.insert(key.to_owned(), fingerprint.to_owned());
        Ok(())
    }

    pub fn release(&self, key: &str) {
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        map.remove(key);
    }
}
