//! Listeners: accepting connections, TLS, HTTP/1.1 and HTTP/2, limits, graceful drain.
//!
//! [`Server::bind`] binds both listeners (so tests can use port 0 and ask for the address)
//! and [`Server::run`] serves until the shutdown future completes, then drains:
//! 1. readiness turns false at once (`/readyz` → 503), so load balancers stop sending;
//! 2. for a short grace ([`ACCEPT_GRACE`]) new connections are still accepted, covering the
//!    time endpoints take to propagate;
//! 3. the listener is closed (new connections are refused) and in-flight requests get up to
//!    `listen.drain_timeout` to finish, then remaining connections are dropped.

mod accept;
mod shards;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::config::Config;
use crate::context::AppState;
use crate::control::admin;
use crate::net::tls::{self, ReloadingCert};
use crate::net::upstream::Upstream;
use crate::telemetry;

pub use accept::ACCEPT_GRACE;
use accept::{http_builder, Acceptor};
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
        Self::bind_on(config, Arc::new(crate::clock::AnchoredClock::new())).await
    }

    /// As [`Server::bind`], with the checks and the store reading `clock`: tests run a
    /// sidecar in process on a `SetClock` and move it to let a lease or a window run out.
    pub async fn bind_on(config: Config, clock: crate::clock::SharedClock) -> anyhow::Result<Self> {
        let tls = match &config.listen.tls {
            Some(t) => {
                let resolver = ReloadingCert::load(&t.cert, &t.key)?;
                let server_config = tls::server_config(resolver.clone(), t.client_ca.as_deref())?;
                Some((TlsAcceptor::from(Arc::new(server_config)), resolver))
            }
            None => None,
        };
        let admin_tls = match &config.admin.tls {
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
                config.upstream.connect_timeout,
                config.upstream.timeout,
                config.upstream.ca.as_deref(),
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
        let candidate = crate::control::candidate::from_config(&config)
            .map_err(|problems| anyhow::anyhow!("candidate refused:\n{}", problems.join("\n")))?;
        let rules = crate::control::rules::from_config(&config)
            .map_err(|problems| anyhow::anyhow!("rules refused:\n{}", problems.join("\n")))?;
        if let Some(f) = &config.admin.token_file {
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
        let otlp = match &config.otlp {
            Some(o) => Some(telemetry::otlp::Exporters::start(o).map_err(anyhow::Error::msg)?),
            None => None,
        };
        let enforcement = if config.needs_store() {
            let load = crate::context::Enforcement::load(&config, otlp.as_ref(), clock);
            Some(Arc::new(load.await?))
        } else {
            None
        };
        let rcns = match &config.rcns {
            Some(r) => Some(crate::context::RcnsState::load(r).map_err(|problems| {
                anyhow::anyhow!("rcns.callers refused:\n{}", problems.join("\n"))
            })?),
            None => None,
        };
        // SO_REUSEPORT, so that the other data-plane runtimes can bind beside it (`shards`).
        let data_addr = tokio::net::lookup_host(&config.listen.addr)
            .await
            .ok()
            .and_then(|mut a| a.next())
            .with_context(|| format!("listen.addr: cannot resolve {}", config.listen.addr))?;
        let data = shards::reuse_port_listener(data_addr)
            .with_context(|| format!("listen.addr: cannot bind {}", config.listen.addr))?;
        let admin = TcpListener::bind(&config.admin.addr)
            .await
            .with_context(|| format!("admin.addr: cannot bind {}", config.admin.addr))?;
        let quote_channel = crate::context::QuoteChannelState::from_config(&config);
        let plane = Arc::new(crate::context::Plane {
            config,
            metrics,
            enforcement,
            shadow,
            upstream,
            bundle: arc_swap::ArcSwapOption::new(bundle),
            rules: Default::default(),
            candidate: arc_swap::ArcSwapOption::new(candidate.map(Arc::new)),
            otlp,
        });
        if let Some(r) = rules {
            crate::control::rules::publish(&plane, Arc::new(r));
        }
        Ok(Self {
            data,
            admin,
            tls,
            admin_tls,
            watched,
            state: Arc::new(AppState {
                quote_channel,
                admission,
                rcns,
                plane,
                mcp_drifted: Default::default(),
                mcp_checked: Default::default(),
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

    /// Serves until `shutdown` completes, then drains (see the module docs), on this runtime
    /// only.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> anyhow::Result<()> {
        self.run_sharded(shutdown, 1).await
    }

    /// As [`Server::run`], with the data plane on `runtimes` runtimes: this one and
    /// `runtimes - 1` current-thread runtimes on threads of their own (`shards`).
    pub async fn run_sharded(
        self,
        shutdown: impl Future<Output = ()>,
        runtimes: usize,
    ) -> anyhow::Result<()> {
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
        crate::admission::jwks_url::spawn(state.clone());
        crate::control::witnesses::spawn(state.plane.clone());
        crate::control::freeze::spawn_poll(state.plane.clone());
        crate::control::escrow_expiry::spawn(state.plane.clone());
        let tls = tls.map(|(acceptor, resolver)| {
            tokio::spawn(resolver.clone().watch(CERT_POLL));
            (acceptor, resolver)
        });
        let acceptor = tls.as_ref().map(|(a, _)| a.clone());

        let builder = http_builder(&state);
        let graceful = GracefulShutdown::new();
        let permits = Arc::new(Semaphore::new(state.config.limits.max_connections));
        let shards = shards::spawn(
            runtimes.saturating_sub(1),
            &shards::Shared {
                state: state.clone(),
                tls: acceptor.clone(),
                permits: permits.clone(),
                addr: data.local_addr()?,
            },
        );

        tracing::info!(
            data = %data.local_addr()?,
            admin = %admin_addr,
            tls = acceptor.is_some(),
            upstream = %state.config.upstream.url,
            runtimes = runtimes.max(1),
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
        shards.drain();
        // Keep accepting for a moment: endpoints take time to learn we are not ready.
        let _ = tokio::time::timeout(ACCEPT_GRACE, accept.run()).await;
        drop(accept);
        drop(data); // new connections are refused from here on
        let drain = state.config.listen.drain_timeout;
        if tokio::time::timeout(drain, graceful.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                ?drain,
                "drain timeout reached; closing remaining connections"
            );
        }
        shards.join().await;
        let _ = admin_stop_tx.send(true);
        let _ = admin_task.await;
        tracing::info!("palisade stopped");
        Ok(())
    }
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
