//! The image built and run under a real container runtime (issue 42): `deploy/build-image.sh`
//! builds it with podman (runc, no daemon, no registry: a base made on this machine) from this
//! build's binary; the container runs as non-root on a read-only root filesystem with the
//! chart's mounts — a ConfigMap (kubelet's `..data` symlink layout, swapped atomically to
//! update it), a Secret, a writable state volume — in front of a real upstream on the host's
//! network. Checked: `--version` and `config check` in the image, readiness, an enforced write,
//! a bundle swap by replacing the ConfigMap, and SIGTERM: the in-flight request completes, exit
//! 0. Skipped, saying so, where podman cannot run containers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use tokio::time::Instant;

use crate::support::bundles::{contract, qty_schema, write_bundle, BundleFiles};
use crate::support::writes::*;
use crate::support::*;

pub const TAG: &str = "localhost/palisade:it";

pub fn podman(args: &[&str]) -> Output {
    let mut cmd = Command::new("podman");
    if Path::new("/usr/sbin/runc").exists() {
        cmd.args(["--runtime", "/usr/sbin/runc"]);
    }
    cmd.args(["--cgroup-manager", "cgroupfs"])
        .args(args)
        .env("CONTAINERS_CONF", containers_conf());
    cmd.output().expect("podman runs")
}

