//! Upstream connections: one per downstream connection, never a second send of a write,
//! h2 streams one at a time, deadlines.

use super::*;

/// One HTTP/1.1 connection to the sidecar, sending requests one at a time.
struct OneConn(hyper::client::conn::http1::SendRequest<BoxBody>);

impl OneConn {
    async fn open(addr: std::net::SocketAddr) -> OneConn {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .unwrap();
        tokio::spawn(conn);
        OneConn(sender)
    }

    async fn send(&mut self, method: Method, path: &str, body: &[u8]) -> (StatusCode, Vec<u8>) {
        use http_body_util::BodyExt as _;
        self.0.ready().await.unwrap();
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "sor.test")
            .body(full(body.to_vec()))
            .unwrap();
        let resp = self.0.send_request(req).await.unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (status, bytes.to_vec())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_downstream_connection_keeps_an_upstream_connection_of_its_own() {
    // The upstream closes a connection left idle for 300 ms, as nginx's keepalive_timeout.
    let upstream = Upstream::start_closing_idle(Duration::from_millis(300)).await;
    let p = Palisade::start(&config(&upstream, ""));
    let mut a = OneConn::open(p.data).await;
    for i in 0..5u64 {
        let body = pattern(i, 1000 + i as usize);
        let (status, got) = a.send(Method::POST, &format!("/echo/{i}"), &body).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got, body, "request {i}: answer byte-exact");
    }
    assert_eq!(
        upstream.connections(),
        1,
        "five requests, one upstream connection"
    );
    let mut b = OneConn::open(p.data).await;
    assert_eq!(b.send(Method::GET, "/x", b"").await.0, StatusCode::OK);
    assert_eq!(
        upstream.connections(),
        2,
        "another downstream connection, another upstream one"
    );

    // The upstream closes both while they are idle: the next request opens a new one and
    // reaches the upstream exactly once.
    wait::until(
        "the upstream closed both idle connections",
        Duration::from_secs(5),
        || upstream.ended() == 2,
    )
    .await;
    let before = upstream.requests().len();
    let (status, got) = a.send(Method::PUT, "/echo/after-idle", b"once").await;
    assert_eq!((status, got.as_slice()), (StatusCode::OK, &b"once"[..]));
    let seen = upstream.requests();
    assert_eq!(seen.len(), before + 1, "sent exactly once");
    assert_eq!(seen[before].path_and_query, "/echo/after-idle");
    assert_eq!(upstream.connections(), 3);

    // An answer that closes its connection: the next request gets a new one.
    assert_eq!(a.send(Method::GET, "/close", b"").await.0, StatusCode::OK);
    let (status, got) = a.send(Method::POST, "/echo/next", b"next").await;
    assert_eq!((status, got.as_slice()), (StatusCode::OK, &b"next"[..]));
    assert_eq!(upstream.connections(), 4);
    assert_eq!(upstream.requests().len(), before + 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_upstream_connection_dies_mid_request_is_not_sent_again() {
    // An upstream that reads a request head, then drops the connection without answering:
    // the request may have been acted on, so it must not be retried on a new connection.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let heads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = heads.clone();
    tokio::spawn(async move {
        loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let counted = counted.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                drop(s);
            });
        }
    });
    let text = format!(
        "[upstream]\nurl = \"http://{addr}\"\nconnect_timeout = \"1s\"\ntimeout = \"2s\"\n\
         [ptcl]\nwrites = []\n"
    );
    let p = Palisade::start(&text);
    let mut c = OneConn::open(p.data).await;
    let (status, body) = c.send(Method::POST, "/orders", b"{}").await;
    assert_eq!(
        status,
        StatusCode::BAD_GATEWAY,
        "{}",
        String::from_utf8_lossy(&body)
    );
    // A second sending would come before the 502 (the sidecar answers once every attempt has
    // failed, and an attempt fails only after the upstream has counted its head): no wait.
    assert_eq!(
        heads.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the request reached the upstream once and was not sent again"
    );
    // The downstream connection is still usable, and its next request gets a new upstream
    // connection.
    let (status, _) = c.send(Method::GET, "/x", b"").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY);
    wait::until(
        "a new upstream connection has the request",
        Duration::from_secs(2),
        || heads.load(std::sync::atomic::Ordering::SeqCst) == 2,
    )
    .await;
}

/// One h2c connection to the sidecar (prior knowledge), its streams sent concurrently.
async fn h2_conn(addr: std::net::SocketAddr) -> hyper::client::conn::http2::SendRequest<BoxBody> {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    sender
}

fn h2_request(method: Method, path: &str, body: Vec<u8>) -> Request<BoxBody> {
    Request::builder()
        .method(method)
        .uri(format!("http://sor.test{path}"))
        .body(full(body))
        .unwrap()
}

