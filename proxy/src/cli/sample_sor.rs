//! A small inventory API that keeps its records in a JSON file: the System of Record behind
//! `palisade demo`, and a real upstream for tests and benchmarks.
//!
//! Routes: `GET /api/v2/items`, `POST /api/v2/items`, and `GET|PUT|DELETE /api/v2/items/{id}`;
//! and a legacy v1 allocation API with other field names, `GET|PUT|DELETE
//! /legacy/v1/allocations/{id}` (`{"ItemCode", "Quantity", "Location", "SalesOrder"}`), which
//! the demo's bundle serves to agents as `PUT /api/v2/allocations/{id}` through a connector;
//! allocation `SO-0000` is a closed order, refused with 409.
//! Every change is written to the data file (temp file + rename) before the response, so the
//! demo's data survives restarts and can be inspected with `cat`.
//!
//! It is a sample, not part of the sidecar: it trusts its caller and keeps everything in memory.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use http::{header, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::Mutex;

use crate::net::body::{self, ProxyBody};

const MAX_BODY: u64 = 1 << 20;
/// The legacy API refuses allocations to this sales order (409 `ORDER_CLOSED`).
pub const CLOSED_ORDER: &str = "SO-0000";

/// `palisade sample-sor`: the inventory API on its own, as an image's second container runs it.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The address to serve on (the chart's `sor.port`, on loopback inside the pod).
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: std::net::SocketAddr,
    /// The data file (created, with three items, when missing).
    #[arg(long, default_value = "/tmp/palisade-sample-sor.json")]
    data: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    crate::telemetry::init_logging();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let sor = SampleSor::open(&args.data)?;
        let listener = TcpListener::bind(args.listen).await?;
        tracing::info!(addr = %args.listen, data = %args.data.display(), "sample SoR serving");
        // SIGTERM ends it at once: it holds no connection state worth draining.
        tokio::select! {
            () = sor.serve(listener) => {}
            () = crate::server::shutdown_signal() => {}
        }
        Ok(())
    })
}

pub struct SampleSor {
    data_file: PathBuf,
    state: Mutex<Inventory>,
    /// Requests answered, by method: what a test or benchmark can count a sidecar's calls by
    /// (its pre-image GETs, its writes).
    gets: std::sync::atomic::AtomicU64,
    others: std::sync::atomic::AtomicU64,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
struct Inventory {
    next_id: u64,
    items: BTreeMap<String, Value>,
    /// The legacy API's allocation records, by id.
    #[serde(default)]
    allocations: BTreeMap<String, Value>,
}

impl SampleSor {
    /// Opens (or creates) the data file, seeding a new one with a few items.
    pub fn open(data_file: &Path) -> std::io::Result<Arc<Self>> {
        let inv = match std::fs::read(data_file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut inv = Inventory {
                    next_id: 100,
                    ..Default::default()
                };
                for (id, sku, qty) in [
                    ("1", "BOLT-M8", 1200),
                    ("2", "NUT-M8", 800),
                    ("3", "WASHER-8", 5000),
                ] {
                    inv.items.insert(
                        id.into(),
                        json!({"id": id, "sku": sku, "qty": qty, "warehouse": "BER-1"}),
                    );
                }
                inv
            }
            Err(e) => return Err(e),
        };
        let sor = Arc::new(Self {
            data_file: data_file.to_owned(),
            state: Mutex::new(inv),
            gets: Default::default(),
            others: Default::default(),
        });
        Ok(sor)
    }

