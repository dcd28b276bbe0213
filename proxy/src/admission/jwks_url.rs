//! Issuers' keys from their `jwks_uri` (SPEC §13): each `https://` entry of `admission.jwks`
//! is fetched when the sidecar starts, again when its `Cache-Control: max-age` runs out
//! (bounded by `jwks_refresh.min` and `.max`; without one, `min`), and again when a token
//! names a `kid` the keys in force do not hold, at most once per `jwks_refresh.min` however
//! many such tokens arrive. A document that does not read as keys, or an issuer that does not
//! answer, leaves the last good keys in force (`palisade_jwks_reloads_total{result}`:
//! `applied`, `unchanged`, `rejected`, `unreachable`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use http::{header, Request};

use super::https::call;
use crate::context::{AdmissionState, AppState};

/// Most bytes of a JWKS document, as of a file.
const MAX_DOC: usize = 1 << 20;

/// What one look at a URL came to.
enum Looked {
    /// Fetched; new keys are in force. The next look is due after this long.
    Applied(Duration),
    Unchanged(Duration),
    /// Fetched, unusable, or not answered: the keys in force stay.
    Failed,
    /// Fetched less than `jwks_refresh.min` ago: not fetched again.
    Recent,
}

/// Starts one task per URL: a fetch now, then again whenever the last answer's age runs out.
pub fn spawn(state: Arc<AppState>) {
    let Some(adm) = &state.admission else {
        return;
    };
    for i in 0..adm.urls.len() {
        let state = state.clone();
        tokio::spawn(async move {
            let Some(adm) = &state.admission else {
                return;
            };
            loop {
                let next = match look(adm, i, true).await {
                    Looked::Applied(next) | Looked::Unchanged(next) => next,
                    Looked::Failed | Looked::Recent => adm.config.jwks_refresh_min,
                };
                tokio::time::sleep(next).await;
            }
        });
    }
}

/// A token named a `kid` the keys in force lack: each URL not fetched in the last
/// `jwks_refresh.min` is fetched now (a caller that finds a fetch under way waits for it and
/// does not fetch again). Whether new keys came into force.
pub async fn refresh_for_unknown_kid(adm: &AdmissionState) -> bool {
    let mut applied = false;
    for i in 0..adm.urls.len() {
        applied |= matches!(look(adm, i, false).await, Looked::Applied(_));
    }
    applied
}

async fn look(adm: &AdmissionState, i: usize, due: bool) -> Looked {
    let Some(src) = adm.urls.get(i) else {
        return Looked::Failed;
    };
    let _one = src.fetching.lock().await;
    let (min, max) = (adm.config.jwks_refresh_min, adm.config.jwks_refresh_max);
    let last = src.last.lock().ok().and_then(|l| *l);
    if !due && last.is_some_and(|t| t.elapsed() < min) {
        return Looked::Recent;
    }
    if let Ok(mut l) = src.last.lock() {
        *l = Some(Instant::now());
    }
    let count = |result: &'static str| {
        metrics::counter!(crate::telemetry::JWKS_RELOADS, "result" => result).increment(1);
    };
    let (doc, max_age) = match fetch(&src.url).await {
        Ok(got) => got,
        Err(why) => {
            count("unreachable");
            tracing::warn!(url = %src.url, error = %why, "admission JWKS URL not fetched; the keys in force stay");
            return Looked::Failed;
        }
    };
    let next = max_age.unwrap_or(min).clamp(min, max);
    if src
        .doc
        .lock()
        .ok()
        .is_some_and(|d| d.as_deref() == Some(&doc[..]))
    {
        count("unchanged");
        return Looked::Unchanged(next);
    }
    // The new document must read as keys alone and beside the others before it replaces the
    // last good one.
    let previous = src.doc.lock().ok().and_then(|mut d| d.replace(doc));
    match adm.current_keys() {
        Ok(keys) => {
            let n = keys.len();
            adm.rotate(keys);
            count("applied");
            tracing::info!(url = %src.url, keys = n, "admission keys fetched");
            Looked::Applied(next)
        }
        Err(problems) => {
            if let Ok(mut d) = src.doc.lock() {
                *d = previous;
            }
            count("rejected");
            tracing::warn!(url = %src.url, problems = %problems.join("; "), "admission JWKS URL refused; the keys in force stay");
            Looked::Failed
        }
    }
}

/// GET the document: 200 and at most 1 MiB within 5 s; its `Cache-Control: max-age`.
async fn fetch(url: &str) -> Result<(Vec<u8>, Option<Duration>), String> {
    let req = Request::get(url)
        .header(header::ACCEPT, "application/jwk-set+json, application/json")
        .body(http_body_util::Full::default())
        .map_err(|e| e.to_string())?;
    let (headers, body) = call(req, MAX_DOC).await?;
    let max_age = headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|d| {
            let (k, v) = d.trim().split_once('=')?;
            k.eq_ignore_ascii_case("max-age")
                .then(|| v.trim().trim_matches('"').parse::<u64>().ok())?
        })
        .map(Duration::from_secs);
    Ok((body.to_vec(), max_age))
}
