//! AGTP-RCNS over HTTP (seed 000; SPEC §13 `[rcns]`; issue 21): PROPOSE, the inventory
//! (DISCOVER /patterns, DISCOVER /contracts, INSPECT), revocation's data-plane side, and
//! unregistered pairs addressed directly. Deciding is `palisade_rich::rcns`; this layer
//! reads the request, keeps the state in the store, and answers.
//!
//! ```text
//! PROPOSE <any>            | POST /.well-known/agtp/propose         → propose
//! DISCOVER /patterns       | GET  /.well-known/agtp/patterns        → inventory (even when off)
//! DISCOVER /contracts      | GET  /.well-known/agtp/contracts       → inventory, the caller's
//! INSPECT /contracts/{id}  | GET  /.well-known/agtp/contracts/{id}  → INSPECT target=contract
//! INSPECT /rcns-attempts/{id} | GET /.well-known/agtp/rcns-attempts/{id} → target=rcns-attempt
//! INSPECT <any>?target=contract&id=…  (and target=rcns-attempt)
//! <pair a recipe matches, no binding serves> with Allow-RCNS: true → delivery (461 | 263)
//! ```

mod answer;
mod headers;
mod identity;
mod inventory;
mod invoke;
mod propose;
mod steps;
mod tool_steps;

use std::sync::Arc;

use http::Method;
use hyper::body::Incoming;

pub use headers::{
    allowed, ALLOW_RCNS, AUTHORITY_SCOPE, CONTRACT_SYNTHESIZED, MAX_ADMIN_LISTED, SESSION,
    WELL_KNOWN,
};

use crate::context::{AppState, Call, Enforcement};

/// What an RCNS request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Propose,
    Patterns,
    Contracts,
    Contract(String),
    Attempt(String),
    /// An unregistered pair a recipe matches, addressed directly with `Allow-RCNS: true`.
    Implicit,
    /// A request under a synthesized contract (`Contract-Synthesized: <id>`).
    Invoke(String),
    /// An RCNS method or path that names nothing.
    Unknown,
}

/// Which RCNS surface, if any, `parts` addresses. Costs one method comparison and one prefix
/// test on every other request; the implicit route is looked at only when `Allow-RCNS` is
/// sent and `[rcns]` is configured.
pub fn route(state: &AppState, parts: &http::request::Parts, path: &str) -> Option<Route> {
    let method = parts.method.as_str();
    let query = parts.uri.query();
    if method == "PROPOSE" {
        return Some(Route::Propose);
    }
    let named = |rest: &str| -> Option<Route> {
        Some(match rest.split('/').collect::<Vec<_>>().as_slice() {
            ["patterns"] => Route::Patterns,
            ["contracts"] => Route::Contracts,
            ["contracts", id] if !id.is_empty() => Route::Contract((*id).to_owned()),
            ["rcns-attempts", id] if !id.is_empty() => Route::Attempt((*id).to_owned()),
            _ => return None,
        })
    };
    if let Some(rest) = path.strip_prefix(WELL_KNOWN) {
        return Some(match (&parts.method, rest) {
            (&Method::POST, "propose") => Route::Propose,
            (&Method::GET | &Method::HEAD, _) => named(rest).unwrap_or(Route::Unknown),
            _ => Route::Unknown,
        });
    }
    match method {
        "DISCOVER" => {
            let r = path.strip_prefix('/').and_then(named);
            return Some(match r {
                Some(r @ (Route::Patterns | Route::Contracts)) => r,
                _ => Route::Unknown,
            });
        }
        "INSPECT" => {
            let by_query = inspect_query(query.unwrap_or(""));
            let by_path = path.strip_prefix('/').and_then(named);
            return Some(match (by_query, by_path) {
                (Some(r), _) => r,
                (None, Some(r @ (Route::Contract(_) | Route::Attempt(_)))) => r,
                _ => Route::Unknown,
            });
        }
        _ => {}
    }
    let rcns = state.rcns.as_ref()?;
    if let Some(id) = parts.headers.get(CONTRACT_SYNTHESIZED) {
        // Whatever it names, it is ours to answer: a contract id never reaches the SoR.
        let id = id.to_str().unwrap_or_default().to_owned();
        return Some(Route::Invoke(id));
    }
    let allow = parts.headers.get(ALLOW_RCNS)?;
    if !rcns.config.enabled || !allowed(Some(allow)) {
        return None;
    }
    let bundle = state.bundle.load();
    let b = bundle.as_deref()?;
    let recipes = b.recipes.as_deref()?;
    (recipes.find(method, path).is_some() && b.route(method, path).is_none())
        .then_some(Route::Implicit)
}

/// `target=contract&id=…` or `target=rcns-attempt&id=…`.
fn inspect_query(query: &str) -> Option<Route> {
    let (mut target, mut id) = (None, None);
    // Our ids and the two targets need no percent-decoding; an encoded one names nothing.
    for (k, v) in query.split('&').take(16).filter_map(|p| p.split_once('=')) {
        match k {
            "target" => target = Some(v.to_owned()),
            "id" | "synthesis_id" | "attempt_id" => id = Some(v.to_owned()),
            _ => {}
        }
    }
    let id = id.filter(|i| !i.is_empty())?;
    match target.as_deref()? {
        "contract" => Some(Route::Contract(id)),
        "rcns-attempt" => Some(Route::Attempt(id)),
        _ => None,
    }
}

/// Answers an RCNS request. `presented`: the credential admission took off the request.
pub async fn handle(
    call: Call<'_>,
    enf: &Arc<Enforcement>,
    route: Route,
    req: http::Request<Incoming>,
    presented: Option<&crate::admission::Presented>,
) -> crate::enforce::own::Staged {
    let Call { state, conn, cx } = call;
    let (parts, body) = req.into_parts();
    let who = identity::resolve(state.rcns.as_ref(), conn, &parts);
    let negotiation = propose::Negotiation {
        plane: &state.plane,
        enf,
        rcns: state.rcns.as_ref(),
    };
    match route {
        Route::Invoke(id) => {
            let inv = invoke::Invocation {
                id,
                who: &who,
                presented,
            };
            let req = http::Request::from_parts(parts, body);
            invoke::handle(Call::new(state, conn, cx), enf, req, inv).await
        }
        Route::Propose => propose::handle(negotiation, &parts, body, &who, cx).await,
        Route::Implicit => propose::implicit(negotiation, &parts, &who, cx).await,
        Route::Patterns => {
            let enabled = state.rcns.as_ref().is_some_and(|r| r.config.enabled);
            inventory::patterns(enabled, state.bundle.load().as_deref())
        }
        Route::Contracts => inventory::contracts(state.recorder(), enf, &who, cx).await,
        Route::Contract(id) => inventory::contract(state.recorder(), enf, &who, &id, cx).await,
        Route::Attempt(id) => inventory::attempt(state.recorder(), enf, &who, &id, cx).await,
        Route::Unknown => {
            // As for any other reserved path that names nothing: answered, not receipted (a
            // scan of made-up paths must not become durable writes).
            let failure = crate::net::problem::Failure::NoEndpoint(
                "no AGTP endpoint here: PROPOSE, DISCOVER /patterns, DISCOVER /contracts, INSPECT /contracts/{id}, INSPECT /rcns-attempts/{id}, or their /.well-known/agtp/ paths",
            );
            Err(crate::enforce::own::Own::failed(failure, &cx.trace_id))
        }
    }
}
