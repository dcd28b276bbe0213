//! The chart's pod under `podman kube play` (issue 42): the embedded shape rendered by Helm's
//! engine (`tests/k8s/kube_play.py`), played with the image this build made — the sidecar and
//! the sample SoR (`palisade sample-sor`, the chart's `sor` container) in one pod, on podman's
//! bridge network, reached at the pod's IP as a Service would reach it. podman 4.3 has no
//! native sidecars, crashes on secret volumes and plays no StatefulSet: the script changes
//! those three things and says so; everything else is as rendered (uid 10001, read-only root,
//! dropped capabilities, the ConfigMap, Secret and state mounts, the config).
//!
//! Checked: readiness at the probes' paths, an enforced write through the pod (and a refusal
//! that reaches nothing), a bundle swap by changing the bundle's ConfigMap in its volume, and
//! SIGTERM to the sidecar with a write in flight: it completes, the container exits 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::image::{await_bundle, built_image, get_json, podman, text, TAG};
use crate::support::bundles::{contract, write_bundle, DIALECT};
use crate::support::wait;
use crate::support::writes::*;

const POD: &str = "erp-palisade";
const SIDECAR: &str = "erp-palisade-palisade";
/// The podman volumes the play makes: its ConfigMaps', and the claim's.
const VOLUMES: [&str; 6] = [
    "erp-palisade-config",
    "erp-bundle",
    "palisade-signing",
    "palisade-issuers",
    "palisade-admin",
    "state",
];
const ADMIN_TOKEN: &str = "pod-admin-token-for-tests";

fn clean_up() {
    let _ = podman(&["pod", "rm", "-f", POD]);
    let mut rm = vec!["volume", "rm", "-f"];
    rm.extend(VOLUMES);
    let _ = podman(&rm);
}

struct CleanUp;

impl Drop for CleanUp {
    fn drop(&mut self) {
        clean_up();
    }
}

