//! Clients: HTTP/1.1, h2c and TLS connections, the admin API.

use super::*;

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
