//! Shared harness for the integration tests: a real HTTP upstream that records what reached
//! it, generated certificates, the real `palisade` binary as a child process, and clients for
//! HTTP/1.1, h2c and TLS (with ALPN and client certificates).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest as _, Sha256};
use tokio::net::{TcpListener, TcpStream};

pub mod bundles;
pub mod log_mirror;
pub mod tokens;
pub mod wait;
pub mod writes;

pub type BoxBody =
    http_body_util::combinators::BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

pub fn full(b: impl Into<Bytes>) -> BoxBody {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

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
        let (rec, count) = (seen.clone(), accepted.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let rec = rec.clone();
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
                });
            }
        });
        Upstream {
            addr,
            seen,
            accepted,
            task,
            tls: false,
        }
    }

    /// Connections the upstream has accepted so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The same upstream behind TLS with `cert` (as `Pki::issue*` made it): the recorder
    /// sees only requests that completed a handshake.
    pub async fn start_tls(cert: &Issued) -> Upstream {
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
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
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

// ---- certificates ------------------------------------------------------------------------

/// A test CA with a server certificate for `localhost`/127.0.0.1 and a client certificate.
/// Private keys are generated per test and written only to the test's temp directory.
pub struct Pki {
    pub dir: PathBuf,
    pub ca_pem: String,
    ca_cert: rcgen::Certificate,
    ca_key: rcgen::KeyPair,
}

pub struct Issued {
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new(dir: &Path) -> Pki {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "palisade test CA");
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = params.self_signed(&ca_key).unwrap();
        let pki = Pki {
            dir: dir.to_owned(),
            ca_pem: ca_cert.pem(),
            ca_cert,
            ca_key,
        };
        std::fs::write(pki.path("ca.pem"), &pki.ca_pem).unwrap();
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    pub fn issue(&self, cn: &str, server: bool) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let sans = if server {
            vec!["localhost".to_string(), "127.0.0.1".to_string()]
        } else {
            vec![]
        };
        let mut params = rcgen::CertificateParams::new(sans).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params.extended_key_usages = vec![if server {
            rcgen::ExtendedKeyUsagePurpose::ServerAuth
        } else {
            rcgen::ExtendedKeyUsagePurpose::ClientAuth
        }];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A server certificate for `localhost` carrying `spiffe` as a URI SAN (an X.509-SVID
    /// with a DNS name too), or no URI SAN at all.
    pub fn issue_spiffe(&self, spiffe: Option<&str>) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
        if let Some(id) = spiffe {
            params
                .subject_alt_names
                .push(rcgen::SanType::URI(id.try_into().unwrap()));
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A client certificate (clientAuth) carrying `spiffe` as its one URI SAN: an X.509-SVID
    /// as SPIRE or a mesh issues it to a workload.
    pub fn issue_client_spiffe(&self, spiffe: &str) -> Issued {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::URI(spiffe.try_into().unwrap()));
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.ca_cert, &self.ca_key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// Issues a server certificate and writes it as `server.crt`/`server.key`.
    pub fn write_server(&self, cn: &str) -> Issued {
        let issued = self.issue(cn, true);
        std::fs::write(self.path("server.crt"), &issued.cert_pem).unwrap();
        std::fs::write(self.path("server.key"), &issued.key_pem).unwrap();
        issued
    }
}

// ---- the palisade process ----------------------------------------------------------------

/// The real binary running `palisade run` on a config written to a temp dir.
pub struct Palisade {
    pub child: Child,
    pub data: SocketAddr,
    pub admin: SocketAddr,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub dir: tempfile::TempDir,
}

impl Drop for Palisade {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_palisade")
}

impl Palisade {
    /// Starts `palisade run` with `config` (listen and admin addresses are set to port 0 here
    /// unless the config names them) and waits until it listens.
    pub fn start(config_body: &str) -> Palisade {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, config_body)
    }

    pub fn start_in(dir: tempfile::TempDir, config_body: &str) -> Palisade {
        Self::start_wrapped(dir, config_body, &[])
    }

    /// As [`Palisade::start_in`], run through `wrapper` (a command that ends by exec'ing its
    /// arguments, e.g. `unshare -m sh -c '…; exec "$0" "$@"'`): the binary and its arguments
    /// are appended to it. The process keeps its pid when the wrapper execs.
    pub fn start_wrapped(dir: tempfile::TempDir, config_body: &str, wrapper: &[&str]) -> Palisade {
        let mut text = String::new();
        if !config_body.contains("[listen]") {
            text.push_str("[listen]\naddr = \"127.0.0.1:0\"\n");
        }
        if !config_body.contains("[admin]") {
            text.push_str("[admin]\naddr = \"127.0.0.1:0\"\n");
        }
        text.push_str(config_body);
        let path = dir.path().join("palisade.toml");
        std::fs::write(&path, text).unwrap();
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let mut child = cmd
            .args(["run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let logs = logs.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("palisade listening") {
                        let _ = tx.send(line.clone());
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "palisade did not start; logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        Palisade {
            data: v["data"].as_str().unwrap().parse().unwrap(),
            admin: v["admin"].as_str().unwrap().parse().unwrap(),
            child,
            logs,
            dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.data)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn logs(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Peak resident set size of the process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops the sidecar (SIGTERM, then waits for it) and runs `palisade audit verify` on its
    /// configuration: whether the audit passed, and what it printed (stdout, stderr).
    pub fn stop_and_audit(mut self) -> (bool, String, String) {
        let config = self.dir.path().join("palisade.toml");
        self.sigterm();
        self.child.wait().unwrap();
        let out = Command::new(bin())
            .args(["audit", "verify", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

// ---- clients -----------------------------------------------------------------------------

/// A loopback port nothing listens on now (for servers whose config names a fixed port).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.1 client (pooled).
pub fn http1_client(
) -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody>
{
    hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build_http()
}

/// An h2c (prior knowledge) client.
pub fn h2c_client(
) -> hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, BoxBody>
{
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub async fn send(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        BoxBody,
    >,
    req: Request<BoxBody>,
) -> (http::response::Parts, Bytes) {
    let resp = client.request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    (parts, body.collect().await.unwrap().to_bytes())
}

/// A TLS connection to the proxy, speaking whatever ALPN chose.
pub struct TlsConn {
    pub alpn: Option<Vec<u8>>,
    pub peer_cert_der: Vec<u8>,
    sender: TlsSender,
}

enum TlsSender {
    H1(hyper::client::conn::http1::SendRequest<BoxBody>),
    H2(hyper::client::conn::http2::SendRequest<BoxBody>),
}

pub fn tls_client_config(ca_pem: &str, client: Option<&Issued>) -> rustls::ClientConfig {
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls_pemfile::certs(&mut ca_pem.as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut cfg = match client {
        Some(id) => {
            let certs = rustls_pemfile::certs(&mut id.cert_pem.as_bytes())
                .map(Result::unwrap)
                .collect();
            let key = rustls_pemfile::private_key(&mut id.key_pem.as_bytes())
                .unwrap()
                .unwrap();
            builder.with_client_auth_cert(certs, key).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    cfg.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    cfg
}

impl TlsConn {
    /// Connects and completes the TLS and HTTP handshakes; `Err` if either fails.
    pub async fn connect(addr: SocketAddr, cfg: rustls::ClientConfig) -> Result<TlsConn, String> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = connector
            .connect(name, tcp)
            .await
            .map_err(|e| e.to_string())?;
        let (_, session) = tls.get_ref();
        let alpn = session.alpn_protocol().map(<[u8]>::to_vec);
        let peer_cert_der = session
            .peer_certificates()
            .and_then(|c| c.first())
            .map(|c| c.to_vec())
            .unwrap_or_default();
        let io = TokioIo::new(tls);
        let sender = if alpn.as_deref() == Some(b"h2") {
            let (s, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            TlsSender::H2(s)
        } else {
            let (s, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            TlsSender::H1(s)
        };
        Ok(TlsConn {
            alpn,
            peer_cert_der,
            sender,
        })
    }

    /// Sends a request (URI path only; the authority is filled in for HTTP/2).
    pub async fn send(
        &mut self,
        mut req: Request<BoxBody>,
    ) -> Result<(http::response::Parts, Bytes), String> {
        let resp = match &mut self.sender {
            TlsSender::H1(s) => {
                req.headers_mut()
                    .insert("host", "localhost".parse().unwrap());
                // The connection takes the next request only once it is done with the last
                // one; sending earlier fails the request as canceled.
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(req).await
            }
            TlsSender::H2(s) => {
                let pq = req.uri().path_and_query().unwrap().clone();
                *req.uri_mut() = http::Uri::builder()
                    .scheme("https")
                    .authority("localhost")
                    .path_and_query(pq)
                    .build()
                    .unwrap();
                *req.version_mut() = http::Version::HTTP_2;
                s.ready().await.map_err(|e| e.to_string())?;
                s.send_request(req).await
            }
        }
        .map_err(|e| e.to_string())?;
        let (parts, body) = resp.into_parts();
        let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts, bytes))
    }
}

/// POSTs an empty body to the admin listener; the answer as JSON (null if it is not).
pub async fn admin_post(admin: SocketAddr, path: &str) -> (StatusCode, serde_json::Value) {
    let req = Request::post(format!("http://{admin}{path}"))
        .header("content-type", "application/json")
        .body(full(""))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    (
        parts.status,
        serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
    )
}

/// Fetches an admin path, returning status and body text.
pub async fn admin_get(admin: SocketAddr, path: &str) -> (StatusCode, String) {
    let req = Request::get(format!("http://{admin}{path}"))
        .body(full(""))
        .unwrap();
    let (parts, body) = send(&http1_client(), req).await;
    (parts.status, String::from_utf8_lossy(&body).into_owned())
}

// ---- a webhook receiver --------------------------------------------------------------------

/// A real HTTP server that takes POSTs and answers them from a script: the first
/// `failures` requests get `fail_status`, the rest 200. Keeps every body it accepted, and
/// counts every request.
pub struct Receiver {
    pub addr: SocketAddr,
    pub accepted: Arc<Mutex<Vec<Bytes>>>,
    pub attempts: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    pub async fn start(failures: usize, fail_status: StatusCode) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted: Arc<Mutex<Vec<Bytes>>> = Arc::default();
        let attempts: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let (acc, att) = (accepted.clone(), attempts.clone());
        let task = tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (acc, att) = (acc.clone(), att.clone());
                tokio::spawn(async move {
                    let svc = service_fn(move |req: Request<Incoming>| {
                        let (acc, att) = (acc.clone(), att.clone());
                        async move {
                            let body = req.into_body().collect().await.unwrap().to_bytes();
                            let n = att.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let mut resp = Response::new(full(""));
                            if n < failures {
                                *resp.status_mut() = fail_status;
                            } else {
                                acc.lock().unwrap().push(body);
                            }
                            Ok::<_, Infallible>(resp)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Receiver {
            addr,
            accepted,
            attempts,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/drift", self.addr)
    }

    /// Every event accepted so far, in the order received.
    pub fn events(&self) -> Vec<serde_json::Value> {
        self.accepted
            .lock()
            .unwrap()
            .iter()
            .flat_map(|b| serde_json::from_slice::<Vec<serde_json::Value>>(b).unwrap())
            .collect()
    }

    pub fn attempts(&self) -> usize {
        self.attempts.load(std::sync::atomic::Ordering::SeqCst)
    }
}
