//! The AIP-2.1 negotiation relay (seed 001 §6.3, SPEC §13 `aip2.relay`), served by the sidecar
//! from its store, so replicas sharing a database serve one relay:
//!
//! ```text
//! POST /api/v1/negotiations/{txId}/messages       {type, message}
//!   rate limit per client address                 429 ERR_RATE_LIMITED + Retry-After
//!   → body ≤ MAX_MESSAGE                          413
//!   → policy::aip2::check_on(Relay): schema, txId binding, kernel for the chain, TTL,
//!     EIP-712 signer                              400 / 401 / 410
//!   → store: dedup by inner signature            200 {ok, duplicate: true}
//!            per-transaction cap                  429 ERR_RELAY_TX_FULL
//!            whole relay cap                      503 ERR_RELAY_FULL
//!            kept under the next cursor           201 {ok: true, cursor}
//! GET /api/v1/negotiations/{txId}/messages?after=C     ≤ 50 {cursor, envelope, receivedAt}
//! GET /api/v1/negotiations/inbox/{did}?after=C         ≤ 100, with txId: provider or consumer
//! ```
//! The relay never holds a key and never alters a signed body: an envelope is listed byte for
//! byte as it was posted. Every refusal is receipted with a drift event and carries the
//! seed's `error` member; a kept message has no receipt of its own (it is signed already, and
//! the store's record is the relay's evidence; docs/decisions.md).

use std::fmt::Write as _;

use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use palisade_policy::aip2::{self, message, Channel};
use palisade_policy::{ErrorCode, Refusal};

use crate::config::Config;
use crate::context::{Call, Enforcement, Outcome};
use crate::enforce::own::{Own, Staged};
use crate::enforce::receipts::Refused;
use crate::net::body::{self, CollectError, ProxyBody};
use crate::net::client_addr::client_addr;
use crate::store::{RelayEntry, RelayLimits, RelayMessage, RelayPosted, RelayQuery};

use super::refusal::{over_rate, refuse, Members};

/// Where the relay is served.
pub const PREFIX: &str = "/api/v1/negotiations/";
/// Largest message accepted, as on the quote channel.
pub const MAX_MESSAGE: u64 = super::quote_channel::MAX_MESSAGE;
/// Page sizes of the seed: a transaction's messages, an inbox.
pub const TX_PAGE: usize = 50;
pub const INBOX_PAGE: usize = 100;

/// Whether the relay serves `path`.
pub fn is_relay(config: &Config, path: &str) -> bool {
    config.aip2.as_ref().is_some_and(|a| a.relay) && path.starts_with(PREFIX)
}

enum Route {
    Messages(String),
    Inbox(String),
}

pub async fn handle(
    call: &Call<'_>,
    enf: &Enforcement,
    parts: http::request::Parts,
    body: Incoming,
) -> Staged {
    let (state, cx) = (call.state, &call.cx);
    let refused = |r: Refused| Err(Own::from(r));
    let rest = parts.uri.path().strip_prefix(PREFIX).unwrap_or_default();
    let route = match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["inbox", did] if !did.is_empty() => Route::Inbox((*did).to_owned()),
        [tx, "messages"] if !tx.is_empty() => Route::Messages((*tx).to_owned()),
        _ => {
            let r = Refusal::new(
                ErrorCode::NotFound,
                "the relay serves /api/v1/negotiations/{txId}/messages and /api/v1/negotiations/inbox/{did}",
            );
            return refused(refuse(state.recorder(), cx, r, Members::Relay).await);
        }
    };
    let allowed = matches!(
        (&route, &parts.method),
        (_, &Method::GET) | (Route::Messages(_), &Method::POST)
    );
    if !allowed {
        let r = Refusal::new(
            ErrorCode::MethodNotAllowed,
            "the relay's message list takes GET and POST, an inbox GET",
        );
        let r = refuse(state.recorder(), cx, r, Members::Relay).await;
        let allow = match route {
            Route::Messages(_) => "GET, POST",
            Route::Inbox(_) => "GET",
        };
        return refused(r.with_header(header::ALLOW, HeaderValue::from_static(allow)));
    }
    let result = match (route, parts.method == Method::POST) {
        (Route::Messages(tx), true) => {
            // The rate limit comes before the body is read.
            if let Some(r) = over_rate_post(call, enf, &parts).await {
                return refused(r);
            }
            post(call, enf, body, &tx).await
        }
        (Route::Messages(tx), false) => list(enf, &parts, RelayTarget::Tx(tx)).await,
        (Route::Inbox(did), _) => list(enf, &parts, RelayTarget::Inbox(did)).await,
    };
    match result {
        Ok(resp) => Ok((resp, Outcome::Forwarded)),
        Err(r) => {
            let full = r.code == ErrorCode::RelayFull;
            let mut r = refuse(state.recorder(), cx, r, Members::Relay).await;
            if full {
                r = r.with_header(header::RETRY_AFTER, HeaderValue::from_static("60"));
            }
            refused(r)
        }
    }
}

