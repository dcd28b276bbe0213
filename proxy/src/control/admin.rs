//! The admin listener (SPEC §9): health, readiness, metrics, and the escrow decisions
//! (`POST /admin/v1/escrow/{id}/approve|reject`, `GET /admin/v1/escrow`).
//!
//! HTTP/1.1 (and h2 over TLS) on `admin.addr` (loopback by default), over TLS with
//! `admin.tls`. With `admin.token_file` or `admin.allowed_spiffe_ids`, every call but the
//! probes needs the admin token or an allowed client certificate (`admin_auth`). It is served apart from the data
//! plane so a flood of agent traffic cannot starve probes, and it stops last on shutdown so
//! that `/readyz` keeps answering 503 while the data plane drains.

use std::convert::Infallible;
use std::sync::Arc;

use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

use crate::context::{AppState, Plane};
use crate::control::{admin_auth, escrow};
use crate::net::body::{self, ProxyBody};

/// How often histogram samples are folded into their buckets (see [`serve`]).
const UPKEEP_EVERY: std::time::Duration = std::time::Duration::from_millis(250);

pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    state: Arc<AppState>,
    metrics: PrometheusHandle,
    mut stop: watch::Receiver<bool>,
) {
    // The exporter keeps every histogram sample until an upkeep folds them into buckets, so
    // the time between upkeeps bounds the memory: every 5 s, a sidecar proxying 65k req/s
    // held ≈ 10 MiB of samples (issue 19, most of its anonymous RSS); every 250 ms, ≈ 0.5 MiB.
    // Folding costs the same per sample either way.
    let upkeep = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                metrics.run_upkeep();
            }
        })
    };
    loop {
        let (stream, _) = tokio::select! {
            a = listener.accept() => match a {
                Ok(a) => a,
                Err(_) => continue,
            },
            _ = stop.changed() => break,
        };
        let state = state.clone();
        let metrics = metrics.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let header_timeout = state.config.limits.header_timeout;
            // Slow headers are cut here as on the data plane: a stalled client must not
            // hold admin connections open. The TLS handshake counts against the same limit.
            let mut builder = auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout);
            match tls {
                None => {
                    let svc =
                        service_fn(move |req| respond(req, state.clone(), metrics.clone(), None));
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                }
                Some(acceptor) => {
                    let Ok(Ok(stream)) =
                        tokio::time::timeout(header_timeout, acceptor.accept(stream)).await
                    else {
                        return;
                    };
                    // A verified client certificate's SPIFFE ID (admin_auth decides per call).
                    let peer: Option<Arc<str>> = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(|leaf| crate::net::identity::spiffe_id(leaf.as_ref()))
                        .map(Arc::from);
                    let svc = service_fn(move |req| {
                        respond(req, state.clone(), metrics.clone(), peer.clone())
                    });
                    let _ = builder.serve_connection(TokioIo::new(stream), svc).await;
                }
            }
        });
    }
    upkeep.abort();
}

