//! Listeners: accepting connections, TLS, HTTP/1.1 and HTTP/2, limits, graceful drain.
//!
//! [`Server::bind`] binds both listeners (so tests can use port 0 and ask for the address)
//! and [`Server::run`] serves until the shutdown future completes, then drains:
//! 1. readiness turns false at once (`/readyz` → 503), so load balancers stop sending;
//! 2. for a short grace ([`ACCEPT_GRACE`]) new connections are still accepted, covering the
//!    time endpoints take to propagate;
//! 3. the listener is closed (new connections are refused) and in-flight requests get up to
//!    `listen.drain_timeout` to finish, then remaining connections are dropped.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::context::AppState;
use crate::control::admin;
use crate::net::bound::Bound;
use crate::net::conn::ConnInfo;
use crate::net::tls::{self, ReloadingCert};
use crate::net::upstream::Upstream;
use crate::pipeline;
use crate::telemetry;

/// How long new connections are still accepted after shutdown begins.
pub const ACCEPT_GRACE: Duration = Duration::from_secs(1);
/// How often the listener's certificate files are checked for rotation.
pub const CERT_POLL: Duration = Duration::from_secs(1);

pub struct Server {
    data: TcpListener,
    admin: TcpListener,
    state: Arc<AppState>,
    tls: Option<(TlsAcceptor, Arc<ReloadingCert>)>,
    admin_tls: Option<(TlsAcceptor, Arc<ReloadingCert>)>,
    /// The bundle files as they were just before the bundle in force was read: the watcher
    /// starts from them, so a change made while the server starts is not missed.
    watched: crate::control::reload::Fingerprint,
}

impl Server {
    /// Loads what the config names (TLS material, upstream client) and binds both listeners.
    pub async fn bind(config: Config) -> anyhow::Result<Self> {
        let tls = match &config.listen_tls {
            Some(t) => {
                let resolver = ReloadingCert::load(&t.cert, &t.key)?;
                let server_config = tls::server_config(resolver.clone(), t.client_ca.as_deref())?;
                Some((TlsAcceptor::from(Arc::new(server_config)), resolver))
            }
            None => None,
        };
        let admin_tls = match &config.admin_tls {
            Some(t) => {
                let resolver = ReloadingCert::load(&t.cert, &t.key).context("admin.tls")?;
                let server_config =
                    tls::server_config_with(resolver.clone(), t.client_ca.as_deref(), true)
                        .context("admin.tls")?;
                Some((TlsAcceptor::from(Arc::new(server_config)), resolver))
            }
            None => None,
        };
        let upstream = Upstream::new(&config)?;
        let shadow = match &config.shadow_url {
            Some(url) => Some(Upstream::with_base(
                url.clone(),
                config.upstream_connect_timeout,
                config.upstream_timeout,
                config.upstream_ca.as_deref(),
            )?),
            None => None,
        };
        // Taken before the bundle is read: whatever changes after it is a change to load.
        let watched = crate::control::reload::fingerprint(&config);
        let bundle = crate::control::bundle::from_config(&config)
            .map_err(|problems| anyhow::anyhow!("rich bundle refused:\n{}", problems.join("\n")))?;
        if let Some(b) = &bundle {
            tracing::info!(digest = %b.digest, binding_id = %b.binding_id, capabilities = b.capabilities.len(), "rich bundle loaded");
        }
        if let Some(f) = &config.admin_token_file {
            if crate::control::admin_auth::read_token(f).is_none() {
                anyhow::bail!(
                    "admin.token_file: cannot read {} or it is empty",
                    f.display()
                );
            }
        }
        let admission = match &config.admission {
            Some(a) => Some(crate::context::AdmissionState::load(a).map_err(|problems| {
                anyhow::anyhow!("admission.jwks refused:\n{}", problems.join("\n"))
            })?),
            None => None,
        };
        // Metrics first: the store's writer thread takes its metric handles when it starts.
        let metrics = crate::telemetry::Metrics::register();
        let enforcement = if config.needs_store() {
            Some(Arc::new(crate::context::Enforcement::load(&config).await?))
        } else {
            None
        };
        let rcns = match &config.rcns {
            Some(r) => Some(crate::context::RcnsState::load(r).map_err(|problems| {
                anyhow::anyhow!("rcns.callers refused:\n{}", problems.join("\n"))
            })?),
            None => None,
        };
        let data = TcpListener::bind(&config.listen_addr)
            .await
            .with_context(|| format!("listen.addr: cannot bind {}", config.listen_addr))?;
        let admin = TcpListener::bind(&config.admin_addr)
            .await
            .with_context(|| format!("admin.addr: cannot bind {}", config.admin_addr))?;
        Ok(Self {
            data,
            admin,
            tls,
            admin_tls,
            watched,
            state: Arc::new(AppState {
                quote_channel: crate::context::QuoteChannelState::from_config(&config),
                admission,
                rcns,
                config,
                metrics,
                bundle: arc_swap::ArcSwapOption::new(bundle),
                enforcement,
                shadow,
                upstream,
                mcp_drifted: Default::default(),
                draining: false.into(),
            }),
        })
    }

