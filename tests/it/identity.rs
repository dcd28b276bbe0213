//! Deployment identity (SPEC §7, RICH §11.2 duty 2): with an HTTPS upstream, the peer's SPIFFE
//! URI SAN must be the binding's `deployment.identity`. Real TLS upstreams with rcgen
//! certificates from a test CA; the real binary in between.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::bundles::*;
use support::writes::*;
use support::*;

const ERP: &str = "spiffe://cluster.local/ns/erp/sa/erp";
const IMPOSTER: &str = "spiffe://cluster.local/ns/erp/sa/imposter";

/// Items read and written, both pinned to the ERP deployment's SPIFFE ID.
fn pinned_bundle(dir: &std::path::Path) -> BundleFiles {
    write_bundle(
        dir,
        "urn:palisade:test:identity/1",
        &[
            (
                "items.get",
                "GET /items/{id}",
                contract(json!("unknown"), "read", "reversible", "none"),
                None,
            ),
            (
                "items.put",
                "PUT /items/{id}",
                contract(qty_schema(), "write", "compensable", "optional"),
                None,
            ),
        ],
    )
    .with_deployment(ERP)
}

/// A sidecar in front of `upstream` (HTTPS, trusting the test CA) under the pinned bundle.
fn sidecar(pki: &Pki, upstream: Upstream, bundle: &BundleFiles, extra: &str) -> Setup {
    let tls = format!("tls = {{ ca = \"{}\" }}\n", pki.path("ca.pem").display());
    start_configured(
        upstream,
        tempfile::tempdir().unwrap(),
        &tls,
        &(bundle.rich_toml("") + extra),
    )
}