async fn respond(
    req: Request<Incoming>,
    state: Arc<AppState>,
    metrics: PrometheusHandle,
    peer_spiffe_id: Option<Arc<str>>,
) -> Result<Response<ProxyBody>, Infallible> {
    // The listener's own origin is https:// when it serves TLS.
    let tls_listener = state.config.admin.tls.is_some();
    let text = |status: StatusCode, body: &'static str| {
        let mut r = Response::new(body::full(body));
        *r.status_mut() = status;
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("text/plain"),
        );
        r
    };
    let path = req.uri().path();
    // What a web page could send is refused before anything else (SPEC §9).
    let authority = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| req.uri().authority().map(|a| a.as_str()));
    let credential =
        state.config.admin.token_file.is_some() || !state.config.admin.spiffe_ids.is_empty();
    if let Err(why) = crate::control::admin_origin::check_site(
        req.method(),
        path,
        req.headers(),
        authority,
        tls_listener,
        credential,
    ) {
        return Ok(crate::control::admin_origin::refused(why));
    }
    if admin_auth::guarded(req.method(), path)
        && !admin_auth::allowed(&state.config, req.headers(), peer_spiffe_id.as_deref())
    {
        return Ok(admin_auth::refused());
    }
    if let Err(why) = crate::control::admin_origin::check_media_type(req.method(), req.headers()) {
        return Ok(crate::control::admin_origin::refused(why));
    }
    let json = |status: StatusCode, doc: serde_json::Value| body::json_response(status, &doc);
    match (req.method(), path) {
        (&Method::POST, "/admin/v1/reload") => {
            return Ok(match crate::control::reload::reload(&state).await {
                Ok(crate::control::reload::Reloaded::Applied { digest }) => json(
                    StatusCode::OK,
                    serde_json::json!({"result": "applied", "digest": digest,
                        "rules_digest": state.rules_digest()}),
                ),
                Ok(crate::control::reload::Reloaded::Unchanged { digest }) => json(
                    StatusCode::OK,
                    serde_json::json!({"result": "unchanged", "digest": digest,
                        "rules_digest": state.rules_digest()}),
                ),
                Err(problems) => json(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    serde_json::json!({"result": "rejected", "problems": problems,
                        "digest": state.bundle.load_full().map(|b| b.digest.clone()),
                        "rules_digest": state.rules_digest()}),
                ),
            });
        }
        (&Method::GET, "/admin/v1/whoami") => {
            // Who this credential is (the console's login checks it): its name, and how many
            // distinct names release a held write.
            let name = admin_auth::who(&state.config, req.headers(), peer_spiffe_id.as_deref());
            return Ok(json(
                StatusCode::OK,
                serde_json::json!({"name": name,
                    "approvals_required": state.config.escrow.approvals}),
            ));
        }
        (&Method::GET, "/admin/v1/approvals") => {
            let (query, headers) = (req.uri().query(), req.headers());
            return Ok(crate::control::approvals::list(&state, query, headers).await);
        }
        (&Method::GET, "/admin/v1/receipts") => {
            let (query, headers) = (req.uri().query(), req.headers());
            return Ok(crate::control::receipts::export(&state, query, headers).await);
        }
        (&Method::GET, "/admin/v1/rules") => {
            return Ok(json(StatusCode::OK, crate::control::rules::list(&state)));
        }
        (&Method::GET, "/admin/v1/shadow") => {
            return Ok(json(
                StatusCode::OK,
                crate::control::candidate::shadow(&state),
            ));
        }
        (&Method::GET, "/admin/v1/budgets") => {
            return Ok(json(
                StatusCode::OK,
                crate::control::freeze::budgets(&state),
            ));
        }
        (&Method::GET, "/admin/v1/drift-events/stream") => {
            let stream = crate::control::drift_stream::stream;
            return Ok(stream(&state, req.uri().query(), req.headers()));
        }
        (&Method::GET, "/admin/v1/drift-events") => {
            // ?after=<cursor>&limit=N (default 100, at most 1000).
            let mut after = 0u64;
            let mut limit = 100usize;
            for pair in req.uri().query().unwrap_or("").split('&') {
                match pair.split_once('=') {
                    Some(("after", v)) => after = v.parse().unwrap_or(0),
                    Some(("limit", v)) => limit = v.parse().unwrap_or(100).clamp(1, 1000),
                    _ => {}
                }
            }
            let page = match &state.enforcement {
                Some(enf) => enf.drift.page(after, limit),
                None => crate::telemetry::drift::Page {
                    events: Vec::new(),
                    next: after,
                },
            };
            return Ok(json(
                StatusCode::OK,
                serde_json::json!({"events": page.events, "next": page.next}),
            ));
        }
        (&Method::GET, "/admin/v1/lockfile") => {
            return Ok(match state.bundle.load_full() {
                Some(b) => json(StatusCode::OK, crate::control::bundle::summary(&b)),
                None => json(
                    StatusCode::NOT_FOUND,
                    serde_json::json!({"error": "no bundle configured"}),
                ),
            });
        }
        _ => {}
    }
    if let (&Method::GET, Some(rest)) = (req.method(), path.strip_prefix("/admin/v1/log/")) {
        return Ok(crate::control::log::get(&state, rest, req.uri().query()).await);
    }
    if let (&Method::GET, Some(resource)) = (req.method(), path.strip_prefix("/admin/v1/fences/")) {
        return Ok(fence(&state, resource).await);
    }
    if let Some(rest) = path.strip_prefix("/admin/v1/rcns/contracts") {
        let resp = match (req.method(), rest) {
            (&Method::GET, "" | "/") => crate::control::rcns::list(&state).await,
            (&Method::POST, r) => match r.strip_prefix('/').and_then(|r| r.split_once('/')) {
                Some((id, "revoke")) if !id.is_empty() => {
                    crate::control::rcns::revoke(&state, id).await
                }
                _ => text(StatusCode::NOT_FOUND, "not found\n"),
            },
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        };
        return Ok(resp);
    }
    if let Some(rest) = path.strip_prefix("/admin/v1/freeze") {
        let by = admin_auth::who(&state.config, req.headers(), peer_spiffe_id.as_deref());
        return Ok(match (req.method().clone(), rest) {
            (Method::POST, "" | "/") => {
                crate::control::freeze::make(state.plane.clone(), req, by).await
            }
            (Method::GET, "" | "/") => crate::control::freeze::list(state.plane.clone()).await,
            (Method::DELETE, r) => match r.strip_prefix('/').filter(|id| !id.is_empty()) {
                Some(id) => crate::control::freeze::lift(state.plane.clone(), id, by).await,
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
            _ => text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n"),
        });
    }
    if let Some(rest) = path.strip_prefix("/admin/v1/escrow") {
        let by = admin_auth::who(&state.config, req.headers(), peer_spiffe_id.as_deref());
        let resp = match (req.method().clone(), rest) {
            (Method::GET, "" | "/") => escrow::list(state.plane.clone()).await,
            (Method::POST, r) => match r.strip_prefix('/').and_then(|r| r.split_once('/')) {
                Some((id, "approve")) if !id.is_empty() => {
                    let id = id.to_owned();
                    escrow::approve(state.plane.clone(), id, by, req.into_body()).await
                }
                Some((id, "reject")) if !id.is_empty() => {
                    let id = id.to_owned();
                    escrow::reject(state.plane.clone(), id, by, req.into_body()).await
                }
                _ => text(StatusCode::NOT_FOUND, "not found\n"),
            },
            (Method::GET, r) => match r.strip_prefix('/').filter(|id| !id.contains('/')) {
                Some(id) => crate::control::escrow_view::detail(&state, id).await,
                None => text(StatusCode::NOT_FOUND, "not found\n"),
            },
            _ => text(StatusCode::NOT_FOUND, "not found\n"),
        };
        return Ok(resp);
    }
    if let (&Method::GET, Some(rest)) = (req.method(), path.strip_prefix("/ui")) {
        return Ok(crate::control::console::asset(rest));
    }
    Ok(match (req.method(), path) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET, "/readyz") => {
            // Ready: not draining, and the store answers (SPEC §9).
            let store_ok = match &state.enforcement {
                Some(enf) => enf.store.ready().await.is_ok(),
                None => true,
            };
            if state.is_draining() {
                text(StatusCode::SERVICE_UNAVAILABLE, "draining\n")
            } else if !store_ok {
                text(StatusCode::SERVICE_UNAVAILABLE, "store unavailable\n")
            } else {
                text(StatusCode::OK, "ready\n")
            }
        }
        (&Method::GET, "/metrics") => {
            // Held writes are the store's to count: read when scraped, not kept in step.
            if let Some(enf) = &state.enforcement {
                if let Ok(escrows) = enf.store.escrows(1000).await {
                    let held = escrows
                        .iter()
                        .filter(|e| e.state == crate::store::EscrowState::Held)
                        .count();
                    metrics::gauge!(crate::telemetry::ESCROWS_HELD).set(held as f64);
                }
            }
            let mut r = Response::new(body::full(metrics.render()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            r
        }
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    })
}

