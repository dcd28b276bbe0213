//! TLS: ALPN, mTLS, certificates rotated without a restart.

use super::*;

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
