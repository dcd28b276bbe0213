//! Hot swap of the RICH bundle (SPEC §7): on `POST /admin/v1/reload`, SIGHUP, or a change of
//! the files (`rich.watch`), compile the bundle again and publish it with one pointer swap.
//!
//! A request loads the bundle once and is decided wholly by that version. A bundle that fails
//! to compile never replaces the one in force: the failure is logged, counted
//! (`palisade_lockfile_reloads_total{result="rejected"}`) and reported as a `lockfile` drift
//! event. Reloads are serialised, so two triggers at once cannot publish out of order.
//!
//! The watcher polls (every [`WATCH_INTERVAL`]) a fingerprint of the lockfile and the contract
//! files as seen through their links — size, mtime and inode — and reloads once it has seen
//! the same new fingerprint twice in a row: editors that write in steps and a Kubernetes
//! ConfigMap update (a `..data` symlink swap) both settle before the reload reads them.

use std::sync::Arc;
use std::time::Duration;

use palisade_policy::drift::{DriftEvent, EventContext};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{AppState, Plane};
use crate::telemetry::{LOCKFILE_INFO, LOCKFILE_RELOADS};

pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// What a reload did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reloaded {
    /// A new bundle is in force.
    Applied { digest: String },
    /// The files compile to the bundle already in force.
    Unchanged { digest: String },
}

static RELOAD_LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Compiles the bundle the config names and publishes it, and reads the operator's rules
/// again (SPEC §15). Each of them that does not load leaves the one in force; the answer lists
/// the problems of both.
pub async fn reload(state: &AppState) -> Result<Reloaded, Vec<String>> {
    let _serial = RELOAD_LOCK.lock().await;
    // The RCNS callers file goes with the bundle whose recipes it authorizes; a file that
    // does not parse leaves the previous one in force, as a bundle that does not compile.
    if let Some(r) = &state.rcns {
        if let Err(problems) = r.reload() {
            tracing::warn!(problems = %problems.join("; "), "rcns callers refused; the previous file stays in force");
        }
    }
    let mut rules = crate::control::rules::reload(&state.plane);
    if let Err(problems) = crate::control::candidate::reload(&state.plane) {
        tracing::warn!(problems = %problems.join("; "), "candidate refused; the one in shadow stays");
        match &mut rules {
            Ok(()) => rules = Err(problems),
            Err(p) => p.extend(problems),
        }
    }
    let bundle = if state.config.lockfile.is_none() && state.config.rules.is_some() {
        // Rules alone: nothing to compile.
        Ok(Reloaded::Unchanged {
            digest: String::new(),
        })
    } else {
        reload_bundle(&state.plane).await
    };
    match (bundle, rules) {
        (Ok(r), Ok(())) => Ok(r),
        (Err(p), Ok(())) | (Ok(_), Err(p)) => Err(p),
        (Err(mut p), Err(q)) => {
            p.extend(q);
            Err(p)
        }
    }
}