fn out(args: &[&str]) -> String {
    let o = podman(args);
    assert!(o.status.success(), "podman {args:?}: {}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// Writes `bytes` at `path` as an editor or a config tool would: a temporary file renamed
/// over it.
fn replace_file(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(tmp, path).unwrap();
}

/// A leased PUT of `/api/v2/items/{id}` through the pod, as raw HTTP/1.1 bytes.
async fn leased_put(data: SocketAddr, id: &str, body: &str) -> Vec<u8> {
    let inverse = format!(r#"{{"method":"DELETE","path":"/api/v2/items/{id}"}}"#);
    let lease = sor_lease(
        data,
        id,
        1,
        "COMPENSATING_ACTION",
        inverse.as_bytes(),
        0,
        60_000,
    )
    .await;
    let inverse_b64 =
        base64::Engine::encode(&base64::engine::general_purpose::URL_SAFE_NO_PAD, &inverse);
    format!(
        "PUT /api/v2/items/{id} HTTP/1.1\r\nhost: erp.example.com\r\ncontent-type: application/json\r\n\
         agent-compensation-lease: {lease}\r\nagent-compensation-inverse: {inverse_b64}\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn exchange(data: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut conn = tokio::net::TcpStream::connect(data).await.unwrap();
    conn.write_all(request).await.unwrap();
    read_response(conn).await
}

async fn read_response(mut conn: tokio::net::TcpStream) -> (u16, String) {
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), conn.read_to_end(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer:?}"));
    (status, answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_charts_pod_runs_under_podman_kube_play() {
    if let Err(why) = tokio::task::spawn_blocking(built_image).await.unwrap() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    clean_up();
    let _clean = CleanUp;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let work = tempfile::tempdir().unwrap();

    // The rendered manifests, with the Secrets the chart expects and never creates.
    let sidecar_key = KeyPair::from_seed(SIDECAR_SEED);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let issuers = json!([{"kid": agent.kid(), "public_key": agent.public_b64()}]).to_string();
    let input = json!({
        "image": TAG,
        "public_base": BASE,
        "drain_seconds": 10,
        "secrets": {
            "palisade-signing": {"signing.pem": sidecar_key.to_pkcs8_pem()},
            "palisade-issuers": {"issuers.json": issuers},
            "palisade-admin": {"token": format!("{ADMIN_TOKEN}\n")},
        },
    });
    std::fs::write(work.path().join("input.json"), input.to_string()).unwrap();
    let rendered = Command::new(repo.join("target/pyenv/bin/python"))
        .arg(repo.join("tests/k8s/kube_play.py"))
        .arg(work.path().join("input.json"))
        .arg(work.path().join("pod.json"))
        .output()
        .unwrap();
    assert!(rendered.status.success(), "{}", text(&rendered));
    eprintln!("{}", String::from_utf8_lossy(&rendered.stderr));
    let manifests = work.path().join("pod.yaml");
    std::fs::write(&manifests, &rendered.stdout).unwrap();
    let pod_doc: Value =
        serde_json::from_slice(&std::fs::read(work.path().join("pod.json")).unwrap()).unwrap();
    let sidecar_spec = &pod_doc["spec"]["containers"][0];
    assert_eq!(sidecar_spec["name"], "palisade");
    assert_eq!(sidecar_spec["image"], TAG);

    // podman 4.3 writes a ConfigMap item's file but not the directory its path names
    // (`contracts/<digest>.json`); the kubelet makes it. Made here, in the volume it reuses.
    out(&["volume", "create", "erp-bundle"]);
    let bundle_dir = std::path::PathBuf::from(out(&[
        "volume",
        "inspect",
        "erp-bundle",
        "--format",
        "{{.Mountpoint}}",
    ]));
    std::fs::create_dir_all(bundle_dir.join("contracts")).unwrap();

    let started = Instant::now();
    let played = podman(&["kube", "play", manifests.to_str().unwrap()]);
    assert!(played.status.success(), "{}", text(&played));
    let infra = out(&["pod", "inspect", POD, "--format", "{{.InfraContainerID}}"]);
    let ip = out(&[
        "inspect",
        infra.as_str(),
        "--format",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
    ]);
    let port = |name: &str| {
        sidecar_spec["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["containerPort"]
            .as_u64()
            .unwrap()
    };
    let data: SocketAddr = format!("{ip}:{}", port("http")).parse().unwrap();
    let admin: SocketAddr = format!("{ip}:{}", port("admin")).parse().unwrap();
    let logs = || text(&podman(&["logs", SIDECAR]));

    // Readiness, at the paths the chart's probes name.
    let probe = |kind: &str| {
        sidecar_spec[kind]["httpGet"]["path"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let readiness = format!("http://{admin}{}", probe("readinessProbe"));
    wait::until_async_or(
        "the pod is ready",
        Duration::from_secs(30),
        || async { get_json(&readiness, Some(ADMIN_TOKEN)).await.0 == StatusCode::OK },
        &logs,
    )
    .await;
    eprintln!(
        "pod ready {} ms after kube play",
        started.elapsed().as_millis()
    );
    for kind in ["startupProbe", "livenessProbe"] {
        assert_eq!(
            get_json(&format!("http://{admin}{}", probe(kind)), Some(ADMIN_TOKEN))
                .await
                .0,
            StatusCode::OK
        );
    }
    // As the pod's securityContext says: uid 10001, read-only root.
    assert_eq!(
        out(&[
            "inspect",
            SIDECAR,
            "--format",
            "{{.Config.User}} {{.HostConfig.ReadonlyRootfs}}"
        ]),
        "10001:10001 true"
    );

    // An enforced write through the pod, into the SoR beside it; a refusal that reaches
    // nothing.
    let item = r#"{"sku":"SKU-1042","qty":5,"warehouse":"BER-1"}"#;
    let (status, answer) = exchange(data, &leased_put(data, "pod-1", item).await).await;
    assert_eq!(status, 201, "{answer}\n{}", logs());
    assert!(answer
        .to_ascii_lowercase()
        .contains("agent-commit-receipt:"));
    let (status, record) = sor_get(data, "pod-1").await;
    assert_eq!((status, &record["qty"]), (StatusCode::OK, &json!(5)));
    let unleased = format!(
        "PUT /api/v2/items/pod-2 HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{item}",
        item.len()
    );
    let (status, answer) = exchange(data, unleased.as_bytes()).await;
    assert_eq!(status, 428, "{answer}");
    assert!(answer.contains("ERR_LEASE_REQUIRED"));
    assert_eq!(sor_get(data, "pod-2").await.0, StatusCode::NOT_FOUND);

    // A bundle swap: the bundle's ConfigMap changed (its contracts, then its lockfile) in the
    // volume podman made of it; qty at most 10 from now on.
    let admin_base = format!("http://{admin}");
    let lockfile_url = format!("{admin_base}/admin/v1/lockfile");
    let (_, before) = get_json(&lockfile_url, Some(ADMIN_TOKEN)).await;
    let schema = json!({"$schema": DIALECT,
        "type": "object", "required": ["qty"],
        "properties": {"qty": {"type": "integer", "minimum": 0, "maximum": 10}}});
    let second = write_bundle(
        &work.path().join("b2"),
        "urn:palisade:test:pod/2",
        &[(
            "set_item",
            "PUT /api/v2/items/{id}",
            contract(schema, "write", "compensable", "optional"),
            None,
        )],
    );
    assert_ne!(before["digest"], second.digest.as_str());
    for e in std::fs::read_dir(&second.contracts).unwrap() {
        let e = e.unwrap();
        replace_file(
            &bundle_dir.join("contracts").join(e.file_name()),
            &std::fs::read(e.path()).unwrap(),
        );
    }
    replace_file(
        &bundle_dir.join("lock.json"),
        &std::fs::read(&second.lockfile).unwrap(),
    );
    await_bundle(&admin_base, Some(ADMIN_TOKEN), &second.digest, logs).await;
    let big = r#"{"sku":"SKU-1042","qty":50,"warehouse":"BER-1"}"#;
    let (status, answer) = exchange(data, &leased_put(data, "pod-3", big).await).await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("ERR_CONTRACT_INPUT"), "{answer}");
    assert_eq!(sor_get(data, "pod-3").await.0, StatusCode::NOT_FOUND);

    // SIGTERM to the sidecar with a write in flight (its headers in, half its body): the
    // drain lets it finish, the container exits 0.
    let request = leased_put(data, "pod-4", item).await;
    let split = request.len() - item.len() / 2;
    let mut conn = tokio::net::TcpStream::connect(data).await.unwrap();
    conn.write_all(&request[..split]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let stop = tokio::task::spawn_blocking(|| podman(&["stop", "-t", "15", SIDECAR]));
    wait::until_async_or(
        "the drain begins",
        Duration::from_secs(10),
        || async { logs().contains("shutdown requested: draining") },
        &logs,
    )
    .await;
    conn.write_all(&request[split..]).await.unwrap();
    let (status, answer) = read_response(conn).await;
    assert_eq!(status, 201, "{answer}\n{}", logs());
    assert!(answer
        .to_ascii_lowercase()
        .contains("agent-commit-receipt:"));
    let stopped = stop.await.unwrap();
    assert!(stopped.status.success(), "{}", text(&stopped));
    assert_eq!(
        out(&["inspect", SIDECAR, "--format", "{{.State.ExitCode}}"]),
        "0",
        "{}",
        logs()
    );
    assert!(logs().contains("palisade stopped"), "{}", logs());
}