    /// Requests answered so far: (GETs, all others).
    pub fn requests(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.gets.load(Relaxed), self.others.load(Relaxed))
    }

    /// Serves on `listener` forever.
    pub async fn serve(self: Arc<Self>, listener: TcpListener) {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let sor = self.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let sor = sor.clone();
                    async move { Ok::<_, Infallible>(sor.respond(req).await) }
                });
                let _ = auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    }

    async fn persist(&self, inv: &Inventory) -> std::io::Result<()> {
        let bytes = serde_json::to_vec_pretty(inv)?;
        let tmp = self.data_file.with_extension("tmp");
        tokio::fs::write(&tmp, bytes).await?;
        tokio::fs::rename(&tmp, &self.data_file).await
    }

    async fn respond(&self, req: Request<Incoming>) -> Response<ProxyBody> {
        let path = req.uri().path().to_owned();
        let method = req.method().clone();
        let counter = if method == Method::GET {
            &self.gets
        } else {
            &self.others
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = path
            .strip_prefix("/api/v2/items/")
            .filter(|id| !id.is_empty() && !id.contains('/'))
            .map(str::to_owned);
        let legacy = path
            .strip_prefix("/legacy/v1/allocations/")
            .filter(|id| !id.is_empty() && !id.contains('/'))
            .map(str::to_owned);
        let body = match body::collect_limited(req.into_body(), MAX_BODY).await {
            Ok(b) => b,
            Err(_) => {
                return reply(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    json!({"error": "body too large"}),
                )
            }
        };
        let mut inv = self.state.lock().await;
        if let Some(id) = legacy {
            let (status, doc, changed) = legacy_allocation(&mut inv, &method, id, &body);
            return self.finish(&inv, status, doc, changed).await;
        }
        let (status, doc, changed) = match (&method, path.as_str(), id) {
            (&Method::GET, "/api/v2/items", _) => (
                StatusCode::OK,
                json!({"items": inv.items.values().collect::<Vec<_>>()}),
                false,
            ),
            (&Method::POST, "/api/v2/items", _) => match parse_object(&body) {
                Some(mut item) => {
                    inv.next_id += 1;
                    let id = inv.next_id.to_string();
                    item.insert("id".into(), json!(id));
                    inv.items.insert(id, Value::Object(item.clone()));
                    (StatusCode::CREATED, Value::Object(item), true)
                }
                None => (
                    StatusCode::BAD_REQUEST,
                    json!({"error": "expected a JSON object"}),
                    false,
                ),
            },
            (&Method::GET, _, Some(id)) => match inv.items.get(&id) {
                Some(item) => (StatusCode::OK, item.clone(), false),
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"error": "no such item"}),
                    false,
                ),
            },
            (&Method::PUT, _, Some(id)) => match parse_object(&body) {
                Some(mut item) => {
                    item.insert("id".into(), json!(id));
                    let existed = inv.items.insert(id, Value::Object(item.clone())).is_some();
                    let status = if existed {
                        StatusCode::OK
                    } else {
                        StatusCode::CREATED
                    };
                    (status, Value::Object(item), true)
                }
                None => (
                    StatusCode::BAD_REQUEST,
                    json!({"error": "expected a JSON object"}),
                    false,
                ),
            },
            (&Method::DELETE, _, Some(id)) => match inv.items.remove(&id) {
                Some(_) => (StatusCode::NO_CONTENT, Value::Null, true),
                None => (
                    StatusCode::NOT_FOUND,
                    json!({"error": "no such item"}),
                    false,
                ),
            },
            _ => (
                StatusCode::NOT_FOUND,
                json!({"error": "no such route"}),
                false,
            ),
        };
        self.finish(&inv, status, doc, changed).await
    }

    async fn finish(
        &self,
        inv: &Inventory,
        status: StatusCode,
        doc: Value,
        changed: bool,
    ) -> Response<ProxyBody> {
        if changed {
            if let Err(e) = self.persist(inv).await {
                tracing::error!(error = %e, "sample SoR could not persist its data");
                return reply(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    json!({"error": "persist failed"}),
                );
            }
        }
        if status == StatusCode::NO_CONTENT {
            let mut r = Response::new(body::empty());
            *r.status_mut() = status;
            return r;
        }
        reply(status, doc)
    }
}

/// The legacy API: one allocation record per id, answered as `{"AllocationID", …}`.
fn legacy_allocation(
    inv: &mut Inventory,
    method: &Method,
    id: String,
    body: &[u8],
) -> (StatusCode, Value, bool) {
    let answer = |id: &str, record: &Value| {
        let mut doc = record.clone();
        doc["AllocationID"] = json!(id);
        doc
    };
    match *method {
        Method::GET => match inv.allocations.get(&id) {
            Some(r) => (StatusCode::OK, answer(&id, r), false),
            None => (
                StatusCode::NOT_FOUND,
                json!({"Error": "NO_ALLOCATION"}),
                false,
            ),
        },
        // A closed sales order takes no allocation: the demo's (and the RCNS tests') way to
        // make the second step of a composition fail at the SoR.
        Method::PUT if id == CLOSED_ORDER => (
            StatusCode::CONFLICT,
            json!({"Error": "ORDER_CLOSED"}),
            false,
        ),
        Method::PUT => match parse_object(body) {
            Some(record) => {
                let record = Value::Object(record);
                let doc = answer(&id, &record);
                let existed = inv.allocations.insert(id, record).is_some();
                let status = if existed {
                    StatusCode::OK
                } else {
                    StatusCode::CREATED
                };
                (status, doc, true)
            }
            None => (
                StatusCode::BAD_REQUEST,
                json!({"Error": "EXPECTED_OBJECT"}),
                false,
            ),
        },
        Method::DELETE => match inv.allocations.remove(&id) {
            Some(_) => (StatusCode::NO_CONTENT, Value::Null, true),
            None => (
                StatusCode::NOT_FOUND,
                json!({"Error": "NO_ALLOCATION"}),
                false,
            ),
        },
        _ => (
            StatusCode::METHOD_NOT_ALLOWED,
            json!({"Error": "METHOD"}),
            false,
        ),
    }
}

fn parse_object(body: &[u8]) -> Option<serde_json::Map<String, Value>> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
    }
}

fn reply(status: StatusCode, doc: Value) -> Response<ProxyBody> {
    let mut r = Response::new(body::full(serde_json::to_vec(&doc).unwrap_or_default()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}
