//! Limits and failures: slow headers, bodies over max_body, upstream down or silent,
//! header rewriting, health and metrics, drain, bounded memory, access-log sampling.

use super::*;

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
        let status = p.child().wait().unwrap();
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
    off.child().wait().unwrap();
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
    sampled.child().wait().unwrap();
    let all = lines(&sampled);
    let ok = all.iter().filter(|l| l.contains("/ok")).count();
    let refused = all.iter().filter(|l| l.contains("/refused")).count();
    assert_eq!((ok, refused), (5, 3), "{all:?}");
}
