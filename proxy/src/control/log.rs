//! The receipt log on the admin listener (SPEC §9, §5.5), read-only: the newest checkpoint,
//! the verifier key, C2SP tlog-tiles (hash tiles and entry bundles) and two conveniences
//! computed from the stored hashes (`proof`, `consistency`).
//!
//! A tile is served at any width the current tree covers, so a monitor holding an older
//! checkpoint can fetch the partial tiles of its own tree. An entry bundle is served only
//! whole: one missing any entry (gone under `store.receipt_retention`) answers 410, as the
//! SPEC says of a bundle with no retained entry, since a bundle with a gap cannot be checked.

use http::{header, HeaderValue, Response, StatusCode};
use palisade_policy::log::merkle;
use palisade_policy::log::tiles::{self, TileKind, TilePath};

use crate::context::Plane;
use crate::net::body::{self, text_response as text, ProxyBody};
use crate::store::{log_read, Store};

/// Answers `GET /admin/v1/log/{rest}`.
pub async fn get(plane: &Plane, rest: &str, query: Option<&str>) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return text(
            StatusCode::NOT_FOUND,
            "no store configured: there is no log\n".into(),
        );
    };
    let store = enf.store.as_ref();
    match rest {
        "checkpoint" => match store.log_head().await {
            Ok(head) => text(StatusCode::OK, enf.cosigned.served(&head.note)),
            Err(e) => unavailable(&e),
        },
        "key" => text(StatusCode::OK, format!("{}\n", enf.log.key().vkey())),
        "proof" | "consistency" => proof(store, rest, query).await,
        tile if tile.starts_with("tile/") => self::tile(store, tile).await,
        _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

async fn tile(store: &dyn Store, path: &str) -> Response<ProxyBody> {
    let asked = match TilePath::parse(path) {
        Ok(t) => t,
        Err(e) => return text(StatusCode::NOT_FOUND, format!("{e}\n")),
    };
    let head = match store.log_head().await {
        Ok(h) => h,
        Err(e) => return unavailable(&e),
    };
    let covered = TilePath::in_tree(asked.kind, asked.index, head.size)
        .is_some_and(|t| asked.width <= t.width);
    if !covered {
        return text(
            StatusCode::NOT_FOUND,
            format!("{path}: not in the tree of size {}\n", head.size),
        );
    }
    let data = match asked.kind {
        TileKind::Hashes { .. } => match log_read::compute(store, |r| asked.hash_data(r)).await {
            Ok(Ok(data)) => data,
            Ok(Err(e)) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            Err(e) => return unavailable(&e),
        },
        TileKind::Entries => {
            // `in_tree` found the tile inside the tree, so these fit; checked all the same.
            let Some((from, to)) = asked.index.checked_mul(tiles::WIDTH).and_then(|from| {
                from.checked_add(u64::from(asked.width))
                    .map(|to| (from, to))
            }) else {
                return text(StatusCode::NOT_FOUND, format!("{path}: out of range\n"));
            };
            let entries = match store.log_entries(from, to).await {
                Ok(e) => e,
                Err(e) => return unavailable(&e),
            };
            if entries.len() as u64 != to - from {
                return text(
                    StatusCode::GONE,
                    format!("{path}: entries {from}..{to} are no longer all retained\n"),
                );
            }
            match tiles::bundle(entries.iter().map(|(_, e)| e.as_slice())) {
                Ok(b) => b,
                Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
            }
        }
    };
    let mut r = Response::new(body::full(data));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    // A full tile never changes; a partial one is replaced as the tree grows.
    let cache = if u64::from(asked.width) == tiles::WIDTH {
        "public, max-age=31536000, immutable"
    } else {
        "no-cache"
    };
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    r
}

/// `proof?index=N&size=S` and `consistency?old=M&new=S`: a bare JSON array of base64 hashes.
async fn proof(store: &dyn Store, which: &str, query: Option<&str>) -> Response<ProxyBody> {
    let (a_name, b_name) = if which == "proof" {
        ("index", "size")
    } else {
        ("old", "new")
    };
    let mut a = None;
    let mut b = None;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let parsed = v.parse::<u64>().ok().filter(|_| {
            !v.is_empty()
                && v.bytes().all(|c| c.is_ascii_digit())
                && (v == "0" || !v.starts_with('0'))
        });
        let slot = match k {
            k if k == a_name => &mut a,
            k if k == b_name => &mut b,
            _ => return bad(format!("unknown parameter {k:?}")),
        };
        if slot.is_some() {
            return bad(format!("{k} given twice"));
        }
        match parsed {
            Some(n) => *slot = Some(n),
            None => return bad(format!("{k} is not a decimal number")),
        }
    }
    let (Some(a), Some(b)) = (a, b) else {
        return bad(format!("{a_name} and {b_name} are required"));
    };
    let head = match store.log_head().await {
        Ok(h) => h,
        Err(e) => return unavailable(&e),
    };
    if b > head.size {
        return bad(format!(
            "{b_name} {b} is beyond the newest checkpoint's size {}",
            head.size
        ));
    }
    let invalid = if which == "proof" {
        a >= b
    } else {
        a == 0 || a >= b
    };
    if invalid {
        return bad(if which == "proof" {
            format!("index {a} is not below size {b}")
        } else {
            format!("old must be at least 1 and below new (old {a}, new {b})")
        });
    }
    let computed = log_read::compute(store, |r| {
        if which == "proof" {
            merkle::inclusion(a, b, r)
        } else {
            merkle::consistency(a, b, r)
        }
    })
    .await;
    match computed {
        Ok(Ok(p)) => body::json_response(
            StatusCode::OK,
            &serde_json::Value::from(merkle::encode_proof(&p)),
        ),
        Ok(Err(e)) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
        Err(e) => unavailable(&e),
    }
}

fn bad(why: String) -> Response<ProxyBody> {
    body::json_response(
        StatusCode::BAD_REQUEST,
        &serde_json::json!({ "error": why }),
    )
}

fn unavailable(e: &crate::store::StoreError) -> Response<ProxyBody> {
    text(StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n"))
}
