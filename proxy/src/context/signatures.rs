//! Leases' signatures checked together across concurrent requests (issue 36).
//!
//! A write whose lease is well-formed and names a trusted key (checks 2–3) queues its
//! signature here. The first to queue leads: it yields once, so the requests that are ready on
//! this runtime reach their check 4 and queue too, then verifies everything queued in one batch
//! ([`lease::check_signatures`]: the verdicts of `verify_strict`, docs/decisions.md) and hands
//! each waiter its verdict. A lone write pays one yield; under load a batch costs about half a
//! verification a signature. Requests that queue while a batch is being verified form the next
//! one, on whichever thread they run, so both cores verify at once.

use std::sync::Mutex;

use palisade_policy::codes::{ErrorCode, Refusal};
use palisade_policy::lease::{self, Signed, Unsigned};
use tokio::sync::oneshot;

/// Most signatures one batch verifies; a longer queue is verified in batches of this size.
/// Past ~64 a batch saves little more per signature (docs/performance.md).
const MAX_BATCH: usize = 64;

type Verdict = Result<Signed, Refusal>;

#[derive(Default)]
pub struct SignatureQueue {
    state: Mutex<State>,
    /// Batches verified, for tests.
    #[cfg(test)]
    batches: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct State {
    waiting: Vec<(Unsigned, oneshot::Sender<Verdict>)>,
    /// A leader is between queueing and taking the batch.
    led: bool,
}

impl SignatureQueue {
    /// Check 4 for one lease, batched with whatever else is waiting.
    pub async fn check(&self, lease: Unsigned) -> Verdict {
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut state = self.lock();
            state.waiting.push((lease, tx));
            !std::mem::replace(&mut state.led, true)
        };
        if lead {
            // Runs the batch when dropped: after the yield, or if this request is cancelled
            // during it, so nobody queued behind a leader is left waiting.
            let _leading = Leading(self);
            tokio::task::yield_now().await;
        }
        rx.await.unwrap_or_else(|_| {
            Err(Refusal::new(
                ErrorCode::LeaseSignature,
                "the lease's signature check did not complete",
            ))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock cannot leave `State` half-changed (push and take
        // are single steps), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes everything queued and verifies it; later arrivals elect a new leader.
    fn run(&self) {
        let mut waiting = {
            let mut state = self.lock();
            state.led = false;
            std::mem::take(&mut state.waiting)
        };
        while !waiting.is_empty() {
            let rest = waiting.split_off(waiting.len().min(MAX_BATCH));
            let (leases, senders): (Vec<_>, Vec<_>) =
                std::mem::replace(&mut waiting, rest).into_iter().unzip();
            metrics::histogram!(crate::telemetry::LEASE_BATCH_SIZE).record(leases.len() as f64);
            #[cfg(test)]
            self.batches
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            for (verdict, tx) in lease::check_signatures(leases).into_iter().zip(senders) {
                // A waiter that went away (its client hung up) needs no verdict.
                let _ = tx.send(verdict);
            }
        }
    }
}

struct Leading<'a>(&'a SignatureQueue);

impl Drop for Leading<'_> {
    fn drop(&mut self) {
        self.0.run();
    }
}

#[cfg(test)]
mod tests;