/// The 429 of a client over the relay's rate, if it is.
async fn over_rate_post(
    call: &Call<'_>,
    enf: &Enforcement,
    parts: &http::request::Parts,
) -> Option<Refused> {
    let state = call.state;
    let (aip, qc) = (state.config.aip2.as_ref()?, state.quote_channel.as_ref()?);
    let client = client_addr(
        call.conn.peer.ip(),
        &parts.headers,
        &aip.trusted_proxies,
        aip.trusted_proxy_header,
    );
    over_rate(
        state.recorder(),
        enf,
        &call.cx,
        &qc.relay_rate,
        client,
        Members::Relay,
    )
    .await
}

/// Checks and keeps a posted message.
async fn post(
    call: &Call<'_>,
    enf: &Enforcement,
    body: Incoming,
    tx: &str,
) -> Result<Response<ProxyBody>, Refusal> {
    let state = call.state;
    let (Some(aip), Some(qc)) = (&state.config.aip2, &state.quote_channel) else {
        return Err(Refusal::new(ErrorCode::NotFound, "no relay is configured"));
    };
    let bytes =
        match body::read_request_body(body, MAX_MESSAGE.min(state.config.limits.max_body)).await {
            Ok(b) => b,
            Err(CollectError::TooLarge(_)) => {
                return Err(Refusal::new(
                    ErrorCode::BodyTooLarge,
                    "a relay message is limited to 64 KiB",
                ));
            }
            Err(CollectError::Read(_)) => {
                return Err(Refusal::new(
                    ErrorCode::BadRequest,
                    "request body could not be read",
                ));
            }
        };
    let now_ms = enf.clock.now_ms();
    let now_s = u64::try_from(now_ms / 1000).unwrap_or(0);
    let checked = aip2::check_on(&bytes, Channel::Relay { tx }, &qc.rules, now_s)?;
    let ttl_ms = i64::try_from(aip.relay_ttl.as_millis()).unwrap_or(i64::MAX);
    let message = RelayMessage {
        tx_id: checked.tx_id.clone(),
        signature: checked.signature.clone(),
        parties: [checked.provider, checked.consumer].map(|p| (p.chain, p.address)),
        envelope: bytes.to_vec(),
        received_at_s: now_s,
        expires_ms: now_ms.saturating_add(ttl_ms),
    };
    let limits = RelayLimits {
        per_tx: aip.relay_max_per_tx,
        total: aip.relay_max_messages,
    };
    let posted = enf.store.relay_post(message, limits).await.map_err(|e| {
        tracing::warn!(error = %e, "relay message not stored");
        Refusal::new(
            ErrorCode::StoreUnavailable,
            "the relay's store is unavailable",
        )
    })?;
    let (status, body) = match posted {
        RelayPosted::Stored { cursor } => (
            StatusCode::CREATED,
            serde_json::json!({"ok": true, "cursor": cursor.to_string()}),
        ),
        RelayPosted::Duplicate { cursor } => (
            StatusCode::OK,
            serde_json::json!({"ok": true, "duplicate": true, "cursor": cursor.to_string()}),
        ),
        RelayPosted::TxFull => {
            return Err(Refusal::new(
                ErrorCode::RelayTxFull,
                "per-tx message cap reached (aip2.relay_max_per_tx)",
            ));
        }
        // Answered with Retry-After: 60 (`handle`).
        RelayPosted::Full => {
            return Err(Refusal::new(
                ErrorCode::RelayFull,
                "the relay holds aip2.relay_max_messages messages; try again after some expire",
            ));
        }
    };
    Ok(body::json_response(status, &body))
}

enum RelayTarget {
    Tx(String),
    Inbox(String),
}

