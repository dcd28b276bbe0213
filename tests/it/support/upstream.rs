//! A real HTTP upstream that records what it was sent, byte for byte.

use super::*;

// ---- the upstream ------------------------------------------------------------------------

/// One request as the upstream saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub method: String,
    pub path_and_query: String,
    pub version: http::Version,
    pub headers: http::HeaderMap,
    pub body_len: u64,
    pub body_sha256: String,
}

/// A real HTTP/1.1 server on 127.0.0.1:0 that records every request.
///
/// Routes: `/echo…` echoes the body; `/big/N` streams N bytes; `/sink` reads an upload in
/// streaming fashion and answers its length and SHA-256; `/slow/MS` answers after MS ms;
/// `/hang` never answers; `/close` answers with `Connection: close`; anything else answers
/// `{"ok":true}`.
pub struct Upstream {
    pub addr: SocketAddr,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    /// Connections accepted (plain HTTP only).
    pub accepted: Arc<std::sync::atomic::AtomicUsize>,
    /// Connections ended, by either side (plain HTTP only).
    ended: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
    tls: bool,
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Deterministic bytes for streamed bodies, so both ends can check them.
pub fn pattern(offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((offset + i) % 251) as u8)
        .collect()
}

pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

impl Upstream {
    pub async fn start() -> Upstream {
        Self::start_with(None).await
    }

    /// An upstream that closes a keep-alive connection after it has waited `idle` for the
    /// next request (as nginx's `keepalive_timeout` does).
    pub async fn start_closing_idle(idle: Duration) -> Upstream {
        Self::start_with(Some(idle)).await
    }

    async fn start_with(idle: Option<Duration>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let accepted: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let ended: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let (rec, count, gone) = (seen.clone(), accepted.clone(), ended.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let (rec, gone) = (rec.clone(), gone.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req| handle_upstream(req, rec.clone()));
                    let mut b = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    if let Some(idle) = idle {
                        // Counts from the end of one answer to the next request's head.
                        b.http1()
                            .timer(hyper_util::rt::TokioTimer::new())
                            .header_read_timeout(idle);
                    }
                    let _ = b.serve_connection(TokioIo::new(stream), svc).await;
                    gone.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                });
            }
        });
        Upstream {
            addr,
            seen,
            accepted,
            ended,
            task,
            tls: false,
        }
    }

    /// Connections the upstream has accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Connections that have ended so far, closed by either side.
    pub fn ended(&self) -> usize {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The same upstream behind TLS with `cert` (as `Pki::issue*` made it): the recorder
    /// sees only requests that completed a handshake.
    pub async fn start_tls(cert: &Issued) -> Upstream {
        let acceptor = tls_acceptor(cert);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let rec = seen.clone();
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let rec = rec.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(stream).await else {
                        return;
                    };
                    let svc = service_fn(move |req| handle_upstream(req, rec.clone()));
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        });
        Upstream {
            addr,
            seen,
            accepted: Arc::default(),
            ended: Arc::default(),
            task,
            tls: true,
        }
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        // TLS upstreams are named by the host their certificate carries.
        if self.tls {
            format!("{scheme}://localhost:{}", self.addr.port())
        } else {
            format!("{scheme}://{}", self.addr)
        }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

async fn handle_upstream(
    req: Request<Incoming>,
    rec: Arc<Mutex<Vec<Seen>>>,
) -> Result<Response<BoxBody>, Infallible> {
    let (parts, mut body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let pq = parts
        .uri
        .path_and_query()
        .map(|p| p.to_string())
        .unwrap_or_default();
    // Read the body frame by frame: never more than one frame in memory for /sink.
    let mut hasher = Sha256::new();
    let mut len = 0u64;
    let keep = !path.starts_with("/sink");
    let mut kept = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(frame) = frame else { break };
        if let Some(d) = frame.data_ref() {
            hasher.update(d);
            len += d.len() as u64;
            if keep {
                kept.extend_from_slice(d);
            }
        }
    }
    let digest = hex::encode(hasher.finalize());
    rec.lock().unwrap().push(Seen {
        method: parts.method.to_string(),
        path_and_query: pq,
        version: parts.version,
        headers: parts.headers.clone(),
        body_len: len,
        body_sha256: digest.clone(),
    });
    let mut resp = if path.starts_with("/echo") {
        let mut r = Response::new(full(kept));
        r.headers_mut()
            .insert("x-upstream-method", parts.method.as_str().parse().unwrap());
        // A hop-by-hop header the proxy must not pass back.
        r.headers_mut()
            .insert("connection", "x-hop".parse().unwrap());
        r.headers_mut().insert("x-hop", "secret".parse().unwrap());
        r
    } else if let Some(n) = path.strip_prefix("/big/") {
        let total: u64 = n.parse().unwrap();
        let chunk = 64 * 1024u64;
        let stream = futures_util::stream::unfold(0u64, move |off| async move {
            if off >= total {
                return None;
            }
            let n = chunk.min(total - off) as usize;
            Some((
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Frame::data(Bytes::from(
                    pattern(off, n),
                ))),
                off + n as u64,
            ))
        });
        let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
        r.headers_mut()
            .insert("content-length", total.to_string().parse().unwrap());
        r
    } else if path.starts_with("/sink") {
        Response::new(full(format!("{{\"len\":{len},\"sha256\":\"{digest}\"}}")))
    } else if let Some(ms) = path.strip_prefix("/slow/") {
        tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
        Response::new(full("slow done"))
    } else if path.starts_with("/close") {
        let mut r = Response::new(full("closing"));
        r.headers_mut()
            .insert("connection", "close".parse().unwrap());
        r
    } else if path.starts_with("/hang") {
        std::future::pending::<()>().await;
        unreachable!()
    } else {
        Response::new(full(r#"{"ok":true}"#))
    };
    if !resp.headers().contains_key("content-type") {
        resp.headers_mut()
            .insert("content-type", "application/octet-stream".parse().unwrap());
    }
    *resp.status_mut() = StatusCode::OK;
    Ok(resp)
}

/// A TLS acceptor serving `cert` (no client certificate asked): what the tests' HTTPS servers
/// (upstreams, issuers' JWKS and introspection endpoints) listen with.
pub fn tls_acceptor(cert: &Issued) -> tokio_rustls::TlsAcceptor {
    let certs = rustls_pemfile::certs(&mut cert.cert_pem.as_bytes())
        .map(Result::unwrap)
        .collect();
    let key = rustls_pemfile::private_key(&mut cert.key_pem.as_bytes())
        .unwrap()
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    tokio_rustls::TlsAcceptor::from(Arc::new(cfg))
}
