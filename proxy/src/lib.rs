//! Palisade, the sidecar: everything that does I/O.
//!
//! The deciding happens in `palisade-policy`; this crate gathers what the decisions need
//! (headers, bodies, files, the upstream's answers), asks, and acts:
//! - [`server`]: listeners, TLS, HTTP/1.1 and HTTP/2, limits, graceful drain;
//! - [`pipeline`]: one request from head to response, stage by stage;
//! - [`write`]: the enforced write path ([`enforce`] checks, [`idempotency`], [`escrow`]);
//! - [`authority`]: the lease endpoints; [`store`]: what survives a crash;
//! - [`upstream`]: the pooled client to the protected application;
//! - [`admin`]: health, readiness, metrics;
//! - [`cli`], [`demo`], [`sample_sor`]: the command line and its sample application.
#![forbid(unsafe_code)]

pub mod admin;
pub mod authority;
pub mod body;
pub mod bundle;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod drift_sink;
pub mod drift_webhook;
pub mod enforce;
pub mod escrow;
pub mod headers;
pub mod idempotency;
pub mod mcp;
pub mod output;
pub mod peer_identity;
pub mod pipeline;
pub mod problem;
pub mod reload;
pub mod replay;
pub mod sample_bundle;
pub mod sample_sor;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod tls;
pub mod upstream;
pub mod write;

use std::path::Path;

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

/// Writes a file readable only by its owner (private keys, quarantined payloads).
pub fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        opts.mode(0o600);
    }
    let mut f = opts.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()
}
