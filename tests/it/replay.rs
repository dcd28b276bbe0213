//! `palisade replay` (SPEC §12) as a user runs it: the real binary, a HAR file, a real target.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::convert::Infallible;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Response, StatusCode};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

/// A HAR 1.2 document of `(method, url, body)` entries, 10 ms apart.
fn har(entries: &[(&str, &str, Option<&str>)]) -> String {
    let entries: Vec<Value> = entries
        .iter()
        .enumerate()
        .map(|(i, (m, url, body))| {
            let mut req = json!({"method": m, "url": url, "httpVersion": "HTTP/1.1",
                                 "headers": [{"name": "Accept", "value": "application/json"}],
                                 "queryString": [], "cookies": [], "headersSize": -1, "bodySize": -1});
            if let Some(b) = body {
                req["postData"] = json!({"mimeType": "application/json", "text": b});
                req["headers"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"name": "Content-Type", "value": "application/json"}));
            }
            json!({"startedDateTime": format!("2026-11-30T10:00:00.{:03}Z", i * 10),
                   "time": 1, "request": req, "response": {"status": 200}, "cache": {}, "timings": {}})
        })
        .collect();
    json!({"log": {"version": "1.2", "creator": {"name": "test", "version": "1"}, "entries": entries}})
        .to_string()
}

/// Runs the replay CLI; returns its JSON report.
fn replay(args: &[&str], dir: &std::path::Path) -> Value {
    let report = dir.join("report.json");
    let out = Command::new(bin())
        .arg("replay")
        .args(args)
        .arg("--quiet")
        .arg("--report")
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "replay failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("latency ms"), "{table}");
    serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap()
}

/// A server that answers at once, except its 50th request, which it holds for 1 s.
async fn stalls_once() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let n = n.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |_req| {
                    let n = n.clone();
                    async move {
                        if n.fetch_add(1, Ordering::SeqCst) == 49 {
                            tokio::time::sleep(Duration::from_secs(1)).await;
                        }
                        Ok::<_, Infallible>(Response::new(full("{}")))
                    }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    addr
}

