//! `palisade witness --config F`: a C2SP tlog-witness for Palisade logs (and any log whose
//! checkpoints are Ed25519 signed notes), so that an operator can run one in another trust
//! domain. It keeps, durably and per origin, the latest checkpoint it cosigned; an
//! `add-checkpoint` is checked against it and the new one persisted (written, fsync'd,
//! renamed) before the cosignature is returned, all under one lock, so two requests can never
//! roll the state back. Decisions are `policy::log::witness::decide`.
//!
//! ```toml
//! [witness]
//! addr = "0.0.0.0:7380"
//! name = "witness.example/w1"   # its key name (C2SP signed-note)
//! key = "witness.pem"           # Ed25519 PKCS#8 (`palisade keygen`)
//! state = "witness-state"       # a directory: the latest checkpoint per origin
//! logs = ["erp.example.com/palisade+1a2b3c4d+AY…"]   # the logs it witnesses (verifier keys)
//! ```

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use palisade_log::checkpoint::{self, LogKey};
use palisade_log::witness::{self, AddCheckpoint, Cosigner, Refused};
use serde::Deserialize;

use super::Failure;
use crate::net::body::{self, ProxyBody};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    witness: Raw,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    addr: String,
    name: String,
    key: PathBuf,
    state: PathBuf,
    logs: Vec<String>,
}

/// A running witness's configuration and state.
struct Witness {
    cosigner: Cosigner,
    logs: HashMap<String, LogKey>,
    state: PathBuf,
    /// Held across check and persist (C2SP tlog-witness: atomically).
    lock: tokio::sync::Mutex<()>,
}

pub(super) fn run(config: &Path) -> Result<(), Failure> {
    let usage = |why: String| Failure::usage(format!("{}: {why}", config.display()));
    let text = std::fs::read_to_string(config).map_err(|e| usage(e.to_string()))?;
    let raw: File = toml::from_str(&text).map_err(|e| usage(e.to_string()))?;
    let raw = raw.witness;
    let base = config.parent().unwrap_or(Path::new("."));
    let pair = super::keys::read_key(&base.join(&raw.key))?;
    let cosigner =
        Cosigner::new(&raw.name, pair).map_err(|e| usage(format!("witness.name: {e}")))?;
    let mut logs = HashMap::new();
    for (i, v) in raw.logs.iter().enumerate() {
        let key = LogKey::parse(v).map_err(|e| usage(format!("witness.logs[{i}]: {e}")))?;
        logs.insert(key.origin().to_owned(), key);
    }
    let state = base.join(&raw.state);
    std::fs::create_dir_all(&state).map_err(|e| usage(format!("witness.state: {e}")))?;
    let w = Arc::new(Witness {
        cosigner,
        logs,
        state,
        lock: tokio::sync::Mutex::new(()),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&raw.addr)
            .await
            .map_err(|e| usage(format!("witness.addr {}: {e}", raw.addr)))?;
        let addr = listener.local_addr().map_err(|e| usage(e.to_string()))?;
        // What the operator pastes into the logs' `receipts.witnesses`.
        println!(
            "{}",
            serde_json::json!({"witness": w.cosigner.key.name, "addr": addr.to_string(), "vkey": w.cosigner.vkey()})
        );
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let w = w.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let w = w.clone();
                    async move { Ok::<_, Infallible>(w.answer(req).await) }
                });
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

fn text(status: StatusCode, body: String, content_type: &'static str) -> Response<ProxyBody> {
    let mut r = Response::new(body::full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

impl Witness {
    async fn answer(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let plain = "text/plain; charset=utf-8";
        match (req.method(), req.uri().path()) {
            (&Method::GET, "/healthz") => return text(StatusCode::OK, "ok\n".into(), plain),
            (&Method::POST, "/add-checkpoint") => {}
            _ => return text(StatusCode::NOT_FOUND, "not found\n".into(), plain),
        }
        let body = match http_body_util::Limited::new(req.into_body(), witness::MAX_REQUEST)
            .collect()
            .await
        {
            Ok(b) => b.to_bytes(),
            Err(_) => {
                return text(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "larger than 64 KiB\n".into(),
                    plain,
                )
            }
        };
        let add = match AddCheckpoint::parse(&body) {
            Ok(a) => a,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n"), plain),
        };
        let origin = add.checkpoint.split('\n').next().unwrap_or_default();
        let Some(key) = self.logs.get(origin) else {
            return text(StatusCode::NOT_FOUND, "unknown log\n".into(), plain);
        };
        let _held = self.lock.lock().await;
        let path = self.state_file(origin);
        let latest = match std::fs::read(&path) {
            Ok(note) => match checkpoint::open(&note, key) {
                Ok(o) => Some(o.checkpoint),
                Err(e) => {
                    tracing::error!(error = %e, file = %path.display(), "witness state unreadable");
                    return text(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "state unreadable\n".into(),
                        plain,
                    );
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::error!(error = %e, "witness state unreadable");
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "state unreadable\n".into(),
                    plain,
                );
            }
        };
        let new = match witness::decide(&add, key, latest.as_ref()) {
            Ok(cp) => cp,
            Err(Refused::Conflict(size)) => {
                return text(
                    StatusCode::CONFLICT,
                    format!("{size}\n"),
                    "text/x.tlog.size",
                )
            }
            Err(r) => {
                let status = match r {
                    Refused::BadRequest(_) => StatusCode::BAD_REQUEST,
                    Refused::Forbidden => StatusCode::FORBIDDEN,
                    Refused::Fork | Refused::Conflict(_) => StatusCode::CONFLICT,
                    Refused::Inconsistent => StatusCode::UNPROCESSABLE_ENTITY,
                };
                return text(status, format!("{r}\n"), plain);
            }
        };
        if let Err(e) = persist(&path, &self.state, &add.checkpoint) {
            tracing::error!(error = %e, "witness state not written");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "state not written\n".into(),
                plain,
            );
        }
        let now = crate::clock::WallClock::now_ms().max(0) as u64 / 1000;
        text(StatusCode::OK, self.cosigner.cosign(&new, now), plain)
    }

    fn state_file(&self, origin: &str) -> PathBuf {
        let name = palisade_policy::digest::Sha256Digest::of(origin.as_bytes()).to_hex();
        self.state.join(format!("{name}.checkpoint"))
    }
}

/// Writes the newest cosigned checkpoint durably: a temporary file, fsync'd, renamed over the
/// old one, the directory fsync'd.
fn persist(path: &Path, dir: &Path, note: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    crate::fs::write_private_file(&tmp, note.as_bytes())?;
    std::fs::rename(&tmp, path)?;
    std::fs::File::open(dir)?.sync_all()
}
