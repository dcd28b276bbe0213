//! A client of a sidecar's admin listener, shared by the commands that call one (`audit
//! verify --url`, `freeze`): http or https (the platform's roots), a 5 s connect timeout, and
//! the admin token read from a file.

use std::path::Path;

use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::failure::Failure;

pub(super) type AdminClient =
    Client<hyper_rustls::HttpsConnector<HttpConnector>, http_body_util::Full<bytes::Bytes>>;

pub(super) fn client() -> Result<AdminClient, Failure> {
    let tls = crate::net::tls::client_config(None, None)
        .map_err(|e| Failure::usage(format!("TLS: {e}")))?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(std::time::Duration::from_secs(5)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}

/// Sends `req` to `url`: its status and body (at most `max` bytes), within 30 s.
pub(super) async fn call(
    client: &AdminClient,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
    url: &str,
    max: usize,
) -> Result<(http::StatusCode, bytes::Bytes), Failure> {
    let (status, _, body) = call_with_headers(client, req, url, max).await?;
    Ok((status, body))
}

/// [`call`], with the answer's headers.
pub(super) async fn call_with_headers(
    client: &AdminClient,
    req: http::Request<http_body_util::Full<bytes::Bytes>>,
    url: &str,
    max: usize,
) -> Result<(http::StatusCode, http::HeaderMap, bytes::Bytes), Failure> {
    use http_body_util::BodyExt as _;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(30), client.request(req))
        .await
        .map_err(|_| Failure::refused(format!("{url}: no answer in 30 s")))?
        .map_err(|e| {
            Failure::refused(format!("{url}: {}", crate::net::upstream::error_chain(&e)))
        })?;
    let (parts, body) = resp.into_parts();
    let body = http_body_util::Limited::new(body, max)
        .collect()
        .await
        .map_err(|e| Failure::refused(format!("{url}: {e}")))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// The token in a token file: its first line, or of a file of named tokens (`name:token`),
/// the first one's token.
pub(super) fn token_file(f: &Path) -> Result<String, Failure> {
    let text = std::fs::read_to_string(f)
        .map_err(|e| Failure::usage(format!("--token-file {}: {e}", f.display())))?;
    let first = text.lines().next().unwrap_or("").trim();
    let token = first.split_once(':').map_or(first, |(_, t)| t).trim();
    if token.is_empty() {
        return Err(Failure::usage(format!(
            "--token-file {}: empty",
            f.display()
        )));
    }
    Ok(token.to_owned())
}
