//! `palisade audit verify` (SPEC §1, §10): the receipt log, verified as a whole.
//!
//! - `--config F`: the store the configuration names. PostgreSQL is read while its sidecars
//!   run. An embedded store file is locked by the sidecar that owns it, so while one runs the
//!   log is read through that sidecar's admin listener (the configuration names its address
//!   and token), exactly as `--url` reads it; a stopped sidecar's file is read directly.
//! - `--url ADMIN --key VKEY [--since F] [--token-file F]`: a running sidecar's log endpoints,
//!   checked from outside with nothing but the verifier key.
//!
//! Either way: every stored hash is rebuilt from the leaves, each retained entry is its leaf,
//! the newest checkpoint is signed by the key over that tree, and (`--since`) today's tree
//! extends an older checkpoint. Exit 1 names the first entry, hash, tile or checkpoint at fault.

use std::path::Path;

use http::{Request, StatusCode};
use palisade_log::audit::{self, AuditError, Audited};
use palisade_log::merkle::{self, Hash, MemoryHashes};
use palisade_log::tiles::{self, TileKind, TilePath};
use palisade_log::LogKey;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::TrustStore;
use serde_json::json;

use super::operate::load_config;
use super::Failure;
use crate::config::StoreKind;
use crate::store::{log_read, Store};

/// Most bytes of one log endpoint's answer: a full entry bundle of the largest entries.
const MAX_ANSWER: usize = 256 * (u16::MAX as usize + 2);

/// What `audit verify` found, printed as text or one JSON line.
struct Report {
    audited: Audited,
    /// The version 1.0 chain kept from before the log: (retained, removed under retention).
    v1: Option<(usize, u64)>,
}

fn print(report: &Report, json: bool, place: &str) {
    let a = &report.audited;
    let root = merkle_b64(&a.root);
    if json {
        let mut doc = json!({"ok": true, "size": a.size, "root": root, "retained": a.retained});
        if let Some((kept, pruned)) = report.v1 {
            doc["v1"] = json!({"receipts": kept, "pruned": pruned});
        }
        println!("{doc}");
    } else {
        println!(
            "ok: {place}: receipt log of {} entries, root {root}, {} retained ({} removed under store.receipt_retention, their hashes kept)",
            a.size,
            a.retained,
            a.size - a.retained
        );
        if let Some((kept, pruned)) = report.v1 {
            println!("ok: {kept} v1 receipts kept from before the log verify ({pruned} removed)");
        }
    }
}

fn merkle_b64(h: &Hash) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(h.0)
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))
}

/// `audit verify --config F`.
pub(super) fn verify_config(config: &Path, json: bool) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    let signer = super::store_cmd::key(&cfg)?;
    let rt = runtime()?;
    let store: Box<dyn Store> = match cfg.store.kind {
        StoreKind::Embedded => {
            if !cfg.store.path.exists() {
                return Err(Failure::usage(format!(
                    "{}: store file does not exist",
                    cfg.store.path.display()
                )));
            }
            let running = in_use(&cfg.store.path);
            if running && cfg.admin.addr.ends_with(":0") {
                return Err(Failure::usage(format!(
                    "{}: the store is in use by a running sidecar whose admin listener has no fixed port (admin.addr {}): verify it with --url and --key",
                    cfg.store.path.display(),
                    cfg.admin.addr
                )));
            }
            if running {
                // Its sidecar runs: read the log as it serves it.
                let scheme = if cfg.admin.tls.is_some() {
                    "https"
                } else {
                    "http"
                };
                let url = format!("{scheme}://{}", cfg.admin.addr);
                let token = cfg.admin.token_file.as_deref();
                let place = format!(
                    "{} (through its sidecar at {url})",
                    cfg.store.path.display()
                );
                let report = rt.block_on(remote(&url, signer.key(), None, token))?;
                print(&report, json, &place);
                return Ok(());
            }
            Box::new(
                crate::store::embedded::EmbeddedStore::open(&cfg.store.path, signer.clone())
                    .map_err(|e| Failure::usage(e.to_string()))?,
            )
        }
        StoreKind::Postgres => Box::new(
            rt.block_on(crate::store::open_existing_postgres(&cfg, signer.clone()))
                .map_err(|e| Failure::usage(e.to_string()))?
                .0,
        ),
    };
    let place = match cfg.store.kind {
        StoreKind::Embedded => cfg.store.path.display().to_string(),
        StoreKind::Postgres => "the postgres store".to_owned(),
    };
    let report = rt.block_on(local(store.as_ref(), &signer))?;
    let refused = |e: String| {
        if json {
            println!("{}", json!({"ok": false, "error": e}));
        }
        Failure::refused(format!("{place}: {e}"))
    };
    match report {
        Ok(r) => {
            print(&r, json, &place);
            Ok(())
        }
        Err(e) => Err(refused(e)),
    }
}

