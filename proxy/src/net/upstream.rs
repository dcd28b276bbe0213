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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::config::Config;
use crate::net::body::ProxyBody;
use crate::net::identity;
use crate::net::tls;

#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream connect failed: {0}")]
    Connect(String),
    #[error("upstream did not answer within {0:?}")]
    Timeout(Duration),
    #[error("upstream request failed: {0}")]
    Failed(String),
    /// The TLS peer is not the pinned deployment; nothing of the request was sent.
    #[error("{0}")]
    Identity(identity::Mismatch),
}

/// An upstream answer made ready to pass downstream: hop-by-hop headers removed, the HTTP
/// version left to the downstream connection.
pub fn downstream(resp: Response<Incoming>) -> Response<ProxyBody> {
    let (mut parts, body) = resp.into_parts();
    crate::net::headers::strip_hop_by_hop(&mut parts.headers);
    // The upstream cannot speak for the sidecar: its receipt and fence headers are set (or
    // not) by the layer that decided the request.
    crate::net::headers::remove_named(&mut parts.headers, &crate::net::headers::SIDECAR_OWNED);
    parts.version = http::Version::default();
    Response::from_parts(parts, crate::net::body::boxed(body))
}

type HttpClient = Client<HttpsConnector<HttpConnector>, ProxyBody>;

/// Pinned identities with a client of their own; past this, a client is made per request.
const MAX_PINNED: usize = 64;

#[derive(Clone)]
pub struct Upstream {
    base: Uri,
    timeout: Duration,
    connect_timeout: Duration,
    ca: Option<PathBuf>,
    /// `upstream.tls.identity`: checked for requests whose binding names no identity.
    default_identity: Option<String>,
    /// For plain HTTP, and HTTPS without an identity to check.
    unpinned: HttpClient,
    /// One pool per pinned identity, made on first use: a pooled connection is only ever
    /// reused for the identity it was verified against.
    pinned: Arc<Mutex<HashMap<String, HttpClient>>>,
}

impl Upstream {
    pub fn new(config: &Config) -> Result<Self, tls::TlsError> {
        let mut u = Self::with_base(
            config.upstream.url.clone(),
            config.upstream.connect_timeout,
            config.upstream.timeout,
            config.upstream.ca.as_deref(),
        )?;
        u.default_identity = config.upstream.identity.clone();
        Ok(u)
    }

    pub fn with_base(
        base: Uri,
        connect_timeout: Duration,
        timeout: Duration,
        ca: Option<&std::path::Path>,
    ) -> Result<Self, tls::TlsError> {
        Ok(Self {
            unpinned: client(connect_timeout, ca, None)?,
            base,
            timeout,
            connect_timeout,
            ca: ca.map(ToOwned::to_owned),
            default_identity: None,
            pinned: Arc::default(),
        })
    }

    pub(crate) fn is_https(&self) -> bool {
        self.base.scheme() == Some(&http::uri::Scheme::HTTPS)
    }

    /// The client whose handshake checks `identity` (else `upstream.tls.identity`). Over plain
    /// HTTP there is no peer identity to check (`config check` warns about that).
    fn client_for(&self, identity: Option<&str>) -> Result<HttpClient, tls::TlsError> {
        let Some(id) = identity.or(self.default_identity.as_deref()) else {
            return Ok(self.unpinned.clone());
        };
        if !self.is_https() {
            return Ok(self.unpinned.clone());
        }
        let mut pinned = self.pinned.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = pinned.get(id) {
            return Ok(c.clone());
        }
        let c = client(self.connect_timeout, self.ca.as_deref(), Some(id))?;
        if pinned.len() < MAX_PINNED {
            pinned.insert(id.to_owned(), c.clone());
        }
        Ok(c)
    }

    /// The upstream URI for a downstream path-and-query.
    pub fn uri_for(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        self.uri_with(path_and_query.parse()?)
    }

    /// [`Upstream::uri_for`] with a path-and-query already parsed (a request's own: cloning
    /// it shares its bytes, no parse again).
    pub fn uri_with(&self, path_and_query: http::uri::PathAndQuery) -> Result<Uri, http::Error> {
        let mut parts = self.base.clone().into_parts();
        parts.path_and_query = Some(path_and_query);
        Ok(Uri::from_parts(parts)?)
    }

    /// Sends `req` (whose URI is already an upstream URI) and waits for the response head.
    ///
    /// Cancel safety: dropping the future drops the request; the pooled connection is then
    /// closed rather than reused mid-exchange.
    pub async fn send(&self, req: Request<ProxyBody>) -> Result<Response<Incoming>, UpstreamError> {
        self.send_as(req, None).await
    }

    /// `upstream.timeout`: the wait for the response head.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `upstream.connect_timeout`.
    pub(crate) fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// [`Upstream::send`] to the deployment `identity` names (a binding's
    /// `deployment.identity`; `None`: `upstream.tls.identity`, if set).
    pub async fn send_as(
        &self,
        req: Request<ProxyBody>,
        identity: Option<&str>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let client = self
            .client_for(identity)
            .map_err(|e| UpstreamError::Connect(e.to_string()))?;
        match tokio::time::timeout(self.timeout, client.request(req)).await {
            Err(_) => Err(UpstreamError::Timeout(self.timeout)),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) if e.is_connect() => match identity::find_mismatch(&e) {
                Some(m) => Err(UpstreamError::Identity(m)),
                None => Err(UpstreamError::Connect(error_chain(&e))),
            },
            Ok(Err(e)) => Err(UpstreamError::Failed(error_chain(&e))),
        }
    }
}

fn client(
    connect_timeout: Duration,
    ca: Option<&std::path::Path>,
    identity: Option<&str>,
) -> Result<HttpClient, tls::TlsError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_nodelay(true);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls::client_config(ca, identity)?)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(256)
        .build(https))
}

pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}