fn put(p: &Palisade, path: &str, lease: &str) -> Request<BoxBody> {
    Request::put(p.url(path))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        )
        .body(full(r#"{"qty":3}"#))
        .unwrap()
}

fn get(p: &Palisade, path: &str) -> Request<BoxBody> {
    Request::get(p.url(path)).body(full("")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pinned_identity_passes_reads_and_writes() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_bundle(bundle_dir.path());
    let upstream = Upstream::start_tls(&pki.issue_spiffe(Some(ERP))).await;
    let s = sidecar(&pki, upstream, &b, "");
    let client = http1_client();

    let (parts, body) = send(&client, get(&s.p, "/items/1")).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );

    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, "/items/1", 1, |_| {});
    let (parts, body) = send(&client, put(&s.p, "/items/1", &lease)).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let receipt = receipt_of(&parts.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(receipt["lockfile_digest"], json!(b.digest));
    // Pre-image GET, the read, the write: all over the verified connections.
    let seen = s.upstream.requests();
    assert_eq!(seen.iter().filter(|r| r.method == "PUT").count(), 1);
    assert!(drift_events(&s.p).is_empty(), "{:?}", drift_events(&s.p));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_identity_is_refused_before_anything_is_sent() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_bundle(bundle_dir.path());
    let imposter_cert = pki.issue_spiffe(Some(IMPOSTER));
    let imposter_der = rustls_pemfile::certs(&mut imposter_cert.cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap();
    let upstream = Upstream::start_tls(&imposter_cert).await;
    let s = sidecar(&pki, upstream, &b, "");
    let client = http1_client();
    let agent = KeyPair::from_seed(AGENT_SEED);

    // A read: 502, a rejection receipt, an identity drift event.
    let (parts, body) = send(&client, get(&s.p, "/items/1")).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_DEPLOYMENT_IDENTITY");
    assert_receipt_verifies(&problem["receipt"], "rejection");
    assert_eq!(
        problem["receipt"]["receipt"]["code"],
        "ERR_DEPLOYMENT_IDENTITY"
    );
    assert_eq!(envelope_of(&parts.headers), problem["receipt"]);

    // A write: refused at check 12, whose GET goes to the same peer, so before its epoch moves.
    let lease = lease_for(&agent, "/items/1", 1, |_| {});
    let (parts, body) = send(&client, put(&s.p, "/items/1", &lease)).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_DEPLOYMENT_IDENTITY");
    assert_receipt_verifies(&problem["receipt"], "rejection");
    let (status, fence) = admin_get(s.p.admin, "/admin/v1/fences/%2Fitems%2F1").await;
    assert_eq!(status, StatusCode::OK, "{fence}");
    let fence: Value = serde_json::from_str(&fence).unwrap();
    assert_eq!(fence["epoch"], 0, "the epoch must not move: {fence}");
    assert_eq!(fence["resource"], format!("{BASE}/items/1"));

    // Nothing reached the imposter: its handshakes failed before any HTTP.
    assert!(
        s.upstream.requests().is_empty(),
        "{:?}",
        s.upstream.requests()
    );

    let events = drift_events(&s.p);
    let identity: Vec<&Value> = events
        .iter()
        .filter(|e| e["code"] == "ERR_DEPLOYMENT_IDENTITY")
        .collect();
    assert_eq!(identity.len(), 2, "{events:?}");
    let read_event = identity[0];
    assert_eq!(read_event["category"], "identity");
    assert_eq!(read_event["actionTaken"], "blocked");
    assert_eq!(read_event["observedIdentifier"], IMPOSTER);
    assert_eq!(read_event["diagnostics"]["expectedIdentity"], ERP);
    assert_eq!(read_event["bindingId"], "urn:palisade:test:identity/1");
    assert_eq!(
        read_event["evidenceDigest"],
        format!("sha-256:{}", sha256_hex(&imposter_der))
    );
    // The write's, found by check 12's GET, names the peer as the read's does.
    let write_event = identity[1];
    assert_eq!(write_event["category"], "identity");
    assert_eq!(write_event["observedIdentifier"], IMPOSTER);
    assert_eq!(write_event["diagnostics"]["expectedIdentity"], ERP);
    assert_eq!(write_event["diagnostics"]["operation"], "PUT /items/1");
    assert_eq!(
        write_event["evidenceDigest"],
        format!("sha-256:{}", sha256_hex(&imposter_der))
    );
    let metrics = admin_get(s.p.admin, "/metrics").await.1;
    assert!(
        metrics.contains("palisade_refusals_total{code=\"ERR_DEPLOYMENT_IDENTITY\"} 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_pre_image_fetch_the_write_is_still_never_sent() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_bundle(bundle_dir.path());
    let upstream = Upstream::start_tls(&pki.issue_spiffe(Some(IMPOSTER))).await;
    let s = sidecar(&pki, upstream, &b, "[ptcl]\npre_image = \"off\"\n");
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, "/items/7", 1, |_| {});
    let (parts, body) = send(&http1_client(), put(&s.p, "/items/7", &lease)).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_DEPLOYMENT_IDENTITY");
    // The permit was given (epoch 1 is durable); the commit receipt says nothing was sent.
    let receipt = receipt_of(&parts.headers);
    assert_eq!(receipt["kind"], "commit", "verified by receipt_of");
    assert_eq!(receipt["outcome"], "not-sent");
    assert_eq!(receipt["upstream_status"], 502);
    assert!(s.upstream.requests().is_empty());
    let events = drift_events(&s.p);
    assert!(
        events
            .iter()
            .any(|e| e["code"] == "ERR_DEPLOYMENT_IDENTITY" && e["observedIdentifier"] == IMPOSTER),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_tls_identity_pins_unbound_requests_and_a_certificate_without_one_fails() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    // No SPIFFE ID at all: only a DNS name (an ordinary web certificate).
    let upstream = Upstream::start_tls(&pki.issue_spiffe(None)).await;
    let tls = format!(
        "tls = {{ ca = \"{}\", identity = \"{ERP}\" }}\n",
        pki.path("ca.pem").display()
    );
    let s = start_configured(upstream, tempfile::tempdir().unwrap(), &tls, "");
    let (parts, body) = send(&http1_client(), get(&s.p, "/anything")).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_DEPLOYMENT_IDENTITY");
    let events = drift_events(&s.p);
    assert!(
        events
            .iter()
            .any(|e| e["category"] == "identity" && e["observedIdentifier"] == "none"),
        "{events:?}"
    );
    assert!(s.upstream.requests().is_empty());

    // The same upstream without a pinned identity is an ordinary HTTPS upstream.
    let pki_dir2 = tempfile::tempdir().unwrap();
    let pki2 = Pki::new(pki_dir2.path());
    let plain = Upstream::start_tls(&pki2.issue_spiffe(None)).await;
    let tls = format!("tls = {{ ca = \"{}\" }}\n", pki2.path("ca.pem").display());
    let s2 = start_configured(plain, tempfile::tempdir().unwrap(), &tls, "");
    let (parts, _) = send(&http1_client(), get(&s2.p, "/anything")).await;
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(s2.upstream.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_fails_even_with_the_right_identity() {
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let other_dir = tempfile::tempdir().unwrap();
    let other = Pki::new(other_dir.path());
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_bundle(bundle_dir.path());
    // The right SPIFFE ID, signed by a CA the sidecar does not trust.
    let upstream = Upstream::start_tls(&other.issue_spiffe(Some(ERP))).await;
    let s = sidecar(&pki, upstream, &b, "");
    let (parts, body) = send(&http1_client(), get(&s.p, "/items/1")).await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_UPSTREAM_UNAVAILABLE");
    assert!(s.upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_warns_that_identities_over_plain_http_are_not_checked() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let b = pinned_bundle(bundle_dir.path());
    let dir = tempfile::tempdir().unwrap();
    let upstream = Upstream::start().await;
    let text = write_config(&upstream, dir.path(), "", &b.rich_toml(""));
    let path = dir.path().join("palisade.toml");
    std::fs::write(&path, text).unwrap();
    let out = std::process::Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning: deployment.identity of 2 capabilities is not checked"),
        "{stderr}"
    );
}
