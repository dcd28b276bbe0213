//! Data-plane runtimes (issue 41): one current-thread tokio runtime per CPU, each on a thread
//! of its own with its own `SO_REUSEPORT` listener on the data-plane address, so the kernel
//! spreads connections over them and no request crosses a thread on its way through. The
//! first shard is the main runtime's (it also runs the admin listener and the background
//! tasks); [`spawn`] starts the others.
//!
//! What they share is what every request already shares: the `AppState` (the bundle's
//! `ArcSwap`, the store handles, the upstream pool, whose connections live on the runtime that
//! opened them) and the `limits.max_connections` semaphore. Each drains on its own when told
//! to stop: the accept grace, then its in-flight requests up to `listen.drain_timeout`.

use std::net::SocketAddr;
use std::sync::Arc;

use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{watch, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::context::AppState;
use crate::server::accept::{http_builder, Acceptor, ACCEPT_GRACE};

/// What every shard serves with.
#[derive(Clone)]
pub(crate) struct Shared {
    pub state: Arc<AppState>,
    pub tls: Option<TlsAcceptor>,
    pub permits: Arc<Semaphore>,
    pub addr: SocketAddr,
}

/// The shards beyond the main runtime's.
pub(crate) struct Shards {
    threads: Vec<std::thread::JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

/// A data-plane listener that other shards may bind beside (`SO_REUSEPORT`; the kernel
/// spreads new connections over them by a hash of the peer).
pub(crate) fn reuse_port_listener(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    #[cfg(unix)]
    socket.set_reuseport(true)?;
    socket.bind(addr)?;
    socket.listen(1024)
}

/// Starts `extra` shards on threads of their own.
pub(crate) fn spawn(extra: usize, shared: &Shared) -> Shards {
    let (stop, stopped) = watch::channel(false);
    let mut threads = Vec::new();
    for n in 1..=extra {
        let (shared, stopped) = (shared.clone(), stopped.clone());
        let thread = std::thread::Builder::new()
            .name(format!("palisade-data-{n}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(rt) => rt.block_on(serve(n, shared, stopped)),
                    Err(e) => {
                        tracing::error!(shard = n, error = %e, "data-plane runtime not started")
                    }
                }
            });
        match thread {
            Ok(t) => threads.push(t),
            Err(e) => tracing::error!(shard = n, error = %e, "data-plane thread not started"),
        }
    }
    Shards { threads, stop }
}

impl Shards {
    /// Tells every shard to stop accepting and drain (they do so alongside the main one).
    pub fn drain(&self) {
        let _ = self.stop.send(true);
    }

    /// Waits until every shard has drained and its runtime is gone.
    pub async fn join(self) {
        self.drain();
        for t in self.threads {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
    }
}

async fn serve(n: usize, shared: Shared, mut stopped: watch::Receiver<bool>) {
    let listener = match reuse_port_listener(shared.addr) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(shard = n, addr = %shared.addr, error = %e, "data-plane shard cannot bind; the others serve");
            return;
        }
    };
    let graceful = GracefulShutdown::new();
    let accept = Acceptor {
        listener: &listener,
        permits: shared.permits.clone(),
        state: &shared.state,
        builder: http_builder(&shared.state),
        tls: shared.tls.clone(),
        graceful: &graceful,
    };
    tokio::select! {
        _ = accept.run() => {}
        _ = stopped.wait_for(|stop| *stop) => {}
    }
    // As the main shard does: accept for a moment more, then refuse, then drain.
    let _ = tokio::time::timeout(ACCEPT_GRACE, accept.run()).await;
    drop(accept);
    drop(listener);
    let drain = shared.state.config.listen.drain_timeout;
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            shard = n,
            ?drain,
            "drain timeout reached; closing remaining connections"
        );
    }
}
