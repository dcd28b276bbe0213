//! Time as Palisade reads it.
//!
//! Lease expiry is judged "by the monotonic clock, anchored at the wall clock once" (SPEC §5.2
//! check 6): a wall-clock step (NTP, an operator) must not revive or kill leases. The anchor is
//! taken when the clock is made; after that only the monotonic clock advances it. Uses
//! `tokio::time::Instant`, so tests with paused time control it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Reads the wall clock directly (CLI tools that run once).
pub struct WallClock;

impl WallClock {
    pub fn now_ms() -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// Unix milliseconds that advance monotonically from one wall-clock reading.
#[derive(Debug, Clone, Copy)]
pub struct AnchoredClock {
    wall_at_anchor_ms: i64,
    anchor: Instant,
}

impl AnchoredClock {
    pub fn new() -> Self {
        Self {
            wall_at_anchor_ms: WallClock::now_ms(),
            anchor: Instant::now(),
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.wall_at_anchor_ms + self.anchor.elapsed().as_millis() as i64
    }
}

impl Default for AnchoredClock {
    fn default() -> Self {
        Self::new()
    }
}

/// Unix milliseconds, from whatever clock a component was given. The state store reads time
/// only through one, so tests can move a store's clock (expiry, retention) without sleeping,
/// and the store and the checks it serves agree on what "now" is.
pub trait Clock: Send + Sync {
    fn now_ms(&self) -> i64;
}

/// A clock shared between the components that must agree on it.
pub type SharedClock = Arc<dyn Clock>;

impl Clock for AnchoredClock {
    fn now_ms(&self) -> i64 {
        AnchoredClock::now_ms(self)
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug)]
pub struct SetClock(AtomicI64);

impl SetClock {
    pub fn at(now_ms: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(now_ms)))
    }

    pub fn advance(&self, by: std::time::Duration) {
        self.0.fetch_add(by.as_millis() as i64, Ordering::SeqCst);
    }
}

impl Clock for SetClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
