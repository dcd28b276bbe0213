//! The sample inventory SoR behind a sidecar: its records read, leased, written and
//! compensated as an agent would.

use super::*;

/// The sample inventory SoR (a real HTTP app with state in a file) behind a sidecar.
pub async fn start_with_sor() -> (Palisade, std::net::SocketAddr, tempfile::TempDir) {
    let (addr, dir, sor_dir) = sor_and_keys().await;
    (sidecar_for_sor(addr, dir), addr, sor_dir)
}

/// As [`start_with_sor`], the sidecar in process on a clock the test moves
/// ([`Palisade::advance`]).
pub async fn start_with_sor_in_process() -> (Palisade, std::net::SocketAddr, tempfile::TempDir) {
    let (addr, dir, sor_dir) = sor_and_keys().await;
    let text = sor_config(addr, dir.path());
    (Palisade::in_process(dir, &text).await, addr, sor_dir)
}

/// The sample SoR (`palisade sample-sor`) serving on a port of its own: its address, the app
/// (to read its state), and the directory its file is in.
pub async fn sample_sor() -> (
    std::net::SocketAddr,
    std::sync::Arc<palisade::cli::sample_sor::SampleSor>,
    tempfile::TempDir,
) {
    let sor_dir = tempfile::tempdir().unwrap();
    let sor =
        palisade::cli::sample_sor::SampleSor::open(&sor_dir.path().join("inventory.json")).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sor.clone().serve(listener));
    (addr, sor, sor_dir)
}

/// The sidecar's signing key (`signing.pem`) and the test agent as its one trusted issuer
/// (`issuers.json`), written into `dir`.
pub fn write_keys(dir: &Path) {
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    let agent = KeyPair::from_seed(AGENT_SEED);
    std::fs::write(dir.join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    std::fs::write(
        dir.join("issuers.json"),
        json!([{"kid": agent.kid(), "public_key": agent.public_b64()}]).to_string(),
    )
    .unwrap();
}

/// The sample SoR serving on a port of its own; a directory with the sidecar's and the
/// agent's keys; the SoR's directory.
async fn sor_and_keys() -> (std::net::SocketAddr, tempfile::TempDir, tempfile::TempDir) {
    let (addr, _, sor_dir) = sample_sor().await;
    let dir = tempfile::tempdir().unwrap();
    write_keys(dir.path());
    (addr, dir, sor_dir)
}

/// A sidecar in front of the SoR at `addr`, with the keys (and store, if any) in `dir`.
pub fn sidecar_for_sor(addr: std::net::SocketAddr, dir: tempfile::TempDir) -> Palisade {
    let text = sor_config(addr, dir.path());
    Palisade::start_in(dir, &text)
}

fn sor_config(addr: std::net::SocketAddr, dir: &Path) -> String {
    let d = dir.display();
    format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_base = \"{BASE}\"\n[upstream]\nurl = \"http://{addr}\"\n\
         [signing]\nkey = \"{d}/signing.pem\"\n[trust]\nissuers = \"{d}/issuers.json\"\n\
         [store]\npath = \"{d}/state.redb\"\n[rich]\nunbound_writes = \"allow\"\n"
    )
}

/// Kills the sidecar with SIGKILL and copies its keys and store into a new directory, for a
/// restart on the same state (the old directory goes with the old process).
pub fn kill_and_keep_state(mut p: Palisade) -> tempfile::TempDir {
    p.child().kill().unwrap();
    p.child().wait().unwrap();
    let dir = tempfile::tempdir().unwrap();
    copy_state(p.dir.path(), dir.path());
    dir
}

pub async fn sor_get(addr: std::net::SocketAddr, id: &str) -> (StatusCode, Value) {
    let req = Request::get(format!("http://{addr}/api/v2/items/{id}"))
        .body(full(""))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    (
        parts.status,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
    )
}

/// A lease for `/api/v2/items/{id}` whose pre-image is the SoR's current record.
pub async fn sor_lease(
    addr: std::net::SocketAddr,
    id: &str,
    epoch: u64,
    mode: &str,
    inverse: &[u8],
    issued_ago_ms: i64,
    t_granted: u64,
) -> String {
    let (status, current) = sor_get(addr, id).await;
    let pre = if status == StatusCode::NOT_FOUND {
        Sha256Digest::empty()
    } else {
        Sha256Digest::of_json(&current)
    };
    let agent = KeyPair::from_seed(AGENT_SEED);
    let inverse_digest =
        Sha256Digest::of(&palisade_policy::canon::canonicalize(inverse, 8).unwrap());
    let f = json!({
        "ptcl_version": "1.0",
        "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        "sor_target_uri": format!("{BASE}/api/v2/items/{id}"),
        "recovery_mode": mode,
        "t_req_ms": 500,
        "t_granted_ms": t_granted,
        "cas_fence_epoch": epoch,
        "pre_image_state_hash": pre.to_string(),
        "inverse_payload_jcs_hash": inverse_digest.to_string(),
        "issued_at": lease::format_rfc3339_ms(palisade::clock::WallClock::now_ms() - issued_ago_ms),
    });
    serde_json::to_string(&lease::sign(f.as_object().unwrap().clone(), &agent)).unwrap()
}

pub async fn sor_write(
    p: &Palisade,
    id: &str,
    lease: &str,
    inverse: &[u8],
    body: &str,
) -> StatusCode {
    let req = Request::put(p.url(&format!("/api/v2/items/{id}")))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse),
        )
        .body(full(body.to_owned()))
        .unwrap();
    send(&http1_client(), req).await.0.status
}

pub async fn compensate(p: &Palisade, lease: &str) -> (StatusCode, Value, http::HeaderMap) {
    let id: Value = serde_json::from_str(lease).unwrap();
    let url = p.url(&format!(
        "/.well-known/ptcl/v1/leases/{}/compensate",
        id["lease_id"].as_str().unwrap()
    ));
    let (parts, body) = send(&http1_client(), Request::post(url).body(full("")).unwrap()).await;
    (
        parts.status,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
        parts.headers,
    )
}
