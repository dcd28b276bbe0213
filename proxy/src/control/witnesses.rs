//! Submitting the log's checkpoints to its witnesses (SPEC §5.5, C2SP tlog-witness): every
//! `receipts.witness_interval`, each witness whose latest cosigned size is behind the log's
//! newest checkpoint gets an `add-checkpoint` with a consistency proof from that size. A 409
//! tells the size the witness holds (first contact, or after a restart of either side), and
//! the request is made again from it. Cosignatures are checked against the witness's key
//! before they are served. A witness that is absent, slow or refusing never blocks a write:
//! this runs beside the data plane, each request bounded by a timeout, and only logs.

use std::sync::Arc;
use std::time::Duration;

use http::{Request, StatusCode};
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use palisade_policy::log::checkpoint::{self, Checkpoint};
use palisade_policy::log::merkle;
use palisade_policy::log::witness::{self, AddCheckpoint};

use crate::config::Witness;
use crate::context::{Enforcement, Plane};
use crate::store::log_read;

/// How long one witness request may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Most bytes of a witness's answer read.
const MAX_ANSWER: usize = 16 * 1024;

type HttpClient =
    Client<hyper_rustls::HttpsConnector<HttpConnector>, http_body_util::Full<bytes::Bytes>>;

/// Starts the submitter when the configuration names witnesses and the sidecar has a log.
pub fn spawn(plane: Arc<Plane>) {
    let (Some(enf), false) = (
        plane.enforcement.clone(),
        plane.config.receipts.witnesses.is_empty(),
    ) else {
        return;
    };
    let client = match client() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "witnesses: no HTTP client; checkpoints are not witnessed");
            return;
        }
    };
    tokio::spawn(async move {
        let witnesses = plane.config.receipts.witnesses.clone();
        // The size each witness is known to hold (None: not known yet).
        let mut held: Vec<Option<u64>> = vec![None; witnesses.len()];
        let mut tick = tokio::time::interval(plane.config.receipts.witness_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Ok(head) = enf.store.log_head().await else {
                continue;
            };
            if head.size == 0 {
                continue;
            }
            for (w, held) in witnesses.iter().zip(held.iter_mut()) {
                if *held == Some(head.size) {
                    continue;
                }
                match submit(&client, &enf, w, &head.note, held.unwrap_or(0)).await {
                    Ok(size) => *held = Some(size),
                    Err(e) => {
                        *held = None;
                        tracing::warn!(witness = %w.key.name, error = %e, "checkpoint not witnessed");
                    }
                }
            }
        }
    });
}

/// Submits `note` to `w` from `old` (once more from the size a 409 names); the size the
/// witness holds after.
async fn submit(
    client: &HttpClient,
    enf: &Enforcement,
    w: &Witness,
    note: &str,
    old: u64,
) -> Result<u64, String> {
    let cp = checkpoint::open(note.as_bytes(), enf.log.key())
        .map_err(|e| e.to_string())?
        .checkpoint;
    let mut old = old.min(cp.size);
    for _ in 0..2 {
        let proof = if old == 0 || old == cp.size {
            Vec::new()
        } else {
            log_read::compute(enf.store.as_ref(), |r| merkle::consistency(old, cp.size, r))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| e.to_string())?
        };
        let req = AddCheckpoint {
            old,
            proof,
            checkpoint: note.to_owned(),
        };
        let (status, body) = post(client, &w.url, req.to_body()).await?;
        match status {
            StatusCode::OK => {
                collect(enf, w, &cp, note, &body)?;
                return Ok(cp.size);
            }
            StatusCode::CONFLICT => {
                let size = std::str::from_utf8(&body)
                    .ok()
                    .and_then(|b| b.trim_end_matches('\n').parse::<u64>().ok())
                    .ok_or("409 without the witness's size")?;
                if size > cp.size {
                    return Err(format!(
                        "the witness holds a tree of {size}, larger than ours ({})",
                        cp.size
                    ));
                }
                old = size;
            }
            s => {
                return Err(format!(
                    "{s}: {}",
                    String::from_utf8_lossy(&body)
                        .chars()
                        .take(200)
                        .collect::<String>()
                ))
            }
        }
    }
    Err("the witness's size kept changing".into())
}

/// Keeps each of the answer's lines that is `w`'s valid cosignature on `cp`.
fn collect(
    enf: &Enforcement,
    w: &Witness,
    cp: &Checkpoint,
    note: &str,
    body: &[u8],
) -> Result<(), String> {
    let text = std::str::from_utf8(body).map_err(|_| "the answer is not UTF-8")?;
    let mut kept = 0;
    for line in text.split_inclusive('\n') {
        if witness::verify_cosignature(&w.key, cp, line).is_ok() {
            enf.cosigned.add(note, &w.key.name, line.to_owned());
            kept += 1;
        }
    }
    if kept == 0 {
        return Err("no valid cosignature by the witness's key in its answer".into());
    }
    Ok(())
}

async fn post(
    client: &HttpClient,
    url: &str,
    body: String,
) -> Result<(StatusCode, Vec<u8>), String> {
    let target = format!("{}/add-checkpoint", url.trim_end_matches('/'));
    let req = Request::post(&target)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let resp = tokio::time::timeout(TIMEOUT, client.request(req))
        .await
        .map_err(|_| format!("{target}: no answer in {TIMEOUT:?}"))?
        .map_err(|e| format!("{target}: {}", crate::net::upstream::error_chain(&e)))?;
    let status = resp.status();
    let body = tokio::time::timeout(
        TIMEOUT,
        http_body_util::Limited::new(resp.into_body(), MAX_ANSWER).collect(),
    )
    .await
    .map_err(|_| format!("{target}: the answer did not finish in {TIMEOUT:?}"))?
    .map_err(|e| format!("{target}: {e}"))?
    .to_bytes();
    Ok((status, body.to_vec()))
}

fn client() -> Result<HttpClient, String> {
    let tls = crate::net::tls::client_config(None, None).map_err(|e| e.to_string())?;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(Some(TIMEOUT));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(http);
    Ok(Client::builder(TokioExecutor::new()).build(https))
}
