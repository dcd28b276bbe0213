//! The Kubernetes deployment (issue 18): the Helm chart and the manifests rendered from it,
//! checked by `tests/k8s/check_chart.py` with Helm's own engine (helm-python-sdk, Helm v4's Go
//! SDK), the Kubernetes OpenAPI schemas (kubernetes-validate, strict) and our conventions, the
//! config each shape carries through `palisade config check`. The venv is the one
//! `scripts/test.sh` makes (`target/pyenv`); a missing venv fails this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_chart_renders_valid_manifests_for_both_shapes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test.sh (SETUP_ONLY=1 makes only the venv)",
        python.display()
    );
    let out = Command::new(python)
        .arg(repo.join("tests/k8s/check_chart.py"))
        .env("PALISADE_BIN", env!("CARGO_BIN_EXE_palisade"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().last(), Some(r#"{"ok": true}"#));
}

use crate::support;

use std::collections::HashMap;
use std::io::BufRead as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use support::writes::*;
use support::*;

/// The rendered pod of `shape` and its palisade.toml, from the chart.
fn rendered_pod(shape: &str) -> Value {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(repo.join("target/pyenv/bin/python"))
        .arg(repo.join("tests/k8s/check_chart.py"))
        .args(["--pod", shape])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What the kubelet's AtomicWriter does for a configMap or secret volume: the files in a new
/// timestamped directory, `..data` switched to it with one rename, a symlink per top-level
/// name through `..data`, the old directory removed.
fn project(dir: &Path, generation: u32, files: &[(String, Vec<u8>)]) {
    use std::os::unix::fs::symlink;
    std::fs::create_dir_all(dir).unwrap();
    let ts = format!("..2026_12_04_00_00_{generation:02}.{generation}");
    for (path, bytes) in files {
        let p = dir.join(&ts).join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    let _ = std::fs::remove_file(dir.join("..data_tmp"));
    symlink(&ts, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for (path, _) in files {
        let top = path.split('/').next().unwrap();
        if std::fs::symlink_metadata(dir.join(top)).is_err() {
            symlink(format!("..data/{top}"), dir.join(top)).unwrap();
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old)).unwrap();
    }
}

async fn get(port: u16, path: &str) -> Option<(http::StatusCode, String)> {
    let req = http::Request::get(format!("http://127.0.0.1:{port}{path}"))
        .body(full(""))
        .unwrap();
    let resp = tokio::time::timeout(Duration::from_secs(2), http1_client().request(req))
        .await
        .ok()?
        .ok()?;
    let status = resp.status();
    let body = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .ok()?
        .to_bytes();
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

/// Polls an httpGet probe at its period until it succeeds, as the kubelet would, within its
/// failure threshold; `false` if it never does.
async fn probe_passes(pod_probe: &Value, admin: u16) -> bool {
    let path = pod_probe["httpGet"]["path"].as_str().unwrap();
    let period = pod_probe["periodSeconds"].as_u64().unwrap_or(10);
    let threshold = pod_probe["failureThreshold"].as_u64().unwrap_or(3);
    for _ in 0..threshold.max(1) * 2 {
        if let Some((s, _)) = get(admin, path).await {
            if s.is_success() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_secs(period).min(Duration::from_millis(500))).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_pod_runs_swaps_rotates_and_stops_as_kubernetes_would() {
    let rendered = rendered_pod("embedded");
    let pod = &rendered["pod"];
    let sidecar = &pod["initContainers"][0];
    assert_eq!(sidecar["restartPolicy"], "Always");
    let root = tempfile::tempdir().unwrap();
    let rebase = |p: &str| format!("{}{p}", root.path().display());
    let mounts: HashMap<String, PathBuf> = sidecar["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let at = PathBuf::from(rebase(m["mountPath"].as_str().unwrap()));
            (m["name"].as_str().unwrap().to_owned(), at)
        })
        .collect();
    // The pod's ports, moved to free ones (this machine runs other things on 8080).
    let port_of = |name: &str| {
        sidecar["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()["containerPort"]
            .as_u64()
            .unwrap()
    };
    // Three distinct ones: a port freed and handed out again can come back twice.
    let mut ports = Vec::new();
    while ports.len() < 3 {
        let p = free_port();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    let (data, admin, sor_port) = (ports[0], ports[1], ports[2]);
    let config = rendered["config"]
        .as_str()
        .unwrap()
        .replace("/etc/palisade/", &rebase("/etc/palisade/"))
        .replace("/var/lib/palisade", &rebase("/var/lib/palisade"))
        .replace(&format!(":{}\"", port_of("http")), &format!(":{data}\""))
        .replace(&format!(":{}\"", port_of("admin")), &format!(":{admin}\""))
        .replace(
            "http://127.0.0.1:8081",
            &format!("http://127.0.0.1:{sor_port}"),
        );

    // The volumes as the kubelet projects them.
    let sidecar_key = palisade_policy::keys::KeyPair::from_seed(SIDECAR_SEED);
    let agent = palisade_policy::keys::KeyPair::from_seed(AGENT_SEED);
    let pki = Pki::new(root.path());
    let client = pki.issue("agent", false);
    let server = pki.issue("erp-palisade.erp.svc", true);
    let tls_files = |s: &Issued| {
        vec![
            ("tls.crt".to_owned(), s.cert_pem.clone().into_bytes()),
            ("tls.key".to_owned(), s.key_pem.clone().into_bytes()),
            ("ca.crt".to_owned(), pki.ca_pem.clone().into_bytes()),
        ]
    };
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let bundle_files: Vec<(String, Vec<u8>)> = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "bundle")
        .unwrap()["configMap"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            let key = i["key"].as_str().unwrap();
            let src = if key == "lock.json" {
                repo.join("examples/erp/lock.json")
            } else {
                repo.join("examples/erp/contracts").join(key)
            };
            (
                i["path"].as_str().unwrap().to_owned(),
                std::fs::read(src).unwrap(),
            )
        })
        .collect();
    project(
        &mounts["config"],
        1,
        &[("palisade.toml".into(), config.into_bytes())],
    );
    project(
        &mounts["signing"],
        1,
        &[(
            "signing.pem".into(),
            sidecar_key.to_pkcs8_pem().into_bytes(),
        )],
    );
    let issuers = serde_json::json!([{"kid": agent.kid(), "public_key": agent.public_b64()}]);
    project(
        &mounts["trust"],
        1,
        &[("issuers.json".into(), issuers.to_string().into_bytes())],
    );
    project(
        &mounts["admin-token"],
        1,
        &[("token".into(), b"k8s-admin-token\n".to_vec())],
    );
    project(&mounts["bundle"], 1, &bundle_files);
    project(&mounts["tls"], 1, &tls_files(&server));
    std::fs::create_dir_all(&mounts["state"]).unwrap();

    // The SoR (the sample inventory API in place of the image) and the sidecar, with the
    // pod's args and env.
    let sor_dir = tempfile::tempdir().unwrap();
    let sor =
        palisade::cli::sample_sor::SampleSor::open(&sor_dir.path().join("inventory.json")).unwrap();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", sor_port))
        .await
        .unwrap();
    let sor_task = tokio::spawn(sor.serve(listener));
    let args: Vec<String> = sidecar["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let a = a.as_str().unwrap();
            if a.starts_with("/etc/palisade/") {
                rebase(a)
            } else {
                a.to_owned()
            }
        })
        .collect();
    let mut child = Command::new(bin())
        .args(&args)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let logs = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let logs = logs.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                logs.lock().unwrap().push(line);
            }
        });
    }
    let logs_text = || logs.lock().unwrap().join("\n");
    for kind in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert!(
            probe_passes(&sidecar[kind], admin).await,
            "{kind} {} did not pass; the sidecar said:\n{}",
            sidecar[kind]["httpGet"]["path"],
            logs_text()
        );
    }

    // Writes under load over mTLS, each with a fresh lease and the bundle's contract.
    let addr: std::net::SocketAddr = format!("127.0.0.1:{data}").parse().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let sor_addr: std::net::SocketAddr = format!("127.0.0.1:{sor_port}").parse().unwrap();
    let mut load = Vec::new();
    for t in 0..4 {
        let (stop, ok, failed) = (stop.clone(), ok.clone(), failed.clone());
        let cfg = tls_client_config(&pki.ca_pem, Some(&client));
        load.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let mut conn = TlsConn::connect(addr, cfg.clone()).await.unwrap();
                for _ in 0..10 {
                    n += 1;
                    let id = format!("k8s-{t}-{n}");
                    let inverse = format!(r#"{{"method":"DELETE","path":"/api/v2/items/{id}"}}"#);
                    let lease = sor_lease(
                        sor_addr,
                        &id,
                        1,
                        "COMPENSATING_ACTION",
                        inverse.as_bytes(),
                        0,
                        60_000,
                    )
                    .await;
                    let req = http::Request::put(format!("/api/v2/items/{id}"))
                        .header("content-type", "application/json")
                        .header("agent-compensation-lease", lease)
                        .header(
                            "agent-compensation-inverse",
                            base64::Engine::encode(
                                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                                &inverse,
                            ),
                        )
                        .body(full(r#"{"sku":"SKU-1042","qty":5,"warehouse":"BER-1"}"#))
                        .unwrap();
                    match conn.send(req).await {
                        Ok((parts, _))
                            if parts.status.is_success()
                                && parts.headers.contains_key("agent-commit-receipt") =>
                        {
                            ok.fetch_add(1, Ordering::Relaxed)
                        }
                        Ok((parts, body)) => {
                            eprintln!("{}: {}", parts.status, String::from_utf8_lossy(&body));
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                        Err(e) => {
                            eprintln!("{e}");
                            failed.fetch_add(1, Ordering::Relaxed)
                        }
                    };
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // The bundle's ConfigMap updated under load: the kubelet's `..data` swap, picked up.
    let reloads = || async {
        get(admin, "/metrics").await.map_or(0, |(_, m)| {
            m.lines()
                .filter(|l| l.starts_with("palisade_lockfile_reloads_total"))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum::<f64>() as u64
        })
    };
    let before = reloads().await;
    project(&mounts["bundle"], 2, &bundle_files);
    wait::until_async_or(
        "the ConfigMap swap is picked up",
        Duration::from_secs(5),
        || async { reloads().await > before },
        logs_text,
    )
    .await;

    // The certificate rotated (cert-manager rewrites the Secret; the kubelet swaps it): new
    // connections get the new one, without a restart.
    let renewed = pki.issue("erp-palisade.erp.svc", true);
    project(&mounts["tls"], 2, &tls_files(&renewed));
    let renewed_der = rustls_pemfile::certs(&mut renewed.cert_pem.as_bytes())
        .next()
        .unwrap()
        .unwrap()
        .to_vec();
    wait::until_async_or(
        "the rotated certificate is served",
        Duration::from_secs(5),
        || async {
            let conn = TlsConn::connect(addr, tls_client_config(&pki.ca_pem, Some(&client)))
                .await
                .unwrap();
            conn.peer_cert_der == renewed_der
        },
        logs_text,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Termination in the native-sidecar order: traffic leaves with the endpoints, the SoR
    // stops first, then the sidecar gets SIGTERM and must exit 0 within the grace period.
    stop.store(true, Ordering::Relaxed);
    for l in load {
        l.await.unwrap();
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert!(ok > 20, "only {ok} writes went through");
    assert_eq!(
        failed,
        0,
        "{failed} of {} accepted requests failed",
        ok + failed
    );
    sor_task.abort();
    let grace = Duration::from_secs(pod["terminationGracePeriodSeconds"].as_u64().unwrap());
    let started = tokio::time::Instant::now();
    assert!(Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success());
    let mut exited = None;
    wait::until("the sidecar exits within its grace period", grace, || {
        exited = child.try_wait().unwrap();
        exited.is_some()
    })
    .await;
    let status = exited.expect("exited");
    assert!(status.success(), "exit {status}:\n{}", logs_text());
    eprintln!(
        "pod run: {ok} writes, bundle swapped and certificate rotated under load, 0 failed; sidecar exited 0 after {:?} (grace {grace:?})",
        started.elapsed()
    );
}
