//! `Idempotency-Key` on writes (SPEC §5.6, draft-ietf-httpapi-idempotency-key-header).
//!
//! ```text
//! key present? → reserve it in flight (409 if already) → stored outcome?
//!   same fingerprint → replay it (not forwarded)     different → 422
//!   none → the write runs; once forwarded, its outcome (whatever it was) is stored with its
//!          receipt in one transaction, then the reservation is released
//! ```
//! The reservation and the lookup are one store call ([`IdempotencyKeys::reserve_key`]), so two
//! concurrent requests with one key cannot both miss the store and both forward, on one
//! replica or several: the embedded store reserves in process (one sidecar owns it), the
//! postgres store as a row every replica sees. After a crash between forwarding and storing
//! the outcome the key is free again (at once for the embedded store, once the reservation's
//! hold passes for postgres), but the lease's fence epoch is already spent, so a retry is
//! refused with 409 and never re-executed.
//!
//! Keys are scoped per caller identity (client certificate, else `Authorization` digest; the
//! rest share an anonymous scope) and stored as a digest of scope and key: bounded in size,
//! and no credential is stored.

use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, Response, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::{ErrorCode, Refusal};
use serde_json::Value;

use crate::context::Enforcement;
use crate::enforce::receipts;
use crate::net::body::{self, ProxyBody};
use crate::net::headers;
use crate::store::StoreError;
use crate::store::{IdempotencyRecord, KeyState, Store, StoredOutcome};

pub const KEY_HEADER: &str = "idempotency-key";
pub const REPLAYED_HEADER: &str = "idempotent-replayed";
/// Longest key accepted, in bytes (the draft recommends UUIDs; this leaves room for others).
pub const MAX_KEY_LEN: usize = 256;

/// The response headers a stored outcome keeps besides `Agent-Commit-Receipt` (which comes
/// from the stored receipt itself).
const KEPT_HEADERS: [&str; 4] = [
    "content-type",
    "location",
    headers::FENCE_HEADER,
    headers::DRY_RUN_HEADER,
];

/// A key this request holds: its outcome is to be stored. Dropping it (a refusal, or the
/// outcome stored) releases the key.
pub struct Pending {
    key: String,
    fingerprint: String,
    expires_ms: i64,
    /// Names this reservation, so that releasing it never removes another's.
    owner: String,
    store: Arc<dyn Store>,
}

impl Pending {
    /// Releases the key before the refusal is answered, so a retry that follows the answer
    /// finds it free on any replica (dropping releases it too, but in the background).
    pub async fn release(mut self) {
        let (key, owner) = (
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.owner),
        );
        if let Err(e) = self.store.release_key(key, owner).await {
            tracing::warn!(error = %e, "idempotency reservation not released; it lapses at its hold time");
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if self.owner.is_empty() {
            return; // released already
        }
        let release = self.store.release_key(
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.owner),
        );
        // Without a runtime (shutting down) the reservation lapses at its hold time instead.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = release.await {
                    tracing::warn!(error = %e, "idempotency reservation not released; it lapses at its hold time");
                }
            });
        }
    }
}

/// How long a key's outcome is kept, and how long a reservation holds before a replica may
/// take it over (its request must have died by then).
#[derive(Debug, Clone, Copy)]
pub struct KeyTimes {
    pub retention_ms: i64,
    pub hold_ms: i64,
}

impl KeyTimes {
    pub fn from_config(config: &crate::config::Config) -> Self {
        // A request holds its key while its body is read, its checks and lock wait run, the
        // upstream answers (bounded by upstream.timeout) and its receipt is stored.
        let upstream = config.upstream.timeout.as_millis().min(i64::MAX as u128) as i64;
        Self {
            retention_ms: config
                .idempotency_retention
                .as_millis()
                .min(i64::MAX as u128) as i64,
            hold_ms: upstream.saturating_mul(2).saturating_add(30_000),
        }
    }
}

pub enum Begin {
    /// First use of the key: run the write, then store its outcome.
    Fresh(Pending),
    /// The key's stored outcome, to be sent as it is.
    Replay {
        resp: Response<ProxyBody>,
        /// The receipt stored with the outcome (also in the answer's header).
        receipt: Option<Value>,
    },
}

