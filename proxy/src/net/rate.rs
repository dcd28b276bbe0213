//! Per-client-address rate limits (seed 001 §8.2, T4), with bounded memory.
//!
//! A sliding-window counter (the estimate Cloudflare and nginx-style limiters use): minutes
//! are aligned windows, and an address's rate is `previous × (1 − elapsed) + current`, so "60
//! per minute" refuses the 61st request of any minute-long stretch within a request or so,
//! and a burst at a window's end does not double across the boundary as a fixed window lets
//! it. Memory: two counters per address seen in the last two minutes (older windows are
//! dropped whole when a minute turns), at most [`MAX_ADDRESSES`] per window: past that, a
//! new address is refused until the minute turns (a flood from many addresses is refused,
//! not remembered).

use std::collections::{HashMap, HashSet};
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Duration;

/// Most addresses counted in one window.
pub const MAX_ADDRESSES: usize = 100_000;
const WINDOW_MS: i64 = 60_000;

/// Per client address (the quote channel, the relay).
pub type ClientRate = Rate<IpAddr>;

/// A per-key limit: keys are client addresses, or agents (RCNS PROPOSE).
pub struct Rate<K> {
    per_minute: u32,
    inner: Mutex<Windows<K>>,
}

struct Windows<K> {
    minute: i64,
    current: HashMap<K, u32>,
    previous: HashMap<K, u32>,
    /// Keys whose refusal this minute was receipted: one each, the rest are counted
    /// only, so a flood is not turned into a flood of durable writes.
    receipted: HashSet<K>,
}

impl<K> Default for Windows<K> {
    fn default() -> Self {
        Self {
            minute: 0,
            current: HashMap::new(),
            previous: HashMap::new(),
            receipted: HashSet::new(),
        }
    }
}

/// The answer for one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    Yes,
    /// Refused: when to retry, and whether this refusal is the one to receipt.
    No {
        retry_after: Duration,
        receipt: bool,
    },
}

impl<K: Hash + Eq + Clone> Rate<K> {
    pub fn per_minute(n: u32) -> Self {
        Self {
            per_minute: n.max(1),
            inner: Mutex::default(),
        }
    }

    /// Counts a request from `addr` at `now_ms` (unix ms) unless it is over the limit.
    pub fn check(&self, addr: K, now_ms: i64) -> Admit {
        let mut w = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let minute = now_ms.div_euclid(WINDOW_MS);
        if minute != w.minute {
            let current = std::mem::take(&mut w.current);
            w.previous = if minute == w.minute + 1 {
                current
            } else {
                HashMap::new()
            };
            w.receipted.clear();
            w.minute = minute;
        }
        let into = now_ms.rem_euclid(WINDOW_MS);
        let previous = f64::from(w.previous.get(&addr).copied().unwrap_or(0));
        let current = w.current.get(&addr).copied().unwrap_or(0);
        let weight = 1.0 - into as f64 / WINDOW_MS as f64;
        let limit = f64::from(self.per_minute);
        let full = w.current.len() >= MAX_ADDRESSES && !w.current.contains_key(&addr);
        if full || previous * weight + f64::from(current) + 1.0 > limit {
            // When the estimate falls enough for one more: the previous window's share decays
            // linearly; if this window alone is full, at its end.
            let rest_ms = WINDOW_MS - into;
            let wait_ms = if full || f64::from(current) + 1.0 > limit || previous == 0.0 {
                rest_ms
            } else {
                let need = (limit - f64::from(current) - 1.0) / previous; // weight wanted
                (((weight - need) * WINDOW_MS as f64).ceil() as i64).clamp(1, rest_ms)
            };
            let receipt = w.receipted.insert(addr.clone());
            return Admit::No {
                retry_after: Duration::from_millis(u64::try_from(wait_ms).unwrap_or(1)),
                receipt,
            };
        }
        *w.current.entry(addr).or_insert(0) += 1;
        Admit::Yes
    }

    /// Addresses counted in the current window (for tests and metrics).
    pub fn tracked(&self) -> usize {
        self.inner.lock().map(|w| w.current.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_n_plus_first_in_a_minute_is_refused_with_a_retry_time() {
        let rate = ClientRate::per_minute(3);
        let a: IpAddr = [192, 0, 2, 1].into();
        let b: IpAddr = [192, 0, 2, 2].into();
        let t0 = 1_800_000_000_000 - 1_800_000_000_000 % WINDOW_MS + 10_000;
        for i in 0..3 {
            assert_eq!(rate.check(a, t0 + i * 1000), Admit::Yes);
        }
        let Admit::No {
            retry_after,
            receipt,
        } = rate.check(a, t0 + 5_000)
        else {
            panic!("the fourth request in a minute passed");
        };
        assert!(receipt, "the first refusal is receipted");
        assert_eq!(
            retry_after,
            Duration::from_millis(45_000),
            "the window's end"
        );
        assert!(matches!(
            rate.check(a, t0 + 6_000),
            Admit::No { receipt: false, .. }
        ));
        // Another address has its own quota.
        assert_eq!(rate.check(b, t0 + 6_000), Admit::Yes);
        assert_eq!(rate.tracked(), 2);
        // Just after the minute turns, the last minute still counts almost whole…
        assert!(matches!(rate.check(a, t0 + 51_000), Admit::No { .. }));
        // …and a minute later it is forgotten.
        assert_eq!(rate.check(a, t0 + 110_000), Admit::Yes);
        assert_eq!(rate.tracked(), 1, "older windows are dropped whole");
    }
}