async fn reload_bundle(state: &Plane) -> Result<Reloaded, Vec<String>> {
    let config = state.config.clone();
    // Compiling is CPU work (schemas): off the request threads' way.
    let compiled =
        tokio::task::spawn_blocking(move || crate::control::bundle::from_config(&config))
            .await
            .map_err(|e| vec![format!("bundle compile task failed: {e}")])?;
    match compiled {
        Ok(Some(new)) => {
            let old = state.bundle.load_full();
            if old.as_ref().is_some_and(|o| o.digest == new.digest) {
                metrics::counter!(LOCKFILE_RELOADS, "result" => "unchanged").increment(1);
                return Ok(Reloaded::Unchanged {
                    digest: new.digest.clone(),
                });
            }
            let digest = new.digest.clone();
            tracing::info!(digest = %digest, binding_id = %new.binding_id, capabilities = new.capabilities.len(), "rich bundle reloaded");
            state.bundle.store(Some(new));
            if let Some(o) = old {
                metrics::gauge!(LOCKFILE_INFO, "digest" => o.digest.clone()).set(0.0);
            }
            metrics::gauge!(LOCKFILE_INFO, "digest" => digest.clone()).set(1.0);
            metrics::counter!(LOCKFILE_RELOADS, "result" => "applied").increment(1);
            Ok(Reloaded::Applied { digest })
        }
        Ok(None) => Err(vec!["no rich.lockfile configured".into()]),
        Err(problems) => {
            metrics::counter!(LOCKFILE_RELOADS, "result" => "rejected").increment(1);
            tracing::warn!(problems = %problems.join("; "), "rich bundle refused; the previous one stays in force");
            if let Some(enf) = &state.enforcement {
                let refusal = Refusal::new(
                    ErrorCode::BundleRejected,
                    "the bundle on disk does not compile; the previous one stays in force",
                );
                let now = enf.now_rfc3339();
                let current = state.bundle.load_full();
                if let Some(event) = DriftEvent::for_refusal(
                    &refusal,
                    EventContext {
                        event_id: uuid::Uuid::now_v7().to_string(),
                        timestamp: now,
                        trace_id: uuid::Uuid::new_v4().simple().to_string(),
                        binding_id: current.as_ref().map(|b| b.binding_id.clone()),
                        expected_digest: current.as_ref().map(|b| b.digest.clone()),
                        observed_identifier: state
                            .config
                            .lockfile
                            .as_ref()
                            .map(|p| p.display().to_string()),
                        evidence: None,
                        caller: None,
                    },
                ) {
                    enf.drift.emit(&event);
                }
            }
            Err(problems)
        }
    }
}

/// The bundle files as they look at one moment: path, size, mtime, inode of each.
pub type Fingerprint = Vec<(String, u64, i128, u64)>;

/// The bundle files as they look now: changes when any is replaced, resized or touched.
pub fn fingerprint(config: &crate::config::Config) -> Fingerprint {
    use std::os::unix::fs::MetadataExt as _;
    let mut out = Vec::new();
    let mut add = |path: &std::path::Path| {
        if let Ok(m) = std::fs::metadata(path) {
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos() as i128);
            out.push((path.display().to_string(), m.len(), mtime, m.ino()));
        }
    };
    if let Some(l) = &config.lockfile {
        add(l);
    }
    if let Some(r) = &config.rules {
        add(&r.file);
    }
    if let Some(c) = &config.contracts {
        if let Ok(dir) = std::fs::read_dir(c) {
            let mut paths: Vec<_> = dir
                .filter_map(Result::ok)
                .filter(|e| !e.file_name().to_string_lossy().starts_with(".."))
                .map(|e| e.path())
                .collect();
            paths.sort();
            for p in paths {
                add(&p);
            }
        }
    }
    out
}

/// Starts the SIGHUP listener and, with `rich.watch`, the file watcher. `loaded`: the files
/// as they were when the bundle in force was read. The watcher starts from it, not from the
/// files as they are when its task first runs, which may be after a change it would then
/// never see (a ConfigMap swapped while the sidecar starts).
pub fn spawn_triggers(state: Arc<AppState>, loaded: Fingerprint) {
    if state.config.lockfile.is_none() && state.config.rules.is_none() {
        return;
    }
    #[cfg(unix)]
    {
        let state = state.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                tracing::warn!("SIGHUP cannot be watched; reload with POST /admin/v1/reload");
                return;
            };
            while hup.recv().await.is_some() {
                let _ = reload(&state).await;
            }
        });
    }
    if state.config.watch {
        tokio::spawn(async move {
            let mut applied = loaded;
            let mut seen = applied.clone();
            let mut tick = tokio::time::interval(WATCH_INTERVAL);
            loop {
                tick.tick().await;
                let now = fingerprint(&state.config);
                if now != applied && now == seen {
                    // Stable for one interval: read it.
                    let _ = reload(&state).await;
                    applied = now.clone();
                }
                seen = now;
            }
        });
    }
}