/// What a request's key is judged by.
pub struct Request<'a> {
    pub headers: &'a http::HeaderMap,
    pub method: &'a http::Method,
    /// Path and query as sent.
    pub target: &'a str,
    pub body: &'a [u8],
    /// The caller identity (`ConnInfo::caller`), `None` for the anonymous scope.
    pub caller: Option<&'a str>,
}

/// The key from the header: an RFC 8941 string (`"…"`) or, leniently, a bare token.
fn parse_key(v: &HeaderValue) -> Result<&str, Refusal> {
    let bad = || {
        Refusal::new(
            ErrorCode::BadRequest,
            "Idempotency-Key must be a non-empty string of at most 256 bytes",
        )
    };
    let s = v.to_str().map_err(|_| bad())?.trim();
    let s = s
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s);
    if s.is_empty() || s.len() > MAX_KEY_LEN {
        return Err(bad());
    }
    Ok(s)
}

/// The request fingerprint: method, target and body digest.
fn fingerprint(r: &Request<'_>) -> String {
    let mut input = Vec::with_capacity(r.target.len() + 80);
    input.extend_from_slice(r.method.as_str().as_bytes());
    input.push(b'\n');
    input.extend_from_slice(r.target.as_bytes());
    input.push(b'\n');
    input.extend_from_slice(Sha256Digest::of(r.body).to_string().as_bytes());
    Sha256Digest::of(&input).to_string()
}

fn scoped_key(caller: Option<&str>, key: &str) -> String {
    let scope = caller.unwrap_or("anonymous");
    let mut input = Vec::with_capacity(scope.len() + key.len() + 1);
    input.extend_from_slice(scope.as_bytes());
    input.push(0);
    input.extend_from_slice(key.as_bytes());
    Sha256Digest::of(&input).to_string()
}

fn reused() -> Refusal {
    Refusal::new(
        ErrorCode::IdempotencyKeyReused,
        "the Idempotency-Key was used with a different request (method, target or body)",
    )
}

/// Judges a write's key; `Ok(None)` when it has none.
pub async fn begin(
    enf: &Enforcement,
    r: &Request<'_>,
    times: KeyTimes,
) -> Result<Option<Begin>, Refusal> {
    let Some(v) = r.headers.get(KEY_HEADER) else {
        return Ok(None);
    };
    let key = scoped_key(r.caller, parse_key(v)?);
    let fingerprint = fingerprint(r);
    let now = enf.clock.now_ms();
    let owner = uuid::Uuid::new_v4().to_string();
    let state = enf
        .store
        .reserve_key(
            &key,
            &fingerprint,
            &owner,
            now.saturating_add(times.hold_ms),
        )
        .await
        .map_err(StoreError::into_refusal)?;
    match state {
        KeyState::Reserved => Ok(Some(Begin::Fresh(Pending {
            key,
            fingerprint,
            expires_ms: now.saturating_add(times.retention_ms),
            owner,
            store: enf.store.clone(),
        }))),
        KeyState::Running {
            fingerprint: running,
        } => Err(if running.is_none_or(|f| f == fingerprint) {
            Refusal::new(
                ErrorCode::IdempotencyInFlight,
                "a request with this Idempotency-Key is still being processed",
            )
        } else {
            reused()
        }),
        KeyState::Stored(rec) if rec.fingerprint == fingerprint => {
            let receipt = rec.receipt.clone().filter(Value::is_object);
            Ok(Some(Begin::Replay {
                resp: replay(&rec),
                receipt,
            }))
        }
        KeyState::Stored(_) => Err(reused()),
    }
}