/// Sends `body` to `/echo/…` on one stream and reads the whole answer.
async fn h2_echo(
    h2: &mut hyper::client::conn::http2::SendRequest<BoxBody>,
    method: Method,
    path: &str,
    body: Vec<u8>,
) -> (StatusCode, bytes::Bytes) {
    use http_body_util::BodyExt as _;
    let resp = h2
        .send_request(h2_request(method, path, body))
        .await
        .unwrap();
    let status = resp.status();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_connection_uses_its_upstream_connection_one_stream_at_a_time() {
    use http_body_util::BodyExt as _;
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, ""));
    let mut h2 = h2_conn(p.data).await;

    // Streams one after another: one upstream connection, as an HTTP/1 connection has.
    for i in 0..5u64 {
        let body = pattern(i, 500);
        let (status, got) =
            h2_echo(&mut h2, Method::POST, &format!("/echo/{i}"), body.clone()).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(got.as_ref(), body.as_slice(), "stream {i}: byte-exact");
    }
    assert_eq!(
        upstream.connections(),
        1,
        "sequential streams, one connection"
    );

    // An answer whose body the client has not read holds that upstream connection: another
    // stream goes through the pool at once rather than waiting for it.
    let big = pattern(9, 2 << 20);
    let held = h2
        .send_request(h2_request(Method::POST, "/echo/held", big.clone()))
        .await
        .unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let started = Instant::now();
    let resp = h2
        .send_request(h2_request(Method::GET, "/x", Vec::new()))
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "no stream waits on another's body: {:?}",
        started.elapsed()
    );
    let got = held.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        sha256_hex(&got),
        sha256_hex(&big),
        "the held body arrives whole"
    );

    // Concurrent streams: a slow one holds the slot, the others are not queued behind it.
    let slow = {
        let mut h2 = h2.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let resp = h2
                .send_request(h2_request(Method::GET, "/slow/800", Vec::new()))
                .await
                .unwrap();
            (resp.status(), started.elapsed())
        })
    };
    wait::until(
        "the slow stream reached the upstream",
        Duration::from_secs(5),
        || {
            upstream
                .requests()
                .iter()
                .any(|r| r.path_and_query == "/slow/800")
        },
    )
    .await;
    let fast: Vec<_> = (0..4u64)
        .map(|i| {
            let mut h2 = h2.clone();
            tokio::spawn(async move {
                let started = Instant::now();
                let body = pattern(100 + i, 300);
                let path = format!("/echo/c{i}");
                let (status, got) = h2_echo(&mut h2, Method::PUT, &path, body.clone()).await;
                assert_eq!(got.as_ref(), body.as_slice(), "concurrent stream {i}");
                (status, started.elapsed())
            })
        })
        .collect();
    for f in fast {
        let (status, took) = f.await.unwrap();
        assert_eq!(status, StatusCode::OK);
        assert!(
            took < Duration::from_millis(500),
            "not behind the slow stream: {took:?}"
        );
    }
    let (status, took) = slow.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    assert!(took >= Duration::from_millis(800));
    // Each request reached the upstream exactly once.
    let seen = upstream.requests();
    for path in ["/echo/held", "/x", "/slow/800", "/echo/c0", "/echo/c3"] {
        assert_eq!(
            seen.iter().filter(|s| s.path_and_query == path).count(),
            1,
            "{path} sent once"
        );
    }
}

/// The upstream timeout of a connection's own upstream connection is one timer per connection,
/// moved only when it would fire too early or too late (issue 19): a request that hangs after
/// others on the same connection is cut off no earlier than `upstream.timeout` after it was
/// sent, and at most an eighth of it later, whether the timer was armed by an earlier request
/// or moved for this one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_s_upstream_deadline_is_never_early_and_at_most_an_eighth_late() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, "").replace("timeout = \"2s\"", "timeout = \"1s\""));
    // 0 ms: the timer armed by the quick request still fits the hanging one; 400 ms: it would
    // fire 400 ms early and is moved.
    for gap in [0u64, 400] {
        let mut c = OneConn::open(p.data).await;
        let (status, _) = c.send(Method::GET, "/echo/quick", b"").await;
        assert_eq!(status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(gap)).await;
        let start = Instant::now();
        let (status, body) = c.send(Method::GET, "/hang", b"").await;
        let took = start.elapsed();
        assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "gap {gap} ms");
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["code"], "ERR_UPSTREAM_TIMEOUT");
        assert!(
            took >= Duration::from_millis(1000) && took < Duration::from_millis(1125 + 300),
            "gap {gap} ms: cut off after {took:?}"
        );
        // The connection carries on.
        let (status, _) = c.send(Method::GET, "/echo/after", b"").await;
        assert_eq!(status, StatusCode::OK, "gap {gap} ms");
    }
}