/// Containers on this kind of host need no ulimits set (their defaults fail here). Written
/// once per test process and renamed into place: the image tests run podman concurrently, and
/// a podman that read a file being rewritten fell back to the default ulimits (CI, stop 52).
fn containers_conf() -> PathBuf {
    static PATH: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PATH.get_or_init(|| {
        let dir = std::env::temp_dir();
        // One name for every run (the content never changes), so runs leave no files behind;
        // written beside and renamed, so a concurrent run never reads half of it.
        let path = dir.join("palisade-it-containers.conf");
        let tmp = dir.join(format!("palisade-it-containers-{}.tmp", std::process::id()));
        std::fs::write(&tmp, "[containers]\ndefault_ulimits = []\n").unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        path
    })
    .clone()
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A ConfigMap volume as kubelet writes it: the files under `..<version>/`, `..data` a symlink
/// to the version in force, each file a symlink through `..data`.
fn configmap_version(dir: &Path, version: &str, files: &[(&str, Vec<u8>)]) {
    let v = dir.join(format!("..{version}"));
    for (name, bytes) in files {
        let path = v.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    let tmp = dir.join("..data_tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("..{version}"), &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap(); // atomic, as kubelet swaps it
    for top in ["palisade.toml", "issuers.json", "bundle"] {
        let link = dir.join(top);
        if std::fs::symlink_metadata(&link).is_err() {
            std::os::unix::fs::symlink(format!("..data/{top}"), link).unwrap();
        }
    }
}

fn bundle_files(b: &BundleFiles) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![(
        "bundle/lock.json".to_owned(),
        std::fs::read(&b.lockfile).unwrap(),
    )];
    for e in std::fs::read_dir(&b.contracts).unwrap() {
        let e = e.unwrap();
        out.push((
            format!("bundle/contracts/{}", e.file_name().to_string_lossy()),
            std::fs::read(e.path()).unwrap(),
        ));
    }
    out
}

/// Builds the image from this build's binary once for the tests that run it: `Ok` holds what
/// `--version` printed in a container of it; `Err` says why they are skipped (no podman, or
/// podman that cannot run containers here).
pub fn built_image() -> Result<String, String> {
    static BUILT: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_image).clone()
}

fn build_image() -> Result<String, String> {
    let can = Command::new("podman").arg("--version").output();
    if can.as_ref().map_or(true, |o| !o.status.success()) {
        return Err(
            "podman is not installed here (scripts/test.sh installs podman and runc as root)"
                .into(),
        );
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = Command::new(repo.join("deploy/build-image.sh"))
        .arg(TAG)
        .env("BINARY", bin())
        .env("CONTAINERS_CONF", containers_conf())
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let probe = podman(&[
        "run",
        "--rm",
        "--network=none",
        "--read-only",
        TAG,
        "--version",
    ]);
    if !probe.status.success() && text(&probe).contains("OCI runtime") {
        return Err(format!(
            "podman cannot run containers here: {}",
            text(&probe)
        ));
    }
    assert!(probe.status.success(), "{}", text(&probe));
    Ok(String::from_utf8_lossy(&probe.stdout).trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_image_runs_as_the_chart_runs_it() {
    let version = match tokio::task::spawn_blocking(built_image).await.unwrap() {
        Ok(version) => version,
        Err(why) => {
            eprintln!("SKIPPED: {why}");
            return;
        }
    };
    // `--version` in the image, on a read-only root with no network (the build's probe).
    assert_eq!(version, format!("palisade {}", env!("CARGO_PKG_VERSION")));
    // Non-root, and no shell to exec into.
    let id = podman(&["image", "inspect", TAG, "--format", "{{.Config.User}}"]);
    assert_eq!(String::from_utf8_lossy(&id.stdout).trim(), "65532:65532");
    // mimalloc's lazy arena commit, for the memory figure the README reports.
    let env = podman(&["image", "inspect", TAG, "--format", "{{.Config.Env}}"]);
    assert!(
        String::from_utf8_lossy(&env.stdout).contains("MIMALLOC_ARENA_EAGER_COMMIT=0"),
        "{}",
        text(&env)
    );
    let sh = podman(&[
        "run",
        "--rm",
        "--network=none",
        "--entrypoint",
        "/bin/sh",
        TAG,
        "-c",
        "true",
    ]);
    assert!(!sh.status.success(), "the image has no shell");

    // The chart's volumes: a ConfigMap, a Secret, a writable state directory.
    let work = tempfile::tempdir().unwrap();
    let (config, secrets, state) = (
        work.path().join("config"),
        work.path().join("secrets"),
        work.path().join("state"),
    );
    for d in [&config, &secrets, &state] {
        std::fs::create_dir_all(d).unwrap();
    }
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    let agent = KeyPair::from_seed(AGENT_SEED);
    std::fs::write(secrets.join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    let upstream = Upstream::start().await;
    let (port, admin) = (free_port(), free_port());
    let toml = format!(
        "[listen]\naddr = \"127.0.0.1:{port}\"\npublic_base = \"{BASE}\"\ndrain_timeout = \"10s\"\n\
         [admin]\naddr = \"127.0.0.1:{admin}\"\n\
         [upstream]\nurl = \"{}\"\ntimeout = \"10s\"\n\
         [signing]\nkey = \"/etc/palisade/secrets/signing.pem\"\n\
         [trust]\nissuers = \"/etc/palisade/config/issuers.json\"\n\
         [store]\npath = \"/var/lib/palisade/state.redb\"\n\
         [rich]\nlockfile = \"/etc/palisade/config/bundle/lock.json\"\n\
         contracts = \"/etc/palisade/config/bundle/contracts\"\nunbound_writes = \"allow\"\n",
        upstream.url()
    );
    let issuers = json!([{"kid": agent.kid(), "public_key": agent.public_b64()}]).to_string();
    let first = write_bundle(
        &work.path().join("b1"),
        "urn:palisade:test:image/1",
        &[(
            "set_item",
            "PUT /items/{id}",
            contract(qty_schema(), "write", "compensable", "optional"),
            None,
        )],
    );
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("palisade.toml".into(), toml.into_bytes()),
        ("issuers.json".into(), issuers.clone().into_bytes()),
    ];
    files.extend(bundle_files(&first));
    let refs: Vec<(&str, Vec<u8>)> = files.iter().map(|(n, b)| (n.as_str(), b.clone())).collect();
    configmap_version(&config, "v1", &refs);
    let mounts = [
        format!("{}:/etc/palisade/config:ro", config.display()),
        format!("{}:/etc/palisade/secrets:ro,U", secrets.display()),
        format!("{}:/var/lib/palisade:U", state.display()),
    ];
    let mut base = vec!["--read-only", "--network=host"];
    for m in &mounts {
        base.extend(["-v", m.as_str()]);
    }

    // config check in the image, against the mounted files.
    let mut check = vec!["run", "--rm"];
    check.extend(&base);
    check.extend([
        TAG,
        "config",
        "check",
        "--config",
        "/etc/palisade/config/palisade.toml",
    ]);
    let checked = podman(&check);
    assert!(checked.status.success(), "{}", text(&checked));

    // The sidecar, as the pod runs it.
    let name = format!("palisade-it-{}", std::process::id());
    let mut run = vec!["run", "-d", "--name", name.as_str()];
    run.extend(&base);
    run.push(TAG);
    let started = Instant::now();
    let out = podman(&run);
    assert!(out.status.success(), "{}", text(&out));
    let _cleanup = Remove(name.clone());
    let admin_url = |path: &str| format!("http://127.0.0.1:{admin}{path}");
    let http = http1_client();
    let logs = || text(&podman(&["logs", name.as_str()]));
    wait::until_async_or(
        "the container is ready",
        Duration::from_secs(20),
        || async { get_json(&admin_url("/readyz"), None).await.0 == StatusCode::OK },
        logs,
    )
    .await;
    eprintln!(
        "ready {} ms after podman run",
        started.elapsed().as_millis()
    );

    // An enforced write through the container, and a refusal.
    let data = |path: &str| format!("http://127.0.0.1:{port}{path}");
    let put = |path: &str, lease: Option<String>| {
        let mut b = Request::put(data(path)).header("content-type", "application/json");
        if let Some(l) = lease {
            b = b.header("agent-compensation-lease", l).header(
                "agent-compensation-inverse",
                base64::Engine::encode(
                    &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                    inverse_for(path),
                ),
            );
        }
        b.body(full(r#"{"qty":1150}"#)).unwrap()
    };
    let lease = lease_for(&agent, "/items/1", 1, |_| {});
    let (parts, body) = send(&http, put("/items/1", Some(lease))).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let (parts, _) = send(&http, put("/items/2", None)).await;
    assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
    let puts = || {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .count()
    };
    assert_eq!(puts(), 1);

    // A bundle swap by replacing the ConfigMap: qty at most 10 from now on.
    let mut strict = qty_schema();
    strict["properties"]["qty"]["maximum"] = json!(10);
    let second = write_bundle(
        &work.path().join("b2"),
        "urn:palisade:test:image/2",
        &[(
            "set_item",
            "PUT /items/{id}",
            contract(strict, "write", "compensable", "optional"),
            None,
        )],
    );
    let mut files2: Vec<(String, Vec<u8>)> = files
        .iter()
        .filter(|(n, _)| !n.starts_with("bundle/"))
        .cloned()
        .collect();
    files2.extend(bundle_files(&second));
    let refs2: Vec<(&str, Vec<u8>)> = files2
        .iter()
        .map(|(n, b)| (n.as_str(), b.clone()))
        .collect();
    configmap_version(&config, "v2", &refs2);
    await_bundle(&admin_url(""), None, &second.digest, logs).await;
    let lease = lease_for(&agent, "/items/3", 1, |_| {});
    let (parts, body) = send(&http, put("/items/3", Some(lease))).await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY);
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT");
    assert_eq!(puts(), 1, "the refused write reached nothing");

    // SIGTERM with a request in flight: it completes, the container exits 0.
    let slow = {
        let (http, url) = (http.clone(), data("/slow/1500"));
        tokio::spawn(async move { send(&http, Request::get(url).body(full("")).unwrap()).await })
    };
    wait::until("the slow request arrives", Duration::from_secs(5), || {
        upstream
            .requests()
            .iter()
            .any(|r| r.path_and_query == "/slow/1500")
    })
    .await;
    let stop = tokio::task::spawn_blocking({
        let name = name.clone();
        move || podman(&["stop", "-t", "15", name.as_str()])
    });
    let (parts, body) = slow.await.unwrap();
    assert_eq!(
        (parts.status, &body[..]),
        (StatusCode::OK, &b"slow done"[..])
    );
    assert!(stop.await.unwrap().status.success());
    let code = podman(&["inspect", name.as_str(), "--format", "{{.State.ExitCode}}"]);
    assert_eq!(
        String::from_utf8_lossy(&code.stdout).trim(),
        "0",
        "{}",
        logs()
    );
}

/// A GET answered with JSON (`Null` when it is not), with an admin token when given; a
/// connection refused reads as 503, as a container still starting.
pub async fn get_json(url: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = Request::get(url);
    if let Some(token) = token {
        req = req.header("authorization", format!("Bearer {token}"));
    }
    match http1_client().request(req.body(full("")).unwrap()).await {
        Ok(resp) => {
            let status = resp.status();
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, Value::Null),
    }
}

/// Waits (15 s at most) until the admin listener at `admin` reports `digest` as the bundle in
/// force; `logs` says why not.
pub async fn await_bundle(
    admin: &str,
    token: Option<&str>,
    digest: &str,
    logs: impl Fn() -> String,
) {
    wait::until_async_or(
        "the new bundle takes",
        Duration::from_secs(15),
        || async {
            let (_, doc) = get_json(&format!("{admin}/admin/v1/lockfile"), token).await;
            doc["digest"] == digest
        },
        logs,
    )
    .await;
}

/// Removes the container however the test ends.
struct Remove(String);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = podman(&["rm", "-f", self.0.as_str()]);
    }
}
