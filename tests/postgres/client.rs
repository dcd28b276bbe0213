//! Talking to the sidecars and the database: writes, their answers, load, and checks on the
//! chain and the upstream.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt as _;
use palisade::clock::SetClock;
use palisade::store::postgres::{Connect, PostgresStore};
use palisade::store::StoreError;
use palisade_policy::keys::KeyPair;
use serde_json::Value;

use crate::support::writes::*;
use crate::support::*;
use palisade::store::Receipts;

pub fn connect(url: &str) -> Connect<'_> {
    Connect {
        url,
        pool_size: 4,
        statement_timeout: Duration::from_secs(2),
        retention: Default::default(),
        clock: Arc::new(palisade::clock::AnchoredClock::new()),
        tls: palisade::net::db_tls::client_config,
    }
}

pub async fn open(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::open(connect(url), sidecar_log("palisade")).await
}

/// A store on `url` whose time is `clock`'s.
pub async fn open_on(url: &str, clock: &Arc<SetClock>) -> PostgresStore {
    let c = Connect {
        clock: clock.clone(),
        ..connect(url)
    };
    PostgresStore::open(c, sidecar_log("palisade"))
        .await
        .unwrap()
}

/// One request's answer, or `None` if the connection failed or it took over 15 s.
pub async fn try_send(req: http::Request<BoxBody>) -> Option<(StatusCode, http::HeaderMap, Bytes)> {
    let client = http1_client();
    let resp = tokio::time::timeout(Duration::from_secs(15), client.request(req))
        .await
        .ok()?
        .ok()?;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.ok()?.to_bytes();
    Some((parts.status, parts.headers, bytes))
}

pub fn leased_put(
    base: &str,
    path: &str,
    lease: &str,
    key: Option<&str>,
    body: &str,
) -> http::Request<BoxBody> {
    let mut b = http::Request::put(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse_for(path)),
        );
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(full(body.to_owned())).unwrap()
}

/// What a client got for one write.
#[derive(Debug, Clone)]
pub struct Got {
    pub status: Option<StatusCode>,
    pub code: Option<String>,
    /// The receipt the client was given (header or problem body), by id.
    pub receipt: Option<String>,
    /// That receipt as the client got it, with its proof and checkpoint.
    pub envelope: Option<Value>,
}

