//! The issuers' keys follow their JWKS files: polled every [`WATCH_INTERVAL`], re-read once a
//! change has held for one interval (a Kubernetes Secret update is a `..data` link swap), and
//! swapped whole. A file that does not read as keys leaves the keys in force and is logged
//! and counted (`palisade_jwks_reloads_total{result="rejected"}`).

use std::sync::Arc;
use std::time::Duration;

use crate::context::AppState;

pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// The JWKS files as they look now: changes when any is replaced, resized or touched.
fn fingerprint(paths: &[std::path::PathBuf]) -> Vec<(u64, i128, u64)> {
    use std::os::unix::fs::MetadataExt as _;
    paths
        .iter()
        .map(|p| match std::fs::metadata(p) {
            Ok(m) => {
                let mtime = m
                    .modified()
                    .ok()
                    .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_nanos() as i128);
                (m.len(), mtime, m.ino())
            }
            Err(_) => (0, 0, 0),
        })
        .collect()
}

/// Re-reads the JWKS files now; `Err` (keys unchanged) lists the problems.
pub fn reload(state: &AppState) -> Result<usize, Vec<String>> {
    let Some(adm) = &state.admission else {
        return Ok(0);
    };
    match adm.current_keys() {
        Ok(keys) => {
            let n = keys.len();
            adm.rotate(keys);
            metrics::counter!(crate::telemetry::JWKS_RELOADS, "result" => "applied").increment(1);
            tracing::info!(keys = n, "admission keys reloaded");
            Ok(n)
        }
        Err(problems) => {
            metrics::counter!(crate::telemetry::JWKS_RELOADS, "result" => "rejected").increment(1);
            tracing::warn!(problems = %problems.join("; "), "admission.jwks refused; the keys in force stay");
            Err(problems)
        }
    }
}

/// Starts the watcher when admission is configured.
pub fn spawn_watch(state: Arc<AppState>) {
    let Some(adm) = &state.admission else {
        return;
    };
    let paths = adm.config.jwks.clone();
    tokio::spawn(async move {
        let mut applied = fingerprint(&paths);
        let mut seen = applied.clone();
        let mut tick = tokio::time::interval(WATCH_INTERVAL);
        loop {
            tick.tick().await;
            let now = fingerprint(&paths);
            if now != applied && now == seen {
                let _ = reload(&state);
                applied = now.clone();
            }
            seen = now;
        }
    });
}
