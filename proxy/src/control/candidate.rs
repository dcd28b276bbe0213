//! The candidate bundle (SPEC §15, `rich.candidate`): read at start (one that does not load
//! stops the start) and with every reload (one that does not load leaves the one in shadow).

use std::sync::Arc;

use crate::config::Config;
use crate::context::{Candidate, Plane};

/// The candidate the config names; `Ok(None)` without `rich.candidate`.
pub fn from_config(config: &Config) -> Result<Option<Candidate>, Vec<String>> {
    let Some(c) = &config.candidate else {
        return Ok(None);
    };
    let bundle = crate::control::bundle::load(&c.lockfile, &c.contracts, None).map_err(|p| {
        p.into_iter()
            .map(|l| format!("rich.candidate: {l}"))
            .collect::<Vec<_>>()
    })?;
    let rules = match &c.rules {
        None => None,
        Some(path) => Some(crate::control::rules::load(path).map_err(|p| {
            p.into_iter()
                .map(|l| format!("rich.candidate.rules: {l}"))
                .collect::<Vec<_>>()
        })?),
    };
    Ok(Some(Candidate::new(
        bundle,
        rules,
        crate::clock::WallClock::now_ms(),
    )))
}

/// Reads the candidate again; the one in shadow (and its counts) stays when it is the same.
pub fn reload(plane: &Plane) -> Result<(), Vec<String>> {
    let loaded = match from_config(&plane.config)? {
        Some(c) => c,
        None => return Ok(()),
    };
    let same = |a: &Candidate| {
        a.bundle.digest == loaded.bundle.digest
            && a.rules.as_ref().map(|r| r.digest()) == loaded.rules.as_ref().map(|r| r.digest())
    };
    if plane.candidate.load().as_deref().is_some_and(same) {
        return Ok(());
    }
    tracing::info!(digest = %loaded.bundle.digest, "candidate bundle in shadow");
    plane.candidate.store(Some(Arc::new(loaded)));
    Ok(())
}

/// `GET /admin/v1/shadow`: the candidate in shadow and its counts since it loaded, per
/// operation and decision pair (`allowed`, `held:<rule>`, `refused:<code>`,
/// `refused:rule:<rule>`); `{"candidate": null}` without one.
pub fn shadow(plane: &Plane) -> serde_json::Value {
    let Some(c) = plane.candidate.load_full() else {
        return serde_json::json!({"candidate": null});
    };
    let t = c.tally();
    let counts: Vec<serde_json::Value> = t
        .pairs
        .iter()
        .map(|(op, f, k, n)| {
            serde_json::json!({"operation": op, "in_force": f, "candidate": k, "writes": n,
                               "agree": f == k})
        })
        .collect();
    serde_json::json!({
        "candidate": {
            "lockfile_digest": c.bundle.digest,
            "rules_digest": c.rules.as_ref().map(|r| r.digest_text().to_owned()),
            "loaded_at": palisade_policy::lease::format_rfc3339_ms(c.loaded_ms),
        },
        "compared": t.compared,
        "disagreed": t.disagreed,
        "uncounted": t.uncounted,
        "counts": counts,
    })
}
