//! The data plane against a real upstream, through the real `palisade` binary (SPEC §3, §9).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::time::Duration;

use http::{Method, Request, StatusCode};
use support::*;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::time::Instant;

/// A pass-through config (`ptcl.writes = []`: no request is buffered or enforced) unless
/// `extra` has its own `[ptcl]`.
fn config(upstream: &Upstream, extra: &str) -> String {
    let ptcl = if extra.contains("[ptcl]") {
        ""
    } else {
        "[ptcl]\nwrites = []\n"
    };
    format!(
        "[upstream]\nurl = \"{}\"\nconnect_timeout = \"1s\"\ntimeout = \"2s\"\n\
         [rich]\nunbound_writes = \"allow\"\n{ptcl}{extra}",
        upstream.url()
    )
}

fn body_for(method: &Method) -> Vec<u8> {
    // Binary, not valid UTF-8, with every byte value: byte-exactness is the point.
    let mut b = pattern(method.as_str().len() as u64, 200_000);
    b.extend_from_slice(&[0, 0xff, 0xfe, b'\r', b'\n']);
    b
}

async fn assert_methods_pass_through(
    mut send: impl AsyncFnMut(Request<BoxBody>) -> (http::response::Parts, bytes::Bytes),
    upstream: &Upstream,
    want_version: Option<http::Version>,
) {
    for method in [Method::GET, Method::POST, Method::PUT, Method::DELETE] {
        let before = upstream.requests().len();
        let body = if method == Method::GET {
            Vec::new()
        } else {
            body_for(&method)
        };
        let req = Request::builder()
            .method(method.clone())
            .uri("/echo/items/7?x=1&y=%2F")
            .header("content-type", "application/octet-stream")
            .header("x-custom", "kept")
            .body(full(body.clone()))
            .unwrap();
        let (parts, got) = send(req).await;
        assert_eq!(parts.status, StatusCode::OK, "{method}");
        if let Some(v) = want_version {
            assert_eq!(parts.version, v, "{method}");
        }
        assert_eq!(
            got.as_ref(),
            body.as_slice(),
            "{method}: response body byte-exact"
        );
        assert_eq!(parts.headers["x-upstream-method"], method.as_str());
        assert!(
            !parts.headers.contains_key("x-hop"),
            "hop-by-hop response header removed"
        );
        let seen = upstream.requests();
        assert_eq!(
            seen.len(),
            before + 1,
            "{method}: exactly one upstream request"
        );
        let s = &seen[before];
        assert_eq!(s.method, method.as_str());
        assert_eq!(s.path_and_query, "/echo/items/7?x=1&y=%2F");
        assert_eq!(
            s.body_sha256,
            sha256_hex(&body),
            "{method}: request body byte-exact"
        );
        assert_eq!(s.headers["x-custom"], "kept");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn methods_pass_through_byte_exact_over_http1_and_h2c() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, ""));
    let base = p.url("");
    let h1 = http1_client();
    assert_methods_pass_through(
        async |mut req| {
            *req.uri_mut() = format!("{base}{}", req.uri()).parse().unwrap();
            send(&h1, req).await
        },
        &upstream,
        Some(http::Version::HTTP_11),
    )
    .await;
    let h2 = h2c_client();
    assert_methods_pass_through(
        async |mut req| {
            *req.uri_mut() = format!("{base}{}", req.uri()).parse().unwrap();
            send(&h2, req).await
        },
        &upstream,
        Some(http::Version::HTTP_2),
    )
    .await;
    // The upstream hop is HTTP/1.1 whatever the downstream spoke.
    assert!(upstream
        .requests()
        .iter()
        .all(|s| s.version == http::Version::HTTP_11));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_negotiates_h2_by_alpn_and_passes_through() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    pki.write_server("palisade");
    let tls = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        pki.path("server.crt").display(),
        pki.path("server.key").display()
    );
    let p = Palisade::start_in(dir, &config(&upstream, &tls));

    let mut conn = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, None))
        .await
        .unwrap();
    assert_eq!(conn.alpn.as_deref(), Some(&b"h2"[..]), "ALPN negotiates h2");
    assert_methods_pass_through(
        async |req| conn.send(req).await.unwrap(),
        &upstream,
        Some(http::Version::HTTP_2),
    )
    .await;

    // A client offering only http/1.1 gets HTTP/1.1 over TLS.
    let mut cfg = tls_client_config(&pki.ca_pem, None);
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    let mut conn = TlsConn::connect(p.data, cfg).await.unwrap();
    assert_eq!(conn.alpn.as_deref(), Some(&b"http/1.1"[..]));
    assert_methods_pass_through(
        async |req| {
            conn.send(req)
                .await
                .unwrap_or_else(|e| panic!("{e}\n{}", p.logs()))
        },
        &upstream,
        Some(http::Version::HTTP_11),
    )
    .await;
    // Forwarded says the downstream hop was https.
    let last = upstream.requests().pop().unwrap();
    assert!(last.headers["forwarded"]
        .to_str()
        .unwrap()
        .contains("proto=https"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_clients_without_a_certificate_from_the_ca() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    pki.write_server("palisade");
    let tls = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
        pki.path("server.crt").display(),
        pki.path("server.key").display(),
        pki.path("ca.pem").display()
    );
    let p = Palisade::start_in(dir, &config(&upstream, &tls));

    // No certificate: the handshake (or the first read after it, in TLS 1.3) fails and no
    // request reaches the upstream.
    let anon = match TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, None)).await {
        Err(_) => true,
        Ok(mut c) => c
            .send(Request::get("/echo").body(full("")).unwrap())
            .await
            .is_err(),
    };
    assert!(anon, "a client without a certificate is refused");

    // A certificate from another CA is refused too.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Pki::new(other_dir.path());
    let stranger = other.issue("stranger", false);
    let refused =
        match TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&stranger))).await {
            Err(_) => true,
            Ok(mut c) => c
                .send(Request::get("/echo").body(full("")).unwrap())
                .await
                .is_err(),
        };
    assert!(refused, "a certificate from another CA is refused");
    assert!(
        upstream.requests().is_empty(),
        "nothing reached the upstream"
    );

    let client_id = pki.issue("agent-1", false);
    let mut c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, Some(&client_id)))
        .await
        .unwrap();
    let (parts, body) = c
        .send(Request::get("/echo").body(full("hi")).unwrap())
        .await
        .unwrap();
    assert_eq!(parts.status, StatusCode::OK);
    assert_eq!(&body[..], b"hi");
    assert_eq!(upstream.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_certificate_files_are_served_without_a_restart() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let first = pki.write_server("first");
    let tls = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\ntls = {{ cert = \"{}\", key = \"{}\" }}\n",
        pki.path("server.crt").display(),
        pki.path("server.key").display()
    );
    let p = Palisade::start_in(dir, &config(&upstream, &tls));
    let der_of = |pem: &str| {
        rustls_pemfile::certs(&mut pem.as_bytes())
            .next()
            .unwrap()
            .unwrap()
            .to_vec()
    };
    let c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, None))
        .await
        .unwrap();
    assert_eq!(c.peer_cert_der, der_of(&first.cert_pem));

    // Rotate as cert-manager does: new files written in place.
    let second = pki.write_server("second");
    wait::until_async(
        "the new certificate is served",
        Duration::from_secs(10),
        || async {
            let c = TlsConn::connect(p.data, tls_client_config(&pki.ca_pem, None))
                .await
                .unwrap();
            c.peer_cert_der == der_of(&second.cert_pem)
        },
    )
    .await;
    // The log line is written as the new certificate goes in; the test reads the sidecar's
    // output on a thread of its own, which may be a moment behind.
    wait::until("the reload is logged", Duration::from_secs(5), || {
        p.logs().contains("listener certificate reloaded")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_header_sender_is_cut_off_after_header_timeout() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, "[limits]\nheader_timeout = \"2s\"\n"));
    let mut s = tokio::net::TcpStream::connect(p.data).await.unwrap();
    let start = Instant::now();
    let head = b"GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
    let mut closed_at = None;
    for b in head {
        if s.write_all(&[*b]).await.is_err() {
            closed_at = Some(start.elapsed());
            break;
        }
        // Check whether the server hung up (read returns 0 or a 408 then EOF).
        let mut buf = [0u8; 256];
        match tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {
                closed_at = Some(start.elapsed());
                break;
            }
            Err(_) => {} // still open: one byte per second
        }
    }
    let closed_at = closed_at.expect("connection was never cut off");
    assert!(
        closed_at >= Duration::from_millis(1500),
        "cut off too early: {closed_at:?}"
    );
    assert!(
        closed_at < Duration::from_secs(5),
        "cut off too late: {closed_at:?}"
    );
    assert!(upstream.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_max_body_on_a_buffered_route_gets_413_and_reaches_nothing() {
    let upstream = Upstream::start().await;
    // Writes are enforced (buffered) here: the sidecar needs its key and store.
    let dir = tempfile::tempdir().unwrap();
    let key = palisade_policy::keys::KeyPair::from_seed([1; 32]);
    std::fs::write(dir.path().join("signing.pem"), key.to_pkcs8_pem()).unwrap();
    let extra = format!(
        "[limits]\nmax_body = \"64KiB\"\n[ptcl]\npre_image = \"off\"\n\
         [signing]\nkey = \"{0}/signing.pem\"\n[store]\npath = \"{0}/state.redb\"\n",
        dir.path().display()
    );
    let p = Palisade::start_in(dir, &config(&upstream, &extra));
    let client = http1_client();
    // With Content-Length: refused before the body is read.
    let req = Request::put(p.url("/echo/1"))
        .header("content-type", "application/json")
        .body(full(vec![b'x'; 65 * 1024]))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_BODY_TOO_LARGE");
    assert_eq!(doc["status"], 413);
    assert_eq!(doc["type"], "urn:palisade:error:body-too-large");
    // A refused write leaves its rejection receipt like any other (SPEC §5.5).
    assert_eq!(doc["receipt"]["receipt"]["kind"], "rejection", "{doc}");
    assert_eq!(doc["receipt"]["receipt"]["code"], "ERR_BODY_TOO_LARGE");
    assert_eq!(doc["receipt"]["receipt"]["method"], "PUT");
    assert!(parts.headers.contains_key("agent-commit-receipt"));

    // Chunked, no length: refused once the limit is passed.
    let chunks = futures_util::stream::iter((0..20).map(|_| {
        Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
            bytes::Bytes::from(vec![b'y'; 8192]),
        ))
    }));
    let req = Request::post(p.url("/echo/2"))
        .body(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(chunks),
        ))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::PAYLOAD_TOO_LARGE);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["receipt"]["receipt"]["code"], "ERR_BODY_TOO_LARGE");
    // Two receipts, the log's indices 0 and 1.
    assert_eq!(doc["receipt"]["index"], 1, "{doc}");
    assert!(upstream.requests().is_empty(), "the upstream saw nothing");

    // At the limit the body is read, and the next stage (the lease) decides.
    let req = Request::put(p.url("/echo/3"))
        .body(full(vec![b'z'; 64 * 1024]))
        .unwrap();
    let (parts, body) = send(&client, req).await;
    assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_LEASE_REQUIRED");
    assert!(upstream.requests().is_empty(), "the upstream saw nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_down_is_502_and_silent_upstream_is_504() {
    // A port with nothing listening: bind, note, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let text = format!(
        "[upstream]\nurl = \"http://{dead}\"\nconnect_timeout = \"1s\"\ntimeout = \"1s\"\n\
         [ptcl]\nwrites = []\n"
    );
    let p = Palisade::start(&text);
    let (parts, body) = send(
        &http1_client(),
        Request::get(p.url("/x")).body(full("")).unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY);
    assert_eq!(parts.headers["content-type"], "application/problem+json");
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_UPSTREAM_UNAVAILABLE");
    assert_eq!(doc["status"], 502);
    assert!(doc["trace_id"].as_str().unwrap().len() == 32);
    drop(p);

    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, "").replace("timeout = \"2s\"", "timeout = \"1s\""));
    let start = Instant::now();
    let (parts, body) = send(
        &http1_client(),
        Request::get(p.url("/hang")).body(full("")).unwrap(),
    )
    .await;
    let took = start.elapsed();
    assert_eq!(parts.status, StatusCode::GATEWAY_TIMEOUT);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["code"], "ERR_UPSTREAM_TIMEOUT");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(4),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_are_rewritten_as_a_proxy_should() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, ""));
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let req = Request::get(p.url("/echo"))
        .header("host", "erp.example.com")
        .header("connection", "x-hop-req")
        .header("x-hop-req", "1")
        .header("keep-alive", "timeout=5")
        .header("traceparent", tp)
        .header("x-forwarded-for", "10.1.2.3")
        .header("agent-compensation-lease", "e30")
        .header("agent-compensation-inverse", "e30")
        .body(full(""))
        .unwrap();
    send(&http1_client(), req).await;
    let req = Request::get(p.url("/echo")).body(full("")).unwrap();
    send(&http1_client(), req).await;
    let seen = upstream.requests();
    let h = &seen[0].headers;
    assert_eq!(h["host"], "erp.example.com", "Host is kept");
    assert!(!h.contains_key("x-hop-req") && !h.contains_key("keep-alive"));
    assert_eq!(h["traceparent"], tp, "a valid traceparent is kept");
    assert_eq!(h["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(
        h["forwarded"],
        "for=127.0.0.1;proto=http;host=\"erp.example.com\""
    );
    assert!(
        !h.contains_key("agent-compensation-lease"),
        "PTCL headers stay in the sidecar"
    );
    assert!(!h.contains_key("agent-compensation-inverse"));
    let created = seen[1].headers["traceparent"].to_str().unwrap();
    assert_eq!(created.len(), 55, "a traceparent is created: {created}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_reports_health_and_metrics_and_logs_hold_no_secrets() {
    let upstream = Upstream::start().await;
    let p = Palisade::start(&config(&upstream, ""));
    assert_eq!(admin_get(p.admin, "/healthz").await.0, StatusCode::OK);
    assert_eq!(admin_get(p.admin, "/readyz").await.0, StatusCode::OK);
    let marker = "SECRET-MARKER-5b1f";
    let req = Request::put(p.url(&format!("/echo/items/1?token={marker}")))
        .header("authorization", format!("Bearer {marker}"))
        .header("cookie", format!("session={marker}"))
        .header("agent-compensation-lease", marker)
        .body(full(format!("{{\"note\":\"{marker}\"}}")))
        .unwrap();
    let (parts, _) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::OK);
    let (status, metrics) = admin_get(p.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    for name in [
        "palisade_requests_total",
        "palisade_request_duration_seconds",
        "palisade_upstream_duration_seconds",
        "palisade_inflight_requests",
    ] {
        assert!(
            metrics.contains(name),
            "{name} missing from /metrics:\n{metrics}"
        );
    }
    assert!(
        metrics
            .contains(r#"palisade_requests_total{kind="read",method="PUT",outcome="forwarded"} 1"#),
        "{metrics}"
    );
    // The access-log line is written when the body ends, a moment after the client has it.
    wait::until(
        "the access-log line is written",
        Duration::from_secs(5),
        || p.logs().contains("\"path\":\"/echo/items/1\""),
    )
    .await;
    let logs = p.logs();
    assert!(
        logs.contains("\"path\":\"/echo/items/1\""),
        "access log line present:\n{logs}"
    );
    assert!(!logs.contains(marker), "a secret reached the logs:\n{logs}");
    assert!(!metrics.contains(marker));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_and_exits_zero() {
    let upstream = Upstream::start().await;
    let mut p = Palisade::start(
        &config(
            &upstream,
            "[listen]\naddr = \"127.0.0.1:0\"\ndrain_timeout = \"10s\"\n",
        )
        .replace("timeout = \"2s\"", "timeout = \"10s\""),
    );
    let client = http1_client();
    let slow: Vec<_> = (0..3)
        .map(|_| {
            let client = client.clone();
            let url = p.url("/slow/2000");
            tokio::spawn(
                async move { send(&client, Request::get(url).body(full("")).unwrap()).await },
            )
        })
        .collect();
    // Let the slow requests reach the upstream.
    wait::until(
        "the slow requests reach the upstream",
        Duration::from_secs(5),
        || upstream.requests().len() >= 3,
    )
    .await;
    p.sigterm();
    // At once: well before the slow requests (2 s) end.
    wait::until_async(
        "readiness turns false",
        Duration::from_millis(1000),
        || async { admin_get(p.admin, "/readyz").await.0 == StatusCode::SERVICE_UNAVAILABLE },
    )
    .await;
    for task in slow {
        let (parts, body) = task.await.unwrap();
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(&body[..], b"slow done");
    }
    let status = tokio::task::spawn_blocking(move || {
        let status = p.child.wait().unwrap();
        (status, p)
    })
    .await
    .unwrap()
    .0;
    assert_eq!(status.code(), Some(0), "exit code 0 after draining");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_streams_pass_through_in_bounded_memory() {
    const SIZE: u64 = 256 << 20;
    let upstream = Upstream::start().await;
    // writes = []: nothing is buffered, both directions stream.
    let p = Palisade::start(
        &config(&upstream, "[ptcl]\nwrites = []\n")
            .replace("timeout = \"2s\"", "timeout = \"60s\""),
    );

    // Download: hash as it arrives, never hold it.
    let req = Request::get(p.url(&format!("/big/{SIZE}")))
        .body(full(""))
        .unwrap();
    let resp = http1_client().request(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let mut hasher = sha2::Sha256::new();
    let mut got = 0u64;
    use http_body_util::BodyExt as _;
    use sha2::Digest as _;
    while let Some(frame) = body.frame().await {
        if let Some(d) = frame.unwrap().data_ref() {
            hasher.update(d);
            got += d.len() as u64;
        }
    }
    assert_eq!(got, SIZE);
    let mut expected = sha2::Sha256::new();
    let mut off = 0u64;
    while off < SIZE {
        let n = (64 * 1024).min(SIZE - off) as usize;
        expected.update(pattern(off, n));
        off += n as u64;
    }
    let expected = hex::encode(expected.finalize());
    assert_eq!(
        hex::encode(hasher.finalize()),
        expected,
        "download byte-exact"
    );

    // Upload: generated as it is sent.
    let chunks = futures_util::stream::unfold(0u64, |off| async move {
        if off >= SIZE {
            return None;
        }
        let n = (64 * 1024).min(SIZE - off) as usize;
        Some((
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(hyper::body::Frame::data(
                bytes::Bytes::from(pattern(off, n)),
            )),
            off + n as u64,
        ))
    });
    let req = Request::post(p.url("/sink"))
        .body(http_body_util::BodyExt::boxed(
            http_body_util::StreamBody::new(chunks),
        ))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::OK);
    let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["len"], SIZE);
    assert_eq!(doc["sha256"], expected, "upload byte-exact");

    let rss = p.peak_rss();
    assert!(rss < 64 << 20, "peak RSS {} MiB exceeds 64 MiB", rss >> 20);
    eprintln!("peak RSS after 2 x 256 MiB: {} MiB", rss >> 20);
}

/// `log.access`: "off" writes no access line; "sampled" writes one success in N and every
/// refusal and upstream failure (issue 15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn access_logging_can_be_off_or_sampled_and_sampling_keeps_failures() {
    let upstream = Upstream::start().await;
    let lines = |p: &Palisade| {
        p.logs()
            .lines()
            .filter(|l| l.contains("palisade::access"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let get = |p: &Palisade, path: &str| Request::get(p.url(path)).body(full("")).unwrap();

    let off = Palisade::start(&config(&upstream, "[log]\naccess = \"off\"\n"));
    for _ in 0..5 {
        assert_eq!(
            send(&http1_client(), get(&off, "/a")).await.0.status,
            StatusCode::OK
        );
    }
    let mut off = off;
    off.sigterm();
    off.child.wait().unwrap();
    assert!(lines(&off).is_empty(), "{:?}", lines(&off));

    let sampled = Palisade::start(&config(
        &upstream,
        "[log]\naccess = \"sampled\"\naccess_sample_rate = 0.1\n",
    ));
    for _ in 0..50 {
        assert_eq!(
            send(&http1_client(), get(&sampled, "/ok")).await.0.status,
            StatusCode::OK
        );
    }
    // A refusal (TRACE is never forwarded) is logged whatever the sample says.
    for _ in 0..3 {
        let req = Request::builder()
            .method("TRACE")
            .uri(sampled.url("/refused"))
            .body(full(""))
            .unwrap();
        assert_eq!(
            send(&http1_client(), req).await.0.status,
            StatusCode::METHOD_NOT_ALLOWED
        );
    }
    let mut sampled = sampled;
    sampled.sigterm();
    sampled.child.wait().unwrap();
    let all = lines(&sampled);
    let ok = all.iter().filter(|l| l.contains("/ok")).count();
    let refused = all.iter().filter(|l| l.contains("/refused")).count();
    assert_eq!((ok, refused), (5, 3), "{all:?}");
}

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
    tokio::time::sleep(Duration::from_millis(700)).await;
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
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    tokio::time::sleep(Duration::from_millis(100)).await;
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
