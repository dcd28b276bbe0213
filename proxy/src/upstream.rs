//! The pooled client that talks to the protected application.
//!
//! One `hyper_util` legacy client (connection pool, HTTP/1.1 keep-alive) over a connector that
//! speaks plain HTTP or HTTPS with the configured CA bundle. `upstream.connect_timeout` bounds
//! the TCP connect; `upstream.timeout` bounds the wait for the response head. A streamed body
//! after the head is bounded by nothing but the client: a 256 MiB download must not time out.
//!
//! Nothing is retried here: a request that may have reached the application is never sent
//! twice (SPEC §3). The pool's own retry covers only requests that were never written to a
//! connection (hyper's `retry_canceled_requests`).

use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::body::ProxyBody;
use crate::config::Config;
use crate::tls;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream connect failed: {0}")]
    Connect(String),
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("upstream request failed: {0}")]
    Failed(String),
}

#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, ProxyBody>,
    base: Uri,
    timeout: Duration,
}

impl Upstream {
    pub fn new(config: &Config) -> Result<Self, tls::TlsError> {
        Self::with_base(
            config.upstream_url.clone(),
            config.upstream_connect_timeout,
            config.upstream_timeout,
            config.upstream_ca.as_deref(),
        )
    }

    pub fn with_base(
        base: Uri,
        connect_timeout: Duration,
        timeout: Duration,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, tls::TlsError> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls::client_config(ca)?)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build(https);
        Ok(Self {
            client,
            base,
            timeout,
        })
    }

    /// The upstream URI for a downstream path-and-query.
    pub fn uri_for(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(path_and_query.parse()?);
        Ok(Uri::from_parts(parts)?)
    }

    /// Sends `req` (whose URI is already an upstream URI) and waits for the response head.
    ///
    /// Cancel safety: dropping the future drops the request; the pooled connection is then
    /// closed rather than reused mid-exchange.
    pub async fn send(&self, req: Request<ProxyBody>) -> Result<Response<Incoming>, UpstreamError> {
        match tokio::time::timeout(self.timeout, self.client.request(req)).await {
            Err(_) => Err(UpstreamError::Timeout(self.timeout)),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) if e.is_connect() => Err(UpstreamError::Connect(error_chain(&e))),
            Ok(Err(e)) => Err(UpstreamError::Failed(error_chain(&e))),
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
