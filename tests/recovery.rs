//! Idempotency keys (SPEC §5.6), HUMAN_ESCROW (SPEC §5.4), a failing store (SPEC §10), a
//! crash under load, and that no secret leaks into receipts, events, logs or metrics — all
//! through the real binary against a real upstream.
// Test helpers are outside the 6-parameter limit of clippy.toml (issue 55), which is the product's.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::too_many_arguments)]

#[path = "it/support/mod.rs"]
mod support;

use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade::store::Fences;
use palisade::store::Leases;
use palisade::store::Receipts;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

#[path = "recovery/escrow.rs"]
mod escrow;
#[path = "recovery/failures.rs"]
mod failures;
#[path = "recovery/keys.rs"]
mod keys;
#[path = "recovery/sinks.rs"]
mod sinks;

/// A PUT of `body` to `path` with a lease, an inline inverse and optional extra headers.
fn keyed_put(
    p: &Palisade,
    path: &str,
    lease: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> Request<BoxBody> {
    let mut b = Request::put(p.url(path))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(full(body.to_owned())).unwrap()
}

fn puts_to(u: &Upstream, path: &str) -> usize {
    u.requests()
        .iter()
        .filter(|s| s.method == "PUT" && s.path_and_query == path)
        .count()
}

/// Waits up to 20 s for `done` to hold.
async fn eventually(done: impl FnMut() -> bool, what: &str) {
    wait::until(what, Duration::from_secs(20), done).await;
}
