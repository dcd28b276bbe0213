//! Helpers for the write-enforcement tests: a sidecar with keys and a store in a temp dir,
//! leases signed by a test agent key, the sample SoR behind a sidecar.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease;
use serde_json::{json, Value};

use super::*;

mod sor;
#[allow(unused_imports)] // Not every test binary that includes this module uses the SoR.
pub use sor::*;

pub const BASE: &str = "https://erp.example.com";
pub const SIDECAR_SEED: [u8; 32] = [11; 32];
pub const AGENT_SEED: [u8; 32] = [22; 32];

/// The upstream's answer to the pre-image GET of any `/items/…` path: `{"ok":true}` served
/// as `application/octet-stream`, so its digest is over the raw bytes.
pub fn upstream_state() -> Sha256Digest {
    Sha256Digest::of(br#"{"ok":true}"#)
}

pub fn inverse() -> Vec<u8> {
    br#"{"method":"PUT","path":"/items/1","body":{"qty":1200}}"#.to_vec()
}

/// The inverse of a write to `path` (its query dropped) as the binding rule wants it (SPEC
/// §5.4): a PUT of the same resource, or for a tool's path (`/mcp/tools/<name>`) a call of
/// the same tool. `inverse_for("/items/1")` is [`inverse`].
pub fn inverse_for(path: &str) -> Vec<u8> {
    let path = path.split('?').next().unwrap_or(path);
    // In the canonical spelling the sidecar decides on (`//a` is `/a`), when there is one.
    let canonical = palisade_policy::path::canonical_path(path);
    let path = canonical.as_deref().unwrap_or(path);
    match path.strip_prefix("/mcp/tools/") {
        Some(tool) => json!({"tool": tool, "arguments": {}})
            .to_string()
            .into_bytes(),
        None => format!(r#"{{"method":"PUT","path":"{path}","body":{{"qty":1200}}}}"#).into_bytes(),
    }
}

/// The inverse a lease made by [`lease_for`] names: [`inverse_for`] its target's path.
pub fn inverse_for_lease(lease_b64: &str) -> Vec<u8> {
    let lease: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(lease_b64).unwrap()).unwrap();
    let target = lease["sor_target_uri"].as_str().unwrap_or_default();
    inverse_for(target.strip_prefix(BASE).unwrap_or(target))
}

/// The digest a lease names for `inverse` (`inverse_payload_jcs_hash`).
pub fn inverse_digest(inverse: &[u8]) -> Sha256Digest {
    Sha256Digest::of(&palisade_policy::canon::canonicalize(inverse, 8).unwrap())
}

pub struct Setup {
    pub upstream: Upstream,
    pub p: Palisade,
}

pub fn start_in(upstream: Upstream, dir: tempfile::TempDir, extra: &str) -> Setup {
    start_configured(upstream, dir, "", extra)
}

/// As [`start_in`], with `upstream_extra` added to the `[upstream]` table.
pub fn start_in_with(upstream: Upstream, dir: tempfile::TempDir, upstream_extra: &str) -> Setup {
    start_configured(upstream, dir, upstream_extra, "")
}

pub fn start_configured(
    upstream: Upstream,
    dir: tempfile::TempDir,
    upstream_extra: &str,
    extra: &str,
) -> Setup {
    let text = write_config(&upstream, dir.path(), upstream_extra, extra);
    let p = Palisade::start_in(dir, &text);
    Setup { upstream, p }
}

/// As [`start_configured`], the sidecar in process on a clock the test moves
/// ([`Palisade::advance`]).
pub async fn start_in_process(upstream: Upstream, dir: tempfile::TempDir, extra: &str) -> Setup {
    let text = write_config(&upstream, dir.path(), "", extra);
    let p = Palisade::in_process(dir, &text).await;
    Setup { upstream, p }
}

/// Writes the sidecar and agent keys into `dir` and returns a config for them: `public_base`
/// [`BASE`], the store at `dir/state.redb`, unbound writes allowed unless `extra` has `[rich]`.
pub fn write_config(
    upstream: &Upstream,
    dir: &std::path::Path,
    upstream_extra: &str,
    extra: &str,
) -> String {
    write_config_for(&upstream.url(), dir, upstream_extra, extra)
}

/// As [`write_config`], for an upstream at `url` (one that is not a [`Upstream`]).
pub fn write_config_for(
    url: &str,
    dir: &std::path::Path,
    upstream_extra: &str,
    extra: &str,
) -> String {
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    let agent = KeyPair::from_seed(AGENT_SEED);
    std::fs::write(dir.join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    std::fs::write(
        dir.join("issuers.json"),
        json!([{"kid": agent.kid(), "public_key": agent.public_b64(), "name": "agent-gw"}])
            .to_string(),
    )
    .unwrap();
    let d = dir.display();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_base = \"{BASE}\"\n\
         [upstream]\nurl = \"{}\"\n{}{upstream_extra}\
         [signing]\nkey = \"{d}/signing.pem\"\n[trust]\nissuers = \"{d}/issuers.json\"\n\
         [store]\npath = \"{d}/state.redb\"\n{extra}",
        url,
        if upstream_extra.contains("timeout =") {
            ""
        } else {
            "timeout = \"5s\"\n"
        }
    );
    if text.contains("[rich]") {
        text
    } else {
        text + "[rich]\nunbound_writes = \"allow\"\n"
    }
}

pub async fn start(extra: &str) -> Setup {
    start_in(Upstream::start().await, tempfile::tempdir().unwrap(), extra)
}

/// A lease signed by `key` for `path`, with `edit` applied to its fields before signing.
pub fn lease_for(
    key: &KeyPair,
    path: &str,
    epoch: u64,
    edit: impl FnOnce(&mut serde_json::Map<String, Value>),
) -> String {
    let mut f = json!({
        "ptcl_version": "1.0",
        "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        "sor_target_uri": format!("{BASE}{path}"),
        "recovery_mode": "COMPENSATING_ACTION",
        "t_req_ms": 1000,
        "t_granted_ms": 60000,
        "cas_fence_epoch": epoch,
        "pre_image_state_hash": upstream_state().to_string(),
        "inverse_payload_jcs_hash": inverse_digest(&inverse_for(path)).to_string(),
        "issued_at": lease::format_rfc3339_ms(palisade::clock::WallClock::now_ms()),
    })
    .as_object()
    .unwrap()
    .clone();
    edit(&mut f);
    URL_SAFE_NO_PAD.encode(serde_json::to_vec(&lease::sign(f, key)).unwrap())
}

pub fn put(
    p: &Palisade,
    path: &str,
    lease: Option<&str>,
    inverse: Option<&[u8]>,
) -> Request<BoxBody> {
    let mut b = Request::put(p.url(path)).header("content-type", "application/json");
    if let Some(l) = lease {
        b = b.header("agent-compensation-lease", l);
    }
    if let Some(i) = inverse {
        b = b.header("agent-compensation-inverse", URL_SAFE_NO_PAD.encode(i));
    }
    b.body(full(r#"{"qty":1150}"#)).unwrap()
}

pub fn sidecar_trust() -> TrustStore {
    let mut t = TrustStore::new();
    t.insert(KeyPair::from_seed(SIDECAR_SEED).trusted("sidecar"))
        .unwrap();
    t
}

/// The sidecar's log key under `origin` (the tests' sidecars have no public base, so their
/// origin is `palisade` unless a test sets `receipts.origin`).
pub fn sidecar_log_key(origin: &str) -> palisade_policy::log::LogKey {
    palisade_policy::log::LogKey::of_pair(origin, &KeyPair::from_seed(SIDECAR_SEED)).unwrap()
}

/// The sidecar's key as the tests' stores sign with it.
pub fn sidecar_log(origin: &str) -> std::sync::Arc<palisade_policy::log::Signer> {
    std::sync::Arc::new(
        palisade_policy::log::Signer::new(
            origin,
            std::sync::Arc::new(KeyPair::from_seed(SIDECAR_SEED)),
        )
        .unwrap(),
    )
}

/// Verifies a receipt as a client holds it (`{receipt, index, inclusion, checkpoint}`, from the
/// header or a problem body) with the sidecar's log key; the receipt.
pub fn verified_receipt(envelope: &Value) -> Value {
    let env: palisade_policy::log::Envelope = serde_json::from_value(envelope.clone())
        .unwrap_or_else(|e| panic!("not a receipt envelope ({e}): {envelope}"));
    let origin = env.checkpoint.split('\n').next().unwrap_or_default();
    env.verify(&sidecar_log_key(origin))
        .unwrap_or_else(|e| panic!("receipt does not verify ({e}): {envelope}"));
    env.receipt
}

/// Verifies a receipt envelope with the sidecar's log key and checks its kind.
pub fn assert_receipt_verifies(envelope: &Value, kind: &str) {
    let receipt = verified_receipt(envelope);
    assert_eq!(receipt["kind"], kind, "{receipt}");
}

pub fn writes_seen(u: &Upstream) -> usize {
    u.requests().iter().filter(|s| s.method != "GET").count()
}

pub async fn post_json(
    p: &Palisade,
    path: &str,
    auth: Option<&str>,
    body: &Value,
) -> (http::response::Parts, Value) {
    let mut b = Request::post(p.url(path)).header("content-type", "application/json");
    if let Some(a) = auth {
        b = b.header("authorization", a);
    }
    let (parts, bytes) = send(
        &http1_client(),
        b.body(full(serde_json::to_vec(body).unwrap())).unwrap(),
    )
    .await;
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts, v)
}

/// Copies the sidecar's keys and store (the database and, after a crash, its journal) from
/// `from` to `to`, for a restart on the same state.
pub fn copy_state(from: &std::path::Path, to: &std::path::Path) {
    for f in [
        "signing.pem",
        "issuers.json",
        "state.redb",
        "state.redb.journal",
    ] {
        // The journal exists only until a checkpoint folds it into the database.
        if from.join(f).exists() {
            std::fs::copy(from.join(f), to.join(f)).unwrap();
        }
    }
}

/// The drift events the sidecar kept, oldest first, from `GET /admin/v1/drift-events`. The
/// admin API has an event before the refusal's response leaves; the stdout sink, written by a
/// task of its own, may not (see `logged_drift_events`).
pub fn drift_events(p: &Palisade) -> Vec<Value> {
    use std::io::{Read as _, Write as _};
    let mut events = Vec::new();
    let mut after = 0u64;
    loop {
        let mut s = std::net::TcpStream::connect(p.admin).unwrap();
        write!(
            s,
            "GET /admin/v1/drift-events?limit=1000&after={after} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n"
        )
        .unwrap();
        let mut answer = Vec::new();
        s.read_to_end(&mut answer).unwrap();
        let text = String::from_utf8_lossy(&answer);
        let (_, body) = text.split_once("\r\n\r\n").unwrap();
        let doc: Value = serde_json::from_str(body).unwrap();
        let page = doc["events"].as_array().unwrap();
        if page.is_empty() {
            return events;
        }
        events.extend(page.iter().cloned());
        after = doc["next"].as_u64().unwrap();
    }
}

/// The drift events the stdout sink has written so far.
pub fn logged_drift_events(p: &Palisade) -> Vec<Value> {
    p.logs()
        .lines()
        .filter(|l| l.contains("\"eventId\""))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The envelope in a response's `Agent-Commit-Receipt` header.
pub fn envelope_of(headers: &http::HeaderMap) -> Value {
    serde_json::from_slice(
        &URL_SAFE_NO_PAD
            .decode(headers["agent-commit-receipt"].as_bytes())
            .unwrap(),
    )
    .unwrap()
}

/// The receipt in a response's `Agent-Commit-Receipt` header, verified with the log key.
pub fn receipt_of(headers: &http::HeaderMap) -> Value {
    verified_receipt(&envelope_of(headers))
}
