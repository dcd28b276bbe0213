//! Closed-loop write load for `benches/writes`: C connections each send PUTs back to back for
//! a fixed time and report throughput and latency percentiles as one JSON line.
//!
//!   write_load URL CONNS SECONDS passthrough
//!   write_load URL CONNS SECONDS enforced AGENT_KEY.pem PUBLIC_BASE PRE_IMAGE_DIGEST
//!
//! With `RATE=N` in the environment the load is open-loop instead: the connections together
//! send N requests per second on a fixed schedule, and each latency is measured from the time
//! the request was due (so a stall counts against every request it delayed).
//!
//! `WRITE_PATH` (default `/items/`) is the prefix of each PUT's path and `WRITE_BODY` (default
//! `{"qty":1}`) its body, so a run can target an operation a RICH bundle binds.
//!
//! In `enforced` mode every request carries a fresh lease (a new resource each time, epoch 1)
//! signed with AGENT_KEY and its inverse inline, so every write passes every check and
//! advances a fence durably. Leases are signed before the clock starts for each request, so
//! signing time is not counted as the sidecar's latency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use palisade_policy::lease;
use serde_json::json;
use tokio::time::Instant;

struct Leases {
    key: KeyPair,
    base: String,
    pre_image: String,
}

impl Leases {
    /// A lease for a write to `path` and its inverse (`DELETE path`: an inverse must undo the
    /// write's own resource, SPEC §5.4), as the two headers carry them.
    fn make(&self, path: &str) -> (String, String) {
        let inverse = serde_json::to_vec(&json!({"method": "DELETE", "path": path})).unwrap();
        let jcs = palisade_policy::canon::canonicalize(&inverse, 8).unwrap();
        let f = json!({
            "ptcl_version": "1.0",
            "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            "sor_target_uri": format!("{}{path}", self.base),
            "recovery_mode": "COMPENSATING_ACTION",
            "t_req_ms": 1000,
            "t_granted_ms": 600_000,
            "cas_fence_epoch": 1,
            "pre_image_state_hash": self.pre_image,
            "inverse_payload_jcs_hash": Sha256Digest::of(&jcs).to_string(),
            "issued_at": lease::format_rfc3339_ms(palisade::clock::WallClock::now_ms()),
        });
        let lease = serde_json::to_string(&lease::sign(
            f.as_object().cloned().unwrap_or_default(),
            &self.key,
        ))
        .unwrap();
        (lease, URL_SAFE_NO_PAD.encode(&inverse))
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let url = args[1].clone();
    let conns: usize = args[2].parse().unwrap();
    let seconds: u64 = args[3].parse().unwrap();
    let leases = (args[4] == "enforced").then(|| {
        let pem = std::fs::read_to_string(&args[5]).unwrap();
        Arc::new(Leases {
            key: KeyPair::from_pkcs8_pem(&pem).unwrap(),
            base: args[6].clone(),
            pre_image: args[7].clone(),
        })
    });
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let counter = Arc::new(AtomicU64::new(0));
    // Resources are new in every run, so a lease at epoch 1 is always fresh.
    let run = Arc::new(uuid::Uuid::new_v4().simple().to_string());
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    // Open loop: connection i sends at start + (i + k·conns) / rate.
    let rate: Option<f64> = std::env::var("RATE").ok().and_then(|r| r.parse().ok());
    let prefix: Arc<str> = std::env::var("WRITE_PATH")
        .unwrap_or_else(|_| "/items/".into())
        .into();
    let body = Bytes::from(std::env::var("WRITE_BODY").unwrap_or_else(|_| r#"{"qty":1}"#.into()));
    // An `Authorization` value for every request (the admission target's bearer token).
    let authorization: Option<Arc<str>> = std::env::var("WRITE_AUTHORIZATION")
        .ok()
        .filter(|v| !v.is_empty())
        .map(Arc::from);
    let mut tasks = Vec::new();
    for conn in 0..conns {
        let (client, url, leases, counter, run, prefix, body) = (
            client.clone(),
            url.clone(),
            leases.clone(),
            counter.clone(),
            run.clone(),
            prefix.clone(),
            body.clone(),
        );
        let authorization = authorization.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            let mut k = 0u64;
            while Instant::now() < deadline {
                let due = rate.map(|r| {
                    start + Duration::from_secs_f64((conn as u64 + k * conns as u64) as f64 / r)
                });
                k += 1;
                if due.is_some_and(|d| d >= deadline) {
                    break;
                }
                let n = counter.fetch_add(1, Ordering::Relaxed);
                let path = format!("{prefix}{run}-{n}");
                let mut req = hyper::Request::put(format!("{url}{path}"))
                    .header("content-type", "application/json");
                if let Some(a) = &authorization {
                    req = req.header("authorization", a.as_ref());
                }
                if let Some(l) = &leases {
                    let (lease, inverse) = l.make(&path);
                    req = req
                        .header("agent-compensation-lease", lease)
                        .header("agent-compensation-inverse", inverse);
                }
                let req = req.body(Full::new(body.clone())).unwrap();
                // The lease is signed before the request is due, so signing is not counted.
                if let Some(due) = due {
                    // tokio's timer has 1 ms granularity: sleep to just before, then yield
                    // until due, so latencies are not padded by up to a millisecond.
                    tokio::time::sleep_until(due - Duration::from_millis(2)).await;
                    while Instant::now() < due {
                        tokio::task::yield_now().await;
                    }
                }
                let t = due.unwrap_or_else(Instant::now);
                match client.request(req).await {
                    Ok(resp) => {
                        let status = resp.status();
                        let body = resp.into_body().collect().await;
                        if status.is_success() {
                            lat.push(t.elapsed().as_micros() as u64);
                        } else {
                            // The first refusal of a run says why (a bench that only counts
                            // errors hides a setup that no longer matches the sidecar).
                            if errors == 0 && conn == 0 {
                                let text = body.map(|b| b.to_bytes()).unwrap_or_default();
                                eprintln!(
                                    "write_load: {status} {}",
                                    String::from_utf8_lossy(&text)
                                );
                            }
                            errors += 1;
                        }
                    }
                    Err(e) => {
                        if errors == 0 && conn == 0 {
                            eprintln!("write_load: {e}");
                        }
                        errors += 1
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (lat, e) = t.await.unwrap();
        all.extend(lat);
        errors += e;
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0) as f64
            / 1000.0
    };
    println!(
        "{}",
        json!({
            "rps": all.len() as f64 / seconds as f64,
            "p50_ms": pct(0.50),
            "p99_ms": pct(0.99),
            "ok": all.len(),
            "errors": errors,
        })
    );
}