impl Pending {
    /// The outcome to store for this key: the response as the client got it (its body given
    /// whole), without the receipt, which the store adds when it seals it.
    pub fn record(&self, resp: &Response<ProxyBody>, body: &Bytes) -> IdempotencyRecord {
        let headers = KEPT_HEADERS
            .iter()
            .filter_map(|name| {
                let v = resp.headers().get(*name)?.to_str().ok()?;
                Some(((*name).to_owned(), v.to_owned()))
            })
            .collect();
        IdempotencyRecord {
            key: self.key.clone(),
            outcome: StoredOutcome {
                fingerprint: self.fingerprint.clone(),
                status: resp.status().as_u16(),
                headers,
                body_b64: STANDARD.encode(body),
                receipt: None,
                expires_ms: self.expires_ms,
            },
            expires_ms: self.expires_ms,
        }
    }
}

/// What a key already has, for callers that key their own requests (the AIP-2.1 nonce store).
pub enum Reservation {
    Fresh(Pending),
    /// Held by a request in flight; its fingerprint, when known.
    Running(Option<String>),
    /// The stored outcome (see [`Pending::record`]; [`replay`] rebuilds its response).
    Stored(StoredOutcome),
}

/// Reserves `key` (already scoped and bounded by the caller) for a request with `fingerprint`:
/// the same store call, reservation and retention as `Idempotency-Key` (SPEC §5.6).
pub async fn reserve(
    enf: &Enforcement,
    key: String,
    fingerprint: String,
    times: KeyTimes,
) -> Result<Reservation, Refusal> {
    let now = enf.clock.now_ms();
    let owner = uuid::Uuid::new_v4().to_string();
    let state = enf
        .store
        .reserve_key(
            &key,
            &fingerprint,
            &owner,
            now.saturating_add(times.hold_ms),
        )
        .await
        .map_err(StoreError::into_refusal)?;
    Ok(match state {
        KeyState::Reserved => Reservation::Fresh(Pending {
            key,
            fingerprint,
            expires_ms: now.saturating_add(times.retention_ms),
            owner,
            store: enf.store.clone(),
        }),
        KeyState::Running { fingerprint } => Reservation::Running(fingerprint),
        KeyState::Stored(rec) => Reservation::Stored(rec),
    })
}

/// Rebuilds a stored outcome. Every field was written by this process; anything unreadable
/// degrades to what can be read rather than failing the replay.
pub fn replay(rec: &StoredOutcome) -> Response<ProxyBody> {
    let body = STANDARD.decode(&rec.body_b64).unwrap_or_default();
    let mut resp = Response::new(body::full(body));
    *resp.status_mut() =
        StatusCode::from_u16(rec.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    for (name, value) in &rec.headers {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            resp.headers_mut().insert(n, v);
        }
    }
    if let Some(v) = rec
        .receipt
        .as_ref()
        .and_then(receipts::receipt_header_value)
    {
        resp.headers_mut().insert(headers::RECEIPT_HEADER, v);
    }
    resp.headers_mut()
        .insert(REPLAYED_HEADER, HeaderValue::from_static("true"));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn keys_are_sf_strings_or_tokens_and_bounded() {
        let ok = |s: &str| parse_key(&HeaderValue::from_str(s).unwrap()).map(str::to_owned);
        assert_eq!(ok("\"8e03978e-40d5\"").unwrap(), "8e03978e-40d5");
        assert_eq!(ok("abc").unwrap(), "abc");
        assert!(ok("\"\"").is_err());
        assert!(ok(&"k".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(ok(&"k".repeat(MAX_KEY_LEN)).is_ok());
    }

    #[test]
    fn scopes_and_fingerprints_separate_what_they_should() {
        assert_ne!(scoped_key(Some("a"), "k"), scoped_key(Some("b"), "k"));
        let h = http::HeaderMap::new();
        let req = |m: &'static http::Method, t: &'static str, b: &'static [u8]| Request {
            headers: &h,
            method: m,
            target: t,
            body: b,
            caller: None,
        };
        let base = fingerprint(&req(&http::Method::PUT, "/a", b"x"));
        assert_eq!(base, fingerprint(&req(&http::Method::PUT, "/a", b"x")));
        assert_ne!(base, fingerprint(&req(&http::Method::POST, "/a", b"x")));
        assert_ne!(base, fingerprint(&req(&http::Method::PUT, "/a?b", b"x")));
        assert_ne!(base, fingerprint(&req(&http::Method::PUT, "/a", b"y")));
    }
}
