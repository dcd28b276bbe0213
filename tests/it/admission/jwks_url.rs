//! Issuers' keys from a JWKS URL (SPEC §13, issue 58): a local HTTPS JWKS server (a test CA
//! the sidecar trusts through `SSL_CERT_FILE`) that rotates its key. A token signed with the
//! new key is admitted on its first call, after the `kid` miss fetches the document again;
//! with the server down, the cached keys keep admitting; a flood of tokens naming unknown
//! `kid`s fetches at most once per `jwks_refresh.min`.

use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::*;

/// A JWKS server: serves `doc` with `Cache-Control: max-age=3600`, counts its fetches.
struct JwksServer {
    port: u16,
    doc: Arc<Mutex<Vec<u8>>>,
    fetches: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl JwksServer {
    async fn start(pki: &Pki, doc: Vec<u8>) -> JwksServer {
        let acceptor = tls_acceptor(&pki.issue("localhost", true));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let doc = Arc::new(Mutex::new(doc));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (d, f) = (doc.clone(), fetches.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, d, f) = (acceptor.clone(), d.clone(), f.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let svc = service_fn(move |_req| {
                        f.fetch_add(1, Ordering::SeqCst);
                        let body = d.lock().unwrap().clone();
                        async move {
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .header("content-type", "application/jwk-set+json")
                                    .header("cache-control", "public, max-age=3600")
                                    // No connection is kept: "down" means down.
                                    .header("connection", "close")
                                    .body(Full::new(Bytes::from(body)))
                                    .unwrap(),
                            )
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        JwksServer {
            port,
            doc,
            fetches,
            task,
        }
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

/// `token` with its header's `kid` replaced (its signature no longer holds, which is judged
/// only after the key is looked up).
fn with_kid(token: &str, kid: &str) -> String {
    let (_, rest) = token.split_once('.').unwrap();
    let header = json!({"alg": "EdDSA", "typ": "at+jwt", "kid": kid});
    format!(
        "{}.{rest}",
        URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header).unwrap())
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_follow_a_jwks_url_through_rotation_outage_and_unknown_kid_floods() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (b, put, get) = bundle(bundle_dir.path(), None);
    let keys_dir = tempfile::tempdir().unwrap();
    let digests = json!({PUT_OP: digest_of(&put), GET_OP: digest_of(&get)});
    let tokens = mint(keys_dir.path(), &b.binding_id, &digests);
    let t = |name: &str| bearer(&tokens[name]);
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let ca = pki_dir.path().join("jwks-ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let jwks = std::fs::read(keys_dir.path().join("jwks.json")).unwrap();
    let server = JwksServer::start(&pki, jwks).await;

    let admission = format!(
        "[admission]\nmode = \"required\"\nresource = \"{BASE}\"\n\
         jwks = [\"https://localhost:{}/.well-known/jwks.json\"]\nissuers = [\"{ISSUER}\"]\n\
         jwks_refresh = {{ min = \"2s\", max = \"1h\" }}\n",
        server.port
    );
    let upstream = Upstream::start().await;
    let p = start_trusting(&upstream, &b, &admission, &ca);

    // The keys of the URL admit: fetched at start (or on the first call's miss).
    let a = call(&p, "GET", "/items/1", &[&t("eddsa")], None, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    let a = call(&p, "GET", "/items/1", &[&t("unknown_kid")], None, "").await;
    assert_eq!(
        a.status,
        StatusCode::UNAUTHORIZED,
        "a key the issuer does not publish"
    );

    // The issuer rotates: its document now has `kid-new`. Once `min` has passed since the
    // last fetch, the first call with the new kid is admitted: its miss fetches again.
    let rotated = std::fs::read(keys_dir.path().join("jwks-rotated.json")).unwrap();
    *server.doc.lock().unwrap() = rotated;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let before = server.fetches();
    let a = call(&p, "GET", "/items/1", &[&t("unknown_kid")], None, "").await;
    assert_eq!(
        a.status,
        StatusCode::OK,
        "the rotated key after its kid's miss: {}",
        a.doc
    );
    assert_eq!(server.fetches(), before + 1);

    // A flood of unknown kids right after that fetch: at most one fetch per `min` (2 s)
    // counted from it, whatever their number (none, unless the flood outlasts the window).
    let fetched_at = tokio::time::Instant::now();
    let before = server.fetches();
    let flood: Vec<_> = (0..40)
        .map(|i| {
            let token = bearer(&with_kid(&tokens["eddsa"], &format!("kid-flood-{i}")));
            let url = p.url("/items/1");
            tokio::spawn(async move {
                let req = Request::get(url)
                    .header("authorization", token)
                    .body(full(""))
                    .unwrap();
                send(&http1_client(), req).await.0.status
            })
        })
        .collect();
    for f in flood {
        assert_eq!(f.await.unwrap(), StatusCode::UNAUTHORIZED);
    }
    let fetched = server.fetches() - before;
    let windows = (fetched_at.elapsed().as_millis() / 2000) as usize;
    assert!(
        fetched <= windows,
        "{fetched} fetches for 40 unknown kids in {:?} after a fetch",
        fetched_at.elapsed()
    );

    // The issuer is down: the keys fetched last keep admitting, old and rotated alike. Once
    // `min` has passed, an unknown kid tries the issuer, fails, and changes nothing.
    server.task.abort();
    let _ = server.task.await;
    tokio::time::sleep(Duration::from_millis(2100).saturating_sub(fetched_at.elapsed())).await;
    for name in ["eddsa", "unknown_kid"] {
        let a = call(&p, "GET", "/items/1", &[&t(name)], None, "").await;
        assert_eq!(
            a.status,
            StatusCode::OK,
            "{name} with the issuer down: {}",
            a.doc
        );
    }
    // A token naming a kid nobody has: refused, and the failed fetch is logged, not fatal.
    let a = call(
        &p,
        "GET",
        "/items/1",
        &[&bearer(&with_kid(&tokens["eddsa"], "kid-none"))],
        None,
        "",
    )
    .await;
    assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    assert!(
        p.logs().contains("admission JWKS URL not fetched"),
        "{}",
        p.logs()
    );
    drop(upstream);
}

/// A JWKS URL must be https: the keys decide who is admitted.
#[test]
fn a_jwks_url_that_is_not_https_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("palisade.toml");
    std::fs::write(
        &cfg,
        format!(
            "[upstream]\nurl = \"http://127.0.0.1:9\"\n[admission]\nmode = \"required\"\n\
             resource = \"{BASE}\"\njwks = [\"http://as.example.com/jwks\"]\nissuers = [\"{ISSUER}\"]\n\
             jwks_refresh = {{ min = \"0s\" }}\n"
        ),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("a JWKS URL must be https://"), "{err}");
    assert!(err.contains("admission.jwks_refresh"), "{err}");
}
