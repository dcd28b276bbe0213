//! The SoR's own ETag as the last fence (`upstream.if_match`, issue 59 item 3): check 12's
//! fetch reads the resource's strong ETag and the write goes with `If-Match` naming it, so a
//! change made through another path of the SoR after the fetch is refused by the SoR itself
//! (412), which the agent gets as 409 `ERR_STALE_PRE_IMAGE_UPSTREAM` with a rejection receipt
//! and a drift event; the SoR keeps the other change. A versioned SoR here answers GETs with
//! `ETag: "v<N>"` (or a weak one) and checks `If-Match` on PUT as RFC 9110 §13.1.1 says.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::{Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::json;

use crate::support::writes::*;
use crate::support::*;

/// `(method, path, If-Match)` of every request a [`VersionedSor`] received.
type Seen = Arc<Mutex<Vec<(String, String, Option<String>)>>>;

/// A SoR of versioned resources: version `N` answers `v<N>` with ETag `"v<N>"` (`W/"v<N>"`
/// under `/weak/`); a PUT whose `If-Match` is not the current ETag is 412, else it makes
/// version `N+1`. Armed, it changes the resource itself right after answering a GET, as a
/// change made through another path of the SoR would.
struct VersionedSor {
    addr: std::net::SocketAddr,
    version: Arc<AtomicU64>,
    change_after_get: Arc<AtomicBool>,
    /// `(method, path, If-Match)` of every request.
    seen: Seen,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for VersionedSor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl VersionedSor {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let version = Arc::new(AtomicU64::new(1));
        let change_after_get = Arc::new(AtomicBool::new(false));
        let seen: Seen = Arc::default();
        let (v, c, s) = (version.clone(), change_after_get.clone(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (v, c, s) = (v.clone(), c.clone(), s.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (v, c, s) = (v.clone(), c.clone(), s.clone());
                        async move { Ok::<_, Infallible>(answer(req, &v, &c, &s)) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Self {
            addr,
            version,
            change_after_get,
            seen,
            task,
        }
    }

    fn puts(&self) -> Vec<(String, Option<String>)> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, _, _)| m == "PUT")
            .map(|(_, p, i)| (p.clone(), i.clone()))
            .collect()
    }
}

fn answer(
    req: Request<Incoming>,
    version: &AtomicU64,
    change_after_get: &AtomicBool,
    seen: &Mutex<Vec<(String, String, Option<String>)>>,
) -> Response<BoxBody> {
    let path = req.uri().path().to_owned();
    let if_match = req
        .headers()
        .get("if-match")
        .map(|v| v.to_str().unwrap().to_owned());
    seen.lock()
        .unwrap()
        .push((req.method().to_string(), path.clone(), if_match.clone()));
    let n = version.load(Ordering::SeqCst);
    let etag = if path.starts_with("/weak/") {
        format!("W/\"v{n}\"")
    } else {
        format!("\"v{n}\"")
    };
    let mut resp = if req.method() == http::Method::GET {
        let mut r = Response::new(full(format!("v{n}")));
        r.headers_mut().insert("etag", etag.parse().unwrap());
        if change_after_get.swap(false, Ordering::SeqCst) {
            version.fetch_add(1, Ordering::SeqCst);
        }
        r
    } else if if_match
        .as_ref()
        .is_some_and(|m| *m != etag || etag.starts_with("W/"))
    {
        let mut r = Response::new(full("precondition failed"));
        *r.status_mut() = StatusCode::PRECONDITION_FAILED;
        r
    } else {
        version.fetch_add(1, Ordering::SeqCst);
        Response::new(full("ok"))
    };
    resp.headers_mut()
        .insert("content-type", "text/plain".parse().unwrap());
    resp
}

fn leased(p: &Palisade, path: &str, epoch: u64, seen_version: u64) -> Request<BoxBody> {
    let key = KeyPair::from_seed(AGENT_SEED);
    let pre = Sha256Digest::of(format!("v{seen_version}").as_bytes()).to_string();
    let lease = lease_for(&key, path, epoch, |f| {
        f.insert("pre_image_state_hash".into(), json!(pre));
    });
    put(p, path, Some(&lease), Some(&inverse_for(path)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sors_etag_is_the_last_fence() {
    let sor = VersionedSor::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = write_config_for(
        &format!("http://{}", sor.addr),
        dir.path(),
        "if_match = true\n",
        "[ptcl]\npre_image = \"fetch\"\n",
    );
    let p = Palisade::start_in(dir, &text);
    let client = http1_client();

    // A leased write goes with If-Match naming the ETag check 12's fetch answered with.
    let (ok, _) = send(&client, leased(&p, "/items/1", 1, 1)).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(
        sor.puts(),
        [("/items/1".to_owned(), Some("\"v1\"".to_owned()))]
    );
    assert_eq!(sor.version.load(Ordering::SeqCst), 2);

    // The resource changes at the SoR between check 12's read and the write's arrival: the
    // pre-image matched, the SoR refuses the write, the agent gets 409 with a rejection
    // receipt naming the code and the SoR's 412, the epoch stays where the write moved it,
    // and the SoR keeps the other change.
    sor.change_after_get.store(true, Ordering::SeqCst);
    let (refused, body) = send(&client, leased(&p, "/items/1", 2, 2)).await;
    assert_eq!(refused.status, StatusCode::CONFLICT, "{body:?}");
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_STALE_PRE_IMAGE_UPSTREAM");
    assert_eq!(refused.headers["agent-fence-token"], "2");
    let receipt = receipt_of(&refused.headers);
    assert_eq!(receipt["kind"], "rejection");
    assert_eq!(receipt["code"], "ERR_STALE_PRE_IMAGE_UPSTREAM");
    assert_eq!(receipt["upstream_status"], 412);
    assert_eq!(receipt["cas_fence_epoch"], 2);
    assert_eq!(sor.puts().last().unwrap().1.as_deref(), Some("\"v2\""));
    assert_eq!(
        sor.version.load(Ordering::SeqCst),
        3,
        "the other change is kept"
    );
    let events = drift_events(&p);
    let event = events
        .iter()
        .find(|e| e["code"] == "ERR_STALE_PRE_IMAGE_UPSTREAM")
        .expect("a drift event");
    assert_eq!(event["category"], "fence");
    assert_eq!(event["observedIdentifier"], "\"v2\"");

    // The same epoch again is stale (it was advanced); the next one, leased from what is
    // there now, goes through.
    let (stale, _) = send(&client, leased(&p, "/items/1", 2, 3)).await;
    assert_eq!(stale.status, StatusCode::CONFLICT);
    let (next, _) = send(&client, leased(&p, "/items/1", 3, 3)).await;
    assert_eq!(next.status, StatusCode::OK);
    assert_eq!(sor.version.load(Ordering::SeqCst), 4);

    // An agent's own If-Match must be the ETag the sidecar read: another is refused before
    // anything is sent, and the epoch does not move (the same epoch then goes through).
    let puts_before = sor.puts().len();
    let mut req = leased(&p, "/items/1", 4, 4);
    req.headers_mut()
        .insert("if-match", "\"v1\"".parse().unwrap());
    let (theirs, body) = send(&client, req).await;
    assert_eq!(theirs.status, StatusCode::CONFLICT);
    let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem["code"], "ERR_STALE_PRE_IMAGE_UPSTREAM");
    assert_eq!(
        receipt_of(&theirs.headers)["code"],
        "ERR_STALE_PRE_IMAGE_UPSTREAM"
    );
    assert_eq!(sor.puts().len(), puts_before, "the SoR received nothing");
    let mut req = leased(&p, "/items/1", 4, 4);
    req.headers_mut()
        .insert("if-match", "\"v4\"".parse().unwrap());
    let (same, _) = send(&client, req).await;
    assert_eq!(same.status, StatusCode::OK);
    assert_eq!(sor.puts().last().unwrap().1.as_deref(), Some("\"v4\""));

    // A weak ETag never matches If-Match (strong comparison): the write goes without one,
    // guarded by check 12 alone.
    let (weak, _) = send(&client, leased(&p, "/weak/1", 1, 5)).await;
    assert_eq!(weak.status, StatusCode::OK);
    assert_eq!(sor.puts().last().unwrap(), &("/weak/1".to_owned(), None));
}

#[test]
fn if_match_needs_the_pre_image_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let text = write_config_for(
        "http://127.0.0.1:9",
        dir.path(),
        "if_match = true\n",
        "[ptcl]\npre_image = \"off\"\n",
    );
    std::fs::write(dir.path().join("palisade.toml"), text).unwrap();
    let out = std::process::Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(dir.path().join("palisade.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("upstream.if_match"), "{err}");
}
