//! The HTTP client OTLP exports go through: hyper with rustls (the platform's roots and
//! `SSL_CERT_FILE`'s), `http://` or `https://`, one deadline per export attempt covering the
//! answer's body, which is bounded.

use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_http::{HttpClient, HttpError, Request, Response};

/// A collector's answer is a small protobuf (a partial-success note at most).
const MAX_ANSWER: usize = 64 * 1024;

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

pub(super) struct Collector {
    client: Https,
    timeout: Duration,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector")
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl Collector {
    pub(super) fn new(timeout: Duration) -> Result<Self, String> {
        let tls = crate::net::tls::client_config(None, None).map_err(|e| e.to_string())?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        http.set_nodelay(true);
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
            timeout,
        })
    }
}

impl Collector {
    /// Posts `body` (OTLP protobuf) to `uri` with `headers`; `Err` unless a 2xx came back
    /// within the deadline.
    pub(super) async fn post(
        &self,
        uri: &http::Uri,
        headers: &[(http::HeaderName, http::HeaderValue)],
        body: Vec<u8>,
    ) -> Result<(), String> {
        let mut req = Request::post(uri.clone())
            .header(http::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Bytes::from(body))
            .map_err(|e| e.to_string())?;
        for (n, v) in headers {
            req.headers_mut().insert(n.clone(), v.clone());
        }
        let resp = self.send_bytes(req).await.map_err(|e| e.to_string())?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {}", resp.status()))
        }
    }
}

#[async_trait::async_trait]
impl HttpClient for Collector {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let exchange = async {
            let resp = self.client.request(request.map(Full::new)).await?;
            let (parts, body) = resp.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        match tokio::time::timeout(self.timeout, exchange).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {:?}", self.timeout).into()),
        }
    }
}