pub fn got(answer: Option<(StatusCode, http::HeaderMap, Bytes)>) -> Got {
    let Some((status, headers, body)) = answer else {
        return Got {
            status: None,
            code: None,
            receipt: None,
            envelope: None,
        };
    };
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let envelope = headers
        .get("agent-commit-receipt")
        .and_then(|v| URL_SAFE_NO_PAD.decode(v.as_bytes()).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .or_else(|| doc.get("receipt").cloned());
    let receipt = envelope
        .as_ref()
        .map(verified_receipt)
        .and_then(|r| r["receipt_id"].as_str().map(str::to_owned));
    Got {
        status: Some(status),
        code: doc["code"].as_str().map(str::to_owned),
        receipt,
        envelope,
    }
}

/// Per load task, how many of its writes were answered 503: a task refused once has no
/// write of before still in flight (each sends one at a time).
pub type Unavailable = Arc<Vec<AtomicU64>>;

pub fn unavailable(tasks: usize) -> Unavailable {
    Arc::new((0..tasks).map(|_| AtomicU64::new(0)).collect())
}

/// Leased writes to `/items/load-{0..8}` with ever-growing epochs, from `tasks` concurrent
/// clients spread over `targets`, until `stop`; each 503 counted in `refused`.
pub async fn load(
    targets: Vec<String>,
    next: Arc<AtomicU64>,
    refused: Unavailable,
    stop: Arc<AtomicBool>,
) -> Vec<Got> {
    let tasks = refused.len();
    let agent = Arc::new(KeyPair::from_seed(AGENT_SEED));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (targets, next, stop, agent, refused) = (
            targets.clone(),
            next.clone(),
            stop.clone(),
            agent.clone(),
            refused.clone(),
        );
        handles.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let base = &targets[i % targets.len()];
                i += 1;
                let epoch = next.fetch_add(1, Ordering::Relaxed);
                let path = format!("/items/load-{}", epoch % 8);
                let lease = lease_for(&agent, &path, epoch, |_| {});
                let g = got(try_send(leased_put(base, &path, &lease, None, r#"{"qty":1}"#)).await);
                if g.status.is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                if g.status == Some(StatusCode::SERVICE_UNAVAILABLE) {
                    refused[t].fetch_add(1, Ordering::Relaxed);
                }
                out.push(g);
            }
            out
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// Per path, the fence tokens of the PUTs the upstream saw, in arrival order, must rise.
pub fn assert_epochs_rise(upstream: &Upstream, prefix: &str) {
    let mut last: HashMap<String, u64> = HashMap::new();
    for r in upstream.requests() {
        if r.method != "PUT" || !r.path_and_query.starts_with(prefix) {
            continue;
        }
        let epoch: u64 = r.headers["agent-fence-token"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        if let Some(prev) = last.insert(r.path_and_query.clone(), epoch) {
            assert!(
                epoch > prev,
                "{}: epoch {epoch} after {prev}",
                r.path_and_query
            );
        }
    }
}

/// The log in the database verifies (every hash, every entry, the newest checkpoint), and
/// holds every receipt in `given`; its size.
pub async fn assert_log_holds(url: &str, given: &[Got]) -> u64 {
    let store = open(url).await.unwrap();
    // The replicas' origin, as their checkpoints name it (their public base's host).
    let newest = store.log_head().await.unwrap();
    let origin = newest.note.lines().next().unwrap().to_owned();
    let (head, audited) = palisade::store::log_read::audit(&store, &sidecar_log_key(&origin))
        .await
        .unwrap();
    audited.unwrap();
    let ids: HashSet<String> = store
        .log_entries(0, head.size)
        .await
        .unwrap()
        .iter()
        .map(|(_, r)| {
            serde_json::from_slice::<Value>(r).unwrap()["receipt_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for g in given {
        if let Some(id) = &g.receipt {
            assert!(
                ids.contains(id),
                "a receipt a client got is not in the log: {id}"
            );
        }
    }
    head.size
}

pub fn audit_verify(config: &Path, url: &str) -> Value {
    let out = Command::new(bin())
        .args(["audit", "verify", "--json", "--config"])
        .arg(config)
        .env("TEST_PALISADE_STORE_URL", url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

pub async fn readyz(p: &Palisade) -> Option<StatusCode> {
    let req = http::Request::get(format!("http://{}/readyz", p.admin))
        .body(full(""))
        .unwrap();
    try_send(req).await.map(|a| a.0)
}

/// Polls `/readyz` until it answers `want`; how long that took.
pub async fn until_ready_is(p: &Palisade, want: StatusCode, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    let what = format!("/readyz answers {want}");
    wait::until_async(&what, within, || async { readyz(p).await == Some(want) }).await;
    started.elapsed()
}

/// A TCP relay to the database that, once armed, passes on the next `COMMIT` a client sends
/// and then cuts that connection before the server's answer can come back: the commit happens,
/// the client cannot know it did.
pub struct CommitCutter {
    pub addr: std::net::SocketAddr,
    pub armed: Arc<AtomicBool>,
    pub cut: Arc<AtomicU64>,
}

impl CommitCutter {
    pub async fn start(to: std::net::SocketAddr) -> CommitCutter {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicU64::new(0));
        let (armed2, cut2) = (armed.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = tokio::net::TcpStream::connect(to).await else {
                    continue;
                };
                let (armed, cut) = (armed2.clone(), cut2.clone());
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let back = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let commit = buf[..n].windows(7).any(|w| w == b"COMMIT\0");
                        if commit && armed.swap(false, Ordering::SeqCst) {
                            // The server has the COMMIT; the client never hears back.
                            back.abort();
                            cut.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            return;
                        }
                    }
                    back.abort();
                });
            }
        });
        CommitCutter { addr, armed, cut }
    }
}