/// Whether a sidecar holds the embedded store file (redb locks it while open).
fn in_use(path: &Path) -> bool {
    matches!(
        redb::Database::open(path),
        Err(redb::DatabaseError::DatabaseAlreadyOpen)
    )
}

/// The log and the v1 chain of a store read directly.
async fn local(
    store: &dyn Store,
    signer: &palisade_log::Signer,
) -> Result<Result<Report, String>, Failure> {
    let unavailable = |e: crate::store::StoreError| Failure::usage(e.to_string());
    let (_, audited) = log_read::audit(store, signer.key())
        .await
        .map_err(unavailable)?;
    let audited = match audited {
        Ok(a) => a,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let legacy = store.receipt_log().await.map_err(unavailable)?;
    let v1 = if legacy.receipts.is_empty() && legacy.anchor.is_none() {
        None
    } else {
        let mut trust = TrustStore::new();
        trust
            .insert(signer.pair().trusted("sidecar"))
            .map_err(|e| Failure::usage(e.to_string()))?;
        let (pruned, start) = legacy
            .anchor
            .map_or((0, Sha256Digest::empty()), |a| (a.pruned, a.prev));
        if let Err(e) = palisade_log::receipt::verify_chain_from(
            legacy.receipts.iter().map(Vec::as_slice),
            &trust,
            start,
        ) {
            return Ok(Err(format!(
                "the v1 receipt chain kept from before the log: {e}"
            )));
        }
        Some((legacy.receipts.len(), pruned))
    };
    Ok(Ok(Report { audited, v1 }))
}

/// `audit verify --url ADMIN --key VKEY [--since F] [--token-file F]`.
pub(super) fn verify_url(
    url: &str,
    vkey: &str,
    since: Option<&Path>,
    token_file: Option<&Path>,
    json: bool,
) -> Result<(), Failure> {
    let key = super::receipt::log_key(vkey)?;
    let since = since
        .map(|f| {
            std::fs::read(f).map_err(|e| Failure::usage(format!("--since {}: {e}", f.display())))
        })
        .transpose()?;
    let report = runtime()?.block_on(remote(url, &key, since.as_deref(), token_file));
    match report {
        Ok(r) => {
            print(&r, json, url);
            Ok(())
        }
        Err(f) => {
            if json {
                println!("{}", json!({"ok": false, "error": f.lines.join("; ")}));
            }
            Err(f)
        }
    }
}

/// Reads and verifies a sidecar's log through its admin endpoints.
async fn remote(
    url: &str,
    key: &LogKey,
    since: Option<&[u8]>,
    token_file: Option<&Path>,
) -> Result<Report, Failure> {
    let admin = Admin::new(url, token_file)?;
    let note = admin
        .get("checkpoint")
        .await?
        .ok_or_else(|| Failure::refused(format!("{url}: the log's checkpoint is not served")))?;
    let checkpoint = palisade_log::checkpoint::open(&note, key)
        .map_err(|e| Failure::refused(format!("the newest checkpoint: {e}")))?
        .checkpoint;
    let size = checkpoint.size;
    if size > log_read::MAX_AUDITED {
        return Err(Failure::refused(format!(
            "the checkpoint claims {size} entries, more than audit verify rebuilds in memory ({})",
            log_read::MAX_AUDITED
        )));
    }
    // The leaves, from the level-0 hash tiles; the tree rebuilt from them.
    let mut rebuilt = MemoryHashes::default();
    let tiles_at = |kind, size| (0..).map_while(move |i| TilePath::in_tree(kind, i, size));
    for tile in tiles_at(TileKind::Hashes { level: 0 }, size) {
        for h in admin.hash_tile(&tile).await? {
            rebuilt
                .append_leaf(h)
                .map_err(|e| Failure::refused(e.to_string()))?;
        }
    }
    // Every higher tile the tree has must be what the leaves make.
    for level in 1..64u8 {
        let mut any = false;
        for tile in tiles_at(TileKind::Hashes { level }, size) {
            any = true;
            let served = admin.hash_tile(&tile).await?;
            for (k, h) in served.iter().enumerate() {
                let n = tile.index * tiles::WIDTH + k as u64;
                let want = rebuilt.get(merkle::stored_hash_index(level * tiles::HEIGHT, n));
                if want != Some(*h) {
                    return Err(Failure::refused(format!(
                        "{}: hash {k} is not what the leaves below it make",
                        tile.path()
                    )));
                }
            }
        }
        if !any {
            break;
        }
    }
    let hashes: Vec<Hash> = (0..merkle::stored_hash_count(size))
        .map(|i| rebuilt.get(i).unwrap_or(Hash([0; 32])))
        .collect();
    let mut entries: Vec<(u64, Vec<u8>)> = Vec::new();
    for tile in tiles_at(TileKind::Entries, size) {
        let Some(bundle) = admin.get(&tile.path()).await? else {
            continue; // gone under retention (410)
        };
        let parsed = tiles::unbundle(&bundle)
            .map_err(|e| Failure::refused(format!("{}: {e}", tile.path())))?;
        if parsed.len() != usize::from(tile.width) {
            return Err(Failure::refused(format!(
                "{}: {} entries, not {}",
                tile.path(),
                parsed.len(),
                tile.width
            )));
        }
        let start = tile.index * tiles::WIDTH;
        entries.extend(
            parsed
                .into_iter()
                .enumerate()
                .map(|(k, e)| (start + k as u64, e.to_vec())),
        );
    }
    let audited = audit::verify_log(
        &note,
        key,
        &hashes,
        entries.iter().map(|(i, e)| (*i, e.as_slice())),
    )
    .map_err(|e| Failure::refused(name_entry(e)))?;
    if let Some(old) = since {
        audit::verify_extends(&audited, old, key)
            .map_err(|e| Failure::refused(format!("--since: {e}")))?;
    }
    Ok(Report { audited, v1: None })
}

fn name_entry(e: AuditError) -> String {
    match e {
        AuditError::Entry { index } => format!(
            "entry {index} (in {}): its leaf hash is not the tree's",
            TilePath {
                kind: TileKind::Entries,
                index: index / tiles::WIDTH,
                width: 256
            }
            .path()
        ),
        other => other.to_string(),
    }
}

/// The log endpoints of one admin listener.
struct Admin {
    base: String,
    token: Option<String>,
    client: super::admin_client::AdminClient,
}

impl Admin {
    fn new(url: &str, token_file: Option<&Path>) -> Result<Self, Failure> {
        let token = token_file
            .map(super::admin_client::token_file)
            .transpose()?;
        Ok(Self {
            base: format!("{}/admin/v1/log/", url.trim_end_matches('/')),
            token,
            client: super::admin_client::client()?,
        })
    }

    /// `GET` a log endpoint: its body, `None` for 410 Gone.
    async fn get(&self, path: &str) -> Result<Option<Vec<u8>>, Failure> {
        let url = format!("{}{path}", self.base);
        let mut req = Request::get(&url);
        if let Some(t) = &self.token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(http_body_util::Full::default())
            .map_err(|e| Failure::usage(format!("{url}: {e}")))?;
        let (status, body) = super::admin_client::call(&self.client, req, &url, MAX_ANSWER).await?;
        match status {
            StatusCode::OK => Ok(Some(body.to_vec())),
            StatusCode::GONE => Ok(None),
            s => Err(Failure::refused(format!(
                "{url}: {s} {}",
                String::from_utf8_lossy(&body).trim()
            ))),
        }
    }

    async fn hash_tile(&self, tile: &TilePath) -> Result<Vec<Hash>, Failure> {
        let data = self.get(&tile.path()).await?.ok_or_else(|| {
            Failure::refused(format!(
                "{}: hash tiles are never removed, but this one is gone",
                tile.path()
            ))
        })?;
        if data.len() != 32 * usize::from(tile.width) {
            return Err(Failure::refused(format!(
                "{}: {} bytes, not {} hashes",
                tile.path(),
                data.len(),
                tile.width
            )));
        }
        Ok(data
            .chunks_exact(32)
            .map(|c| Hash(c.try_into().unwrap_or([0; 32])))
            .collect())
    }
}
