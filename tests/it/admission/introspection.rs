//! Opaque tokens asked about at a local RFC 7662 endpoint (SPEC §13, issue 58): active
//! (once, then cached), inactive, expired, for another resource, and with the endpoint down.
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::*;

/// An RFC 7662 endpoint: answers for the tokens in `answers` (anything else is inactive),
/// only to the client `palisade` with the secret `s3cret!` (form-encoded, then Basic), and
/// counts the calls per token.
struct Introspector {
    port: u16,
    calls: Arc<Mutex<HashMap<String, usize>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Introspector {
    async fn start(pki: &Pki, answers: HashMap<String, Value>) -> Introspector {
        let acceptor = tls_acceptor(&pki.issue("localhost", true));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let calls: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let answers = Arc::new(answers);
        let c = calls.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, c, answers) = (acceptor.clone(), c.clone(), answers.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (c, answers) = (c.clone(), answers.clone());
                        async move {
                            let want = format!(
                                "Basic {}",
                                base64::engine::general_purpose::STANDARD
                                    .encode("palisade:s3cret%21")
                            );
                            let authorized = req
                                .headers()
                                .get("authorization")
                                .is_some_and(|v| v.as_bytes() == want.as_bytes());
                            let form = req.into_body().collect().await.unwrap().to_bytes();
                            let form = String::from_utf8_lossy(&form).into_owned();
                            // As an authorization server reads a form: each value decoded.
                            let token = form
                                .split('&')
                                .find_map(|p| p.strip_prefix("token="))
                                .map(|v| {
                                    percent_encoding::percent_decode_str(&v.replace('+', " "))
                                        .decode_utf8_lossy()
                                        .into_owned()
                                })
                                .unwrap_or_default();
                            *c.lock().unwrap().entry(token.clone()).or_default() += 1;
                            let (status, body) = if !authorized {
                                (401, json!({"error": "invalid_client"}))
                            } else {
                                let inactive = json!({"active": false});
                                (200, answers.get(&token).cloned().unwrap_or(inactive))
                            };
                            Ok::<_, Infallible>(
                                http::Response::builder()
                                    .status(status)
                                    .header("content-type", "application/json")
                                    .header("connection", "close")
                                    .body(Full::new(Bytes::from(body.to_string())))
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
        Introspector { port, calls, task }
    }

    fn calls(&self, token: &str) -> usize {
        self.calls.lock().unwrap().get(token).copied().unwrap_or(0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opaque_tokens_are_introspected_once_and_held_to_their_claims() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (b, put, get) = bundle(bundle_dir.path(), None);
    let keys_dir = tempfile::tempdir().unwrap();
    let digests = json!({PUT_OP: digest_of(&put), GET_OP: digest_of(&get)});
    let tokens = mint(keys_dir.path(), &b.binding_id, &digests);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let reads = json!([{"type": "rich_binding", "bindingId": b.binding_id,
        "operations": [{"operation": GET_OP, "contractDigest": digest_of(&get)}]}]);
    let claims = |exp: u64| {
        json!({"active": true, "iss": ISSUER, "aud": BASE, "exp": exp,
        "sub": "agent-9", "client_id": "agent-app", "authorization_details": reads})
    };
    let answers: HashMap<String, Value> = [
        ("opaque-good".to_owned(), claims(now + 600)),
        ("opaque-expired".to_owned(), claims(now - 600)),
        (
            "opaque-elsewhere".to_owned(),
            json!({"active": true, "iss": ISSUER,
            "aud": "https://other.example.com", "exp": now + 600, "authorization_details": reads}),
        ),
    ]
    .into_iter()
    .collect();
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    let ca = pki_dir.path().join("as-ca.pem");
    std::fs::write(&ca, &pki.ca_pem).unwrap();
    let secret = pki_dir.path().join("introspection-secret");
    std::fs::write(&secret, "s3cret!\n").unwrap();
    let endpoint = Introspector::start(&pki, answers).await;
    let admission = format!(
        "{}introspection = {{ url = \"https://localhost:{}/introspect\", client_id = \"palisade\", \
         client_secret_file = \"{}\" }}\n",
        admission_toml("required", keys_dir.path()),
        endpoint.port,
        secret.display()
    );
    let upstream = Upstream::start().await;
    let p = start_trusting(&upstream, &b, &admission, &ca);
    let reached = || upstream.requests().len();

    // Active, granting the read: admitted, and asked about once however often it is used.
    for _ in 0..3 {
        let a = call(&p, "GET", "/items/1", &[&bearer("opaque-good")], None, "").await;
        assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    }
    assert_eq!(endpoint.calls("opaque-good"), 1, "cached until its exp");
    // Its grant holds as a JWT's would: the write it does not name is 403.
    let before = reached();
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, "/items/1", 1, |_| {});
    let a = call(
        &p,
        "PUT",
        "/items/1",
        &[&bearer("opaque-good")],
        Some(&lease),
        r#"{"qty":1}"#,
    )
    .await;
    assert_refused(
        &a,
        StatusCode::FORBIDDEN,
        "ERR_NOT_ADMITTED",
        "an opaque token's grant",
    );
    // Inactive, expired, for another resource: 401, and the upstream sees none of them.
    for (token, why) in [
        ("opaque-unknown", "not active"),
        ("opaque-expired", "expired"),
        ("opaque-elsewhere", "aud"),
    ] {
        // Sent twice: the refusal is remembered, the issuer asked once.
        for _ in 0..2 {
            let a = call(&p, "GET", "/items/1", &[&bearer(token)], None, "").await;
            assert_refused(&a, StatusCode::UNAUTHORIZED, "ERR_TOKEN_INVALID", token);
            assert!(
                a.doc["detail"].as_str().unwrap_or("").contains(why),
                "{token}: {}",
                a.doc
            );
        }
        assert_eq!(endpoint.calls(token), 1, "{token}");
    }
    assert_eq!(reached(), before, "a refused call reached the upstream");
    // Each refusal left its drift event, and no opaque token is in any of them.
    let events = drift_events(&p);
    let invalid = events
        .iter()
        .filter(|e| e["code"] == "ERR_TOKEN_INVALID")
        .count();
    assert!(invalid >= 6, "{events:?}");
    assert!(
        events.iter().any(|e| e["code"] == "ERR_NOT_ADMITTED"),
        "{events:?}"
    );
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains("opaque-"),
        "a token in a drift event: {text}"
    );
    // JWTs are still verified locally, never introspected.
    let a = call(
        &p,
        "GET",
        "/items/1",
        &[&bearer_of(&tokens, "eddsa")],
        None,
        "",
    )
    .await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    assert_eq!(endpoint.calls.lock().unwrap().len(), 4);

    // The endpoint down: a new opaque token is refused (never admitted for want of an
    // answer); the one already admitted stays admitted until its exp.
    endpoint.task.abort();
    let _ = endpoint.task.await;
    let a = call(&p, "GET", "/items/1", &[&bearer("opaque-new")], None, "").await;
    assert_refused(
        &a,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "no answer",
    );
    assert!(
        a.doc["detail"]
            .as_str()
            .unwrap_or("")
            .contains("did not answer"),
        "{}",
        a.doc
    );
    let a = call(&p, "GET", "/items/1", &[&bearer("opaque-good")], None, "").await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
}

fn bearer_of(tokens: &HashMap<String, String>, name: &str) -> String {
    bearer(&tokens[name])
}
