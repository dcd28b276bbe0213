//! RICH bindings on the write path (SPEC §5.2 checks 8–9, §5.6, §7) through the real binary and
//! a real upstream: each contract refusal with its code, signed receipt (carrying the lockfile
//! digest) and drift event, and that the upstream saw nothing; bundles that must not load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::writes::*;
use support::*;

mod outputs;
mod refusals;
mod swaps;

fn write(
    p: &Palisade,
    method: &str,
    path: &str,
    lease: Option<&str>,
    body: &str,
    headers: &[(&str, &str)],
) -> Request<BoxBody> {
    let mut b = Request::builder()
        .method(method)
        .uri(p.url(path))
        .header("content-type", "application/json")
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    if let Some(l) = lease {
        b = b.header("agent-compensation-lease", l);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(full(body.to_owned())).unwrap()
}

fn writes_to(u: &Upstream, path: &str) -> usize {
    u.requests()
        .iter()
        .filter(|s| s.method != "GET" && s.path_and_query == path)
        .count()
}

/// The bundle of the contract tests: items (compensable, qty ≥ 0), an irreversible payment,
/// orders that need an idempotency key, a search that only reads.
fn test_bundle(dir: &std::path::Path) -> BundleFiles {
    write_bundle(
        dir,
        "urn:palisade:test:erp/1",
        &[
            (
                "items",
                "PUT /items/{id}",
                contract(qty_schema(), "write", "compensable", "optional"),
                None,
            ),
            (
                "pay",
                "POST /invoices/{id}/pay",
                contract(json!("unknown"), "write", "irreversible", "optional"),
                None,
            ),
            (
                "orders",
                "POST /orders",
                contract(json!("unknown"), "write", "compensable", "required"),
                None,
            ),
            (
                "search",
                "POST /search",
                contract(qty_schema(), "read", "reversible", "none"),
                None,
            ),
        ],
    )
}