/// `palisade replay` arguments: `har` against `target` at `speed`, `requests` of them, one at
/// a time; with `lease_key`, each write gets a lease it signs.
fn replay_args(
    har: &std::path::Path,
    target: &str,
    speed: &str,
    requests: &str,
    lease_key: Option<&std::path::Path>,
) -> Vec<String> {
    let mut a: Vec<String> = [
        "--har",
        har.to_str().unwrap(),
        "--target",
        target,
        "--speed",
        speed,
        "--requests",
        requests,
        "--concurrency",
        "1",
    ]
    .map(str::to_owned)
    .to_vec();
    if let Some(key) = lease_key {
        let key = key.to_str().unwrap();
        a.extend(["--lease-key", key, "--public-base", BASE].map(str::to_owned));
    }
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stall_shows_in_the_tail_no_coordinated_omission() {
    let addr = stalls_once().await;
    let dir = tempfile::tempdir().unwrap();
    let har_path = dir.path().join("one.har");
    std::fs::write(
        &har_path,
        har(&[("GET", "http://recorded.example/ping", None)]),
    )
    .unwrap();
    let target = format!("http://{addr}");
    // One connection at 100 req/s for 3 s: the stall holds up every request due during it.
    let args = [
        "--har",
        har_path.to_str().unwrap(),
        "--target",
        &target,
        "--rate",
        "100",
        "--duration",
        "3s",
        "--concurrency",
        "1",
    ];
    let r = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        move || replay(&args.iter().map(String::as_str).collect::<Vec<_>>(), &dir)
    })
    .await
    .unwrap();
    let l = &r["latency_ms"];
    assert!(r["sent"].as_u64().unwrap() >= 290, "{r}");
    assert_eq!(r["sent"], r["completed"]);
    assert!(l["max"].as_f64().unwrap() >= 990.0, "{r}");
    assert!(l["p99.9"].as_f64().unwrap() >= 900.0, "{r}");
    // ~100 requests were due during the stall: a closed-loop tool would report one slow one.
    assert!(l["p90"].as_f64().unwrap() >= 300.0, "{r}");
    assert!(
        r["delayed_by_concurrency_cap"].as_u64().unwrap() >= 50,
        "{r}"
    );
    assert_eq!(r["statuses"]["200"], r["completed"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_lease_key_every_write_passes_and_without_one_none_reaches_the_sor() {
    let (p, sor, _sor_dir) = start_with_sor().await;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("agent.pem");
    std::fs::write(&key, KeyPair::from_seed(AGENT_SEED).to_pkcs8_pem()).unwrap();
    // Recorded against the real origin; replayed against the sidecar.
    let o = "https://erp.example.com";
    let entries = [
        ("GET", format!("{o}/api/v2/items"), None),
        (
            "POST",
            format!("{o}/api/v2/items"),
            Some(r#"{"id":"R-1","sku":"R-1","qty":5}"#),
        ),
        ("GET", format!("{o}/api/v2/items/R-1"), None),
        (
            "PUT",
            format!("{o}/api/v2/items/R-1"),
            Some(r#"{"sku":"R-1","qty":6}"#),
        ),
        (
            "PUT",
            format!("{o}/api/v2/items/R-1"),
            Some(r#"{"sku":"R-1","qty":7}"#),
        ),
        ("DELETE", format!("{o}/api/v2/items/R-1"), None),
    ];
    let entries: Vec<(&str, &str, Option<&str>)> = entries
        .iter()
        .map(|(m, u, b)| (*m, u.as_str(), *b))
        .collect();
    let har_path = dir.path().join("erp.har");
    std::fs::write(&har_path, har(&entries)).unwrap();
    let target = format!("http://{}", p.data);
    let common = |lease: bool| replay_args(&har_path, &target, "1", "6", lease.then_some(&*key));
    let run = |args: Vec<String>| {
        let dir = dir.path().to_owned();
        tokio::task::spawn_blocking(move || {
            replay(&args.iter().map(String::as_str).collect::<Vec<_>>(), &dir)
        })
    };

    // Without leases: every write is refused and the SoR never sees one.
    let r = run(common(false)).await.unwrap();
    assert_eq!(r["refusals"], json!({"ERR_LEASE_REQUIRED": 4}), "{r}");
    assert_eq!(r["statuses"]["428"], 4, "{r}");
    assert_eq!(sor_get(sor, "R-1").await.0, StatusCode::NOT_FOUND);

    // With leases: no refusals; the writes happened in order (created, updated, deleted).
    let r = run(common(true)).await.unwrap();
    assert_eq!(r["refusals"], json!({}), "{r}");
    assert_eq!(r["errors"], json!({}), "{r}");
    // What the SoR itself answers: it names the created item itself, so the recorded GET of
    // R-1 is a 404 and the first PUT creates R-1 (201); the second updates it, DELETE removes
    // it. Nothing the replayer or the sidecar caused.
    assert_eq!(
        r["statuses"],
        json!({"200": 2, "201": 2, "204": 1, "404": 1}),
        "{r}"
    );
    assert_eq!(sor_get(sor, "R-1").await.0, StatusCode::NOT_FOUND);
    // Leases granted by the sidecar's own endpoint instead: the same answers, no refusal.
    let mut granted = common(false);
    granted.extend([
        "--lease-from-sidecar".to_owned(),
        "--public-base".to_owned(),
        BASE.to_owned(),
    ]);
    let r = run(granted).await.unwrap();
    assert_eq!(r["refusals"], json!({}), "{r}");
    assert_eq!(r["errors"], json!({}), "{r}");
    assert_eq!(
        r["statuses"],
        json!({"200": 2, "201": 2, "204": 1, "404": 1}),
        "{r}"
    );
    // The fences moved: the writes went through enforcement, not around it.
    let (_, f) = admin_get(p.admin, "/admin/v1/fences/%2Fapi%2Fv2%2Fitems%2FR-1").await;
    let f: Value = serde_json::from_str(&f).unwrap();
    assert!(f["epoch"].as_u64().unwrap() > 1_000_000_000_000, "{f}");
}

/// The recorded ERP traffic (`benches/traffic/erp.har`, mitmproxy in front of the sample SoR)
/// replayed through an enforcing sidecar in front of a fresh sample SoR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recorded_erp_traffic_replays_with_leases_and_is_refused_without() {
    let har_path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../benches/traffic/erp.har");
    let recorded: Value = serde_json::from_slice(&std::fs::read(&har_path).unwrap()).unwrap();
    let mut want = serde_json::Map::new();
    let mut writes = 0u64;
    for e in recorded["log"]["entries"].as_array().unwrap() {
        let s = e["response"]["status"].to_string();
        let n = want.get(&s).and_then(Value::as_u64).unwrap_or(0) + 1;
        want.insert(s, json!(n));
        if e["request"]["method"] != "GET" {
            writes += 1;
        }
    }
    let total = recorded["log"]["entries"]
        .as_array()
        .unwrap()
        .len()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("agent.pem");
    std::fs::write(&key, KeyPair::from_seed(AGENT_SEED).to_pkcs8_pem()).unwrap();
    let run = |target: String, lease: bool| {
        let a = replay_args(&har_path, &target, "50", &total, lease.then_some(&*key));
        let dir = dir.path().to_owned();
        tokio::task::spawn_blocking(move || {
            replay(&a.iter().map(String::as_str).collect::<Vec<_>>(), &dir)
        })
    };

    // Without leases, against a fresh SoR: every write is a 428 and none reaches the SoR.
    let (p, sor, _sor_dir) = start_with_sor().await;
    let r = run(format!("http://{}", p.data), false).await.unwrap();
    assert_eq!(r["refusals"], json!({"ERR_LEASE_REQUIRED": writes}), "{r}");
    assert_eq!(r["statuses"]["428"], writes, "{r}");
    let req = http::Request::get(format!("http://{sor}/api/v2/items"))
        .body(full(""))
        .unwrap();
    let (_, body) = send(&http1_client(), req).await;
    let list: Value = serde_json::from_slice(&body).unwrap();
    // Only the three items the sample SoR starts with, as they were.
    let qty: Vec<&Value> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| &i["qty"])
        .collect();
    assert_eq!(
        qty,
        [&json!(1200), &json!(800), &json!(5000)],
        "the SoR saw a write: {list}"
    );
    drop(p);

    // With leases, against another fresh SoR: the recording's own answers, no refusal.
    let (p, _sor, _sor_dir) = start_with_sor().await;
    let r = run(format!("http://{}", p.data), true).await.unwrap();
    assert_eq!(r["refusals"], json!({}), "{r}");
    assert_eq!(r["errors"], json!({}), "{r}");
    assert_eq!(r["statuses"], Value::Object(want), "{r}");
}
