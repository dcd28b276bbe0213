//! Time as Palisade reads it.
//!
//! Lease expiry is judged "by the monotonic clock, anchored at the wall clock once" (SPEC §5.2
//! check 6): a wall-clock step (NTP, an operator) must not revive or kill leases. The anchor is
//! taken when the clock is made; after that only the monotonic clock advances it. Uses
//! `tokio::time::Instant`, so tests with paused time control it.

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
