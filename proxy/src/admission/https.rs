//! The client admission calls its issuers with (JWKS URLs, introspection): https only, the
//! platform's roots (and `SSL_CERT_FILE`'s), one per process.

use std::sync::OnceLock;
use std::time::Duration;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// How long one call may take, connection included.
pub const TIMEOUT: Duration = Duration::from_secs(5);

pub type Https =
    Client<hyper_rustls::HttpsConnector<HttpConnector>, http_body_util::Full<bytes::Bytes>>;

pub fn client() -> Option<&'static Https> {
    static CLIENT: OnceLock<Option<Https>> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            let tls = crate::net::tls::client_config(None, None).ok()?;
            let mut http = HttpConnector::new();
            http.enforce_http(false);
            http.set_connect_timeout(Some(TIMEOUT));
            let https = hyper_rustls::HttpsConnectorBuilder::new()
                .with_tls_config(tls)
                .https_only()
                .enable_http1()
                .wrap_connector(http);
            Some(Client::builder(TokioExecutor::new()).build(https))
        })
        .as_ref()
}

/// Sends `req`; the answer's headers and body when it is 200 with at most `max` bytes, all
/// within [`TIMEOUT`] twice (the head, then the body); `Err` says what went wrong.
pub async fn call(
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
    max: usize,
) -> Result<(http::HeaderMap, bytes::Bytes), String> {
    use http_body_util::BodyExt as _;
    let client = client().ok_or("no TLS client could be made")?;
    let resp = tokio::time::timeout(TIMEOUT, client.request(req))
        .await
        .map_err(|_| "no answer in 5 s".to_owned())?
        .map_err(|e| crate::net::upstream::error_chain(&e))?;
    if resp.status() != http::StatusCode::OK {
        return Err(format!("answered {}", resp.status()));
    }
    let (parts, body) = resp.into_parts();
    let body = tokio::time::timeout(TIMEOUT, http_body_util::Limited::new(body, max).collect())
        .await
        .map_err(|_| "the body took more than 5 s".to_owned())?
        .map_err(|e| format!("body: {e}"))?
        .to_bytes();
    Ok((parts.headers, body))
}
