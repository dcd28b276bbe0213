//! Accepting and serving data-plane connections: the accept loop (bounded by
//! `limits.max_connections`), TLS, HTTP/1.1 and HTTP/2 on each connection, under a graceful
//! shutdown. One of these runs on every data-plane runtime (`shards`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_rustls::TlsAcceptor;

use crate::context::AppState;
use crate::net::bound::Bound;
use crate::net::conn::ConnInfo;
use crate::pipeline;

/// How long new connections are still accepted after shutdown begins.
pub const ACCEPT_GRACE: Duration = Duration::from_secs(1);

/// The HTTP/1.1 and HTTP/2 connection builder of the data plane.
pub(crate) fn http_builder(state: &AppState) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(state.config.limits.header_timeout)
        .keep_alive(true);
    builder.http2().timer(TokioTimer::new());
    builder
}

/// The accept loop's parts, so the loop can run again during the drain grace.
pub(crate) struct Acceptor<'a> {
    pub listener: &'a TcpListener,
    /// Bounds concurrent connections (`limits.max_connections`). A permit lives as long as
    /// its connection; accept waits for one, leaving excess clients in the kernel backlog.
    pub permits: Arc<Semaphore>,
    pub state: &'a Arc<AppState>,
    pub builder: auto::Builder<TokioExecutor>,
    pub tls: Option<TlsAcceptor>,
    pub graceful: &'a GracefulShutdown,
}

impl Acceptor<'_> {
    /// Accepts connections forever; cancel it by dropping the future.
    pub async fn run(&self) {
        loop {
            let permit = self
                .permits
                .clone()
                .acquire_owned()
                .await
                .expect("the semaphore is never closed");
            let (stream, peer) = match self.listener.accept().await {
                Ok(a) => a,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let state = self.state.clone();
            let builder = self.builder.clone();
            let tls = self.tls.clone();
            let watcher = self.graceful.watcher();
            tokio::spawn(async move {
                let _permit = permit;
                serve_connection(stream, peer, state, builder, tls, watcher).await;
            });
        }
    }
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    state: Arc<AppState>,
    builder: auto::Builder<TokioExecutor>,
    acceptor: Option<TlsAcceptor>,
    watcher: hyper_util::server::graceful::Watcher,
) {
    let header_timeout = state.config.limits.header_timeout;
    let result = match acceptor {
        None => {
            let info = ConnInfo::new(peer, false, None, Some(Bound::default()));
            serve_http(stream, info, state, &builder, watcher).await
        }
        // Boxed: a TLS stream's state is large, and unboxed it would size the task of every
        // plain connection too (issue 19: memory per connection).
        Some(acceptor) => {
            Box::pin(async move {
                // The handshake counts against header_timeout: a client that stalls in TLS is
                // cut off like one that stalls in HTTP.
                let accepting = tokio::time::timeout(header_timeout, acceptor.accept(stream));
                let tls = match accepting.await {
                    Ok(Ok(s)) => s,
                    Ok(Err(e)) => {
                        tracing::debug!(%peer, error = %e, "TLS handshake failed");
                        return Ok(());
                    }
                    Err(_) => {
                        tracing::debug!(%peer, "TLS handshake timed out");
                        return Ok(());
                    }
                };
                // Under mTLS the verified leaf certificate is the caller's identity (SPEC §5.7).
                let client_cert = tls
                    .get_ref()
                    .1
                    .peer_certificates()
                    .and_then(|c| c.first())
                    .map(|leaf| leaf.as_ref().to_vec());
                let info = ConnInfo::new(peer, true, client_cert, Some(Bound::default()));
                serve_http(tls, info, state, &builder, watcher).await
            })
            .await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

/// Serves HTTP/1.1 or HTTP/2 on one connection, plain or TLS, until it closes or the drain
/// ends it.
async fn serve_http<I>(
    io: I,
    info: ConnInfo,
    state: Arc<AppState>,
    builder: &auto::Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let info = Arc::new(info);
    let svc = service_fn(move |req| pipeline::handle(state.clone(), info.clone(), req));
    let conn = builder.serve_connection(TokioIo::new(io), svc).into_owned();
    watcher.watch(conn).await
}
