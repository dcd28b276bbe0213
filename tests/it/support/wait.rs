//! Waiting in tests on what happens, not on a guess of how long it takes (issue 55): a
//! condition polled until it holds, failing with what was awaited once a deadline passes.
//! The only sleeps here are the poll's own; a test that sleeps elsewhere is letting time
//! pass on purpose (a lease window, a rate window), and says so where it does.

use std::future::Future;
use std::time::Duration;

/// How often a condition is looked at: short enough that a test waits about as long as the
/// sidecar takes, long enough that polling costs nothing measurable.
const POLL: Duration = Duration::from_millis(20);

/// Polls `done` until it holds; panics naming `what` after `within`.
pub async fn until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    until_async_or(what, within, || std::future::ready(done()), String::new).await
}

/// As [`until`], for a condition that has to await (a connect, a request).
pub async fn until_async<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    done: impl FnMut() -> F,
) {
    until_async_or(what, within, done, String::new).await
}

/// As [`until_async`], the panic also carrying `explain()` (a container's logs, the last
/// answer): what a reader of a failed run needs to see why.
pub async fn until_async_or<F: Future<Output = bool>>(
    what: &str,
    within: Duration,
    mut done: impl FnMut() -> F,
    explain: impl FnOnce() -> String,
) {
    let deadline = tokio::time::Instant::now() + within;
    while !done().await {
        if tokio::time::Instant::now() >= deadline {
            panic!(
                "timed out after {within:?} waiting until {what}\n{}",
                explain()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// As [`until`], on a thread with no runtime.
pub fn until_blocking(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + within;
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {within:?} waiting until {what}"
        );
        std::thread::sleep(POLL);
    }
}