/// An HTTP resource's key: its normalised URI without the query (relative to `public_base`
/// when it starts with `/`).
fn http_key(public_base: Option<&str>, decoded: &str) -> Option<String> {
    let absolute = match (decoded.starts_with('/'), public_base) {
        (true, Some(base)) => format!("{}{decoded}", base.trim_end_matches('/')),
        _ => decoded.to_owned(),
    };
    let normalized = palisade_policy::target::normalize(&absolute).ok()?;
    Some(palisade_policy::target::resource_key(&normalized).to_owned())
}

/// `GET /admin/v1/fences/{resource}`: a resource's current epoch (0: never fenced). The
/// resource is its key (SPEC §4.3), percent-encoded as one path segment; a key that starts
/// with `/` is taken relative to `listen.public_base`.
async fn fence(plane: &Plane, encoded: &str) -> Response<ProxyBody> {
    let json = |status: StatusCode, doc: serde_json::Value| body::json_response(status, &doc);
    let Some(enf) = &plane.enforcement else {
        return json(
            StatusCode::NOT_FOUND,
            serde_json::json!({"error": "no enforcement configured: there are no fences"}),
        );
    };
    let Ok(decoded) = percent_encoding::percent_decode_str(encoded).decode_utf8() else {
        return json(
            StatusCode::BAD_REQUEST,
            serde_json::json!({"error": "the resource is not UTF-8 once decoded"}),
        );
    };
    // MCP tool resources have keys of their own (SPEC §11), not URIs.
    let key = if decoded.starts_with("mcp:tool/") {
        decoded.into_owned()
    } else {
        match http_key(plane.config.public_base.as_deref(), &decoded) {
            Some(k) => k,
            None => {
                return json(
                    StatusCode::BAD_REQUEST,
                    serde_json::json!({"error": "the resource is not an absolute http(s) URI or an mcp:tool/ key"}),
                )
            }
        }
    };
    match enf.store.epoch(&key).await {
        Ok(epoch) => json(
            StatusCode::OK,
            serde_json::json!({"resource": key, "epoch": epoch}),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "fence lookup failed");
            json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({"error": "the state store does not answer"}),
            )
        }
    }
}