/// A page of a transaction's messages or of an inbox.
async fn list(
    enf: &Enforcement,
    parts: &http::request::Parts,
    target: RelayTarget,
) -> Result<Response<ProxyBody>, Refusal> {
    let after = after_cursor(parts.uri.query())?;
    let (query, limit, with_tx) = match target {
        RelayTarget::Tx(tx) => {
            if message::bytes32(&tx.to_ascii_lowercase()).is_none() {
                return Err(Refusal::new(
                    ErrorCode::BadRequest,
                    "txId must be 0x and 64 hex digits",
                ));
            }
            (RelayQuery::Tx(tx.to_ascii_lowercase()), TX_PAGE, false)
        }
        RelayTarget::Inbox(did) => {
            // Clients escape the DID's colons (`did%3Aethr%3A…`).
            let did = percent_encoding::percent_decode_str(&did)
                .decode_utf8()
                .map_err(|_| Refusal::new(ErrorCode::BadRequest, "the DID is not UTF-8"))?;
            let (chain, address) = message::did_ethr(&did).ok_or_else(|| {
                Refusal::new(
                    ErrorCode::BadRequest,
                    "the inbox DID must be did:ethr:[chainId:]0x… (40 hex digits)",
                )
            })?;
            (RelayQuery::Party { address, chain }, INBOX_PAGE, true)
        }
    };
    let entries = enf
        .store
        .relay_page(&query, after, limit)
        .await
        .map_err(|e| {
            tracing::warn!(error = %e, "relay page not read");
            Refusal::new(
                ErrorCode::StoreUnavailable,
                "the relay's store is unavailable",
            )
        })?;
    Ok(body::json_text_response(
        StatusCode::OK,
        page_json(&entries, with_tx),
    ))
}

/// `?after=N` (decimal, as the relay hands cursors out); absent: from the start.
fn after_cursor(query: Option<&str>) -> Result<u64, Refusal> {
    let bad = || {
        Refusal::new(
            ErrorCode::BadRequest,
            "after must be a cursor the relay gave",
        )
    };
    let mut after = 0;
    for pair in query.unwrap_or_default().split('&') {
        if let Some(v) = pair.strip_prefix("after=") {
            if v.is_empty() || v.len() > 20 || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            after = v.parse().map_err(|_| bad())?;
        }
    }
    Ok(after)
}

/// `{"messages":[{"cursor":"N",["txId":…,]"envelope":<as posted>,"receivedAt":S},…]}`. The
/// envelope is spliced in as its posted bytes: they passed the strict I-JSON parser, and
/// re-encoding would alter what a signer sent.
fn page_json(entries: &[RelayEntry], with_tx: bool) -> String {
    let mut out = String::with_capacity(
        64 + entries
            .iter()
            .map(|e| e.envelope.len() + 160)
            .sum::<usize>(),
    );
    out.push_str("{\"messages\":[");
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{{\"cursor\":\"{}\"", e.cursor);
        if with_tx {
            let tx = serde_json::to_string(&e.tx_id).unwrap_or_else(|_| "\"\"".into());
            let _ = write!(out, ",\"txId\":{tx}");
        }
        out.push_str(",\"envelope\":");
        out.push_str(std::str::from_utf8(&e.envelope).unwrap_or("null"));
        let _ = write!(out, ",\"receivedAt\":{}}}", e.received_at_s);
    }
    out.push_str("]}");
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn pages_splice_envelopes_as_posted() {
        let e = RelayEntry {
            cursor: 7,
            tx_id: "0xab".into(),
            envelope: br#"{"type":"t", "message":{"a":1.50}}"#.to_vec(),
            received_at_s: 9,
        };
        let text = page_json(std::slice::from_ref(&e), true);
        assert!(text.contains(r#""envelope":{"type":"t", "message":{"a":1.50}}"#));
        let v: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["messages"][0]["cursor"], "7");
        assert_eq!(v["messages"][0]["txId"], "0xab");
        assert_eq!(v["messages"][0]["receivedAt"], 9);
        let none: serde_json::Value = serde_json::from_str(&page_json(&[], false)).unwrap();
        assert_eq!(none["messages"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn cursors_are_decimal_only() {
        assert_eq!(after_cursor(None).unwrap(), 0);
        assert_eq!(after_cursor(Some("after=12")).unwrap(), 12);
        assert_eq!(after_cursor(Some("x=1&after=3")).unwrap(), 3);
        for bad in [
            "after=",
            "after=-1",
            "after=1e3",
            "after=99999999999999999999999",
            "after=0x10",
        ] {
            assert!(after_cursor(Some(bad)).is_err(), "{bad}");
        }
    }
}