    pub fn data_addr(&self) -> SocketAddr {
        self.data
            .local_addr()
            .expect("a bound listener has an address")
    }

    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
            .local_addr()
            .expect("a bound listener has an address")
    }

    /// Serves until `shutdown` completes, then drains (see the module docs).
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        let Server {
            data,
            admin,
            state,
            tls,
            admin_tls,
            watched,
        } = self;
        let metrics = telemetry::metrics_handle();
        let admin_addr = admin.local_addr()?;
        let (admin_stop_tx, admin_stop) = watch::channel(false);
        let admin_acceptor = admin_tls.map(|(acceptor, resolver)| {
            tokio::spawn(resolver.watch(CERT_POLL));
            acceptor
        });
        let admin_task = tokio::spawn(admin::serve(
            admin,
            admin_acceptor,
            state.clone(),
            metrics,
            admin_stop,
        ));
        if let Some(b) = state.bundle.load_full() {
            metrics::gauge!(crate::telemetry::LOCKFILE_INFO, "digest" => b.digest.clone()).set(1.0);
        }
        crate::control::reload::spawn_triggers(state.clone(), watched);
        crate::admission::jwks::spawn_watch(state.clone());
        crate::control::witnesses::spawn(state.clone());
        crate::control::freeze::spawn_poll(state.clone());
        let tls = tls.map(|(acceptor, resolver)| {
            tokio::spawn(resolver.clone().watch(CERT_POLL));
            (acceptor, resolver)
        });
        let acceptor = tls.as_ref().map(|(a, _)| a.clone());

        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(state.config.header_timeout)
            .keep_alive(true);
        builder.http2().timer(TokioTimer::new());
        let graceful = GracefulShutdown::new();
        let permits = Arc::new(Semaphore::new(state.config.max_connections));

        tracing::info!(
            data = %data.local_addr()?,
            admin = %admin_addr,
            tls = acceptor.is_some(),
            upstream = %state.config.upstream_url,
            "palisade listening"
        );

        let accept = Acceptor {
            listener: &data,
            permits,
            state: &state,
            builder,
            tls: acceptor,
            graceful: &graceful,
        };
        tokio::select! {
            _ = accept.run() => {}
            _ = shutdown => {}
        }
        state.draining.store(true, Ordering::Relaxed);
        tracing::info!("shutdown requested: draining");
        // Keep accepting for a moment: endpoints take time to learn we are not ready.
        let _ = tokio::time::timeout(ACCEPT_GRACE, accept.run()).await;
        drop(accept);
        drop(data); // new connections are refused from here on
        let drain = state.config.drain_timeout;
        if tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?drain,
                "drain timeout reached; closing remaining connections"
            );
        }
        let _ = admin_stop_tx.send(true);
        let _ = admin_task.await;
        tracing::info!("palisade stopped");
        Ok(())
    }
}

/// The accept loop's parts, so the loop can run again during the drain grace.
struct Acceptor<'a> {
    listener: &'a TcpListener,
    /// Bounds concurrent connections (`limits.max_connections`). A permit lives as long as
    /// its connection; accept waits for one, leaving excess clients in the kernel backlog.
    permits: Arc<Semaphore>,
    state: &'a Arc<AppState>,
    builder: auto::Builder<TokioExecutor>,
    tls: Option<TlsAcceptor>,
    graceful: &'a GracefulShutdown,
}

impl Acceptor<'_> {
    /// Accepts connections forever; cancel it by dropping the future.
    async fn run(&self) {
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
    let header_timeout = state.config.header_timeout;
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

/// Completes on SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
