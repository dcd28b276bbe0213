//! `POST {aip2.quote_channel}/{chainId}/{txId}` (seed 001 §8.2, SPEC §13), in order:
//!
//! ```text
//! path {chainId}/{txId}, method POST               400 ERR_QUOTE_CHANNEL / 405
//!   → rate limit per client address                 429 ERR_RATE_LIMITED + Retry-After
//!   → body ≤ MAX_MESSAGE                            413
//!   → policy::aip2::check (schema, binding, chain, TTL, EIP-712 signer)   400/401/410
//!   → nonce store (type, signer, nonce):
//!       first      → forwarded; the reply (< 500) stored with a delivery receipt
//!       same again → 200 with the stored reply, not forwarded (waits while the first runs)
//!       other msg  → 409 ERR_QUOTE_NONCE_REUSED, not forwarded
//! ```
//! The nonce store is the idempotency store (`enforce::idempotency::reserve`): one
//! reservation per key across replicas, records durable with their receipt, retained for
//! `aip2.dedup_ttl`, swept like every idempotency record. A reply of 500 or more (or no reply)
//! is not stored and the key is released: the message was not delivered, and the sender may
//! retry it.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Response, StatusCode};
use hyper::body::Incoming;
use palisade_policy::aip2;
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};
use palisade_policy::{ErrorCode, Refusal};

use crate::config::Config;
use crate::context::{Call, Enforcement, Outcome, QuoteChannelState, Recorder, WriteContext};
use crate::enforce::forward::forward_plain;
use crate::enforce::idempotency::{self, KeyTimes, Pending, Reservation};
use crate::enforce::own::{forwarded, Own, Staged};
use crate::enforce::receipts::{self, Refused};
use crate::net::body::{self, CollectError};
use crate::net::client_addr::client_addr;
use crate::net::headers::RECEIPT_HEADER;
use crate::net::problem::{Failure, Purpose};
use crate::store::Attachments;

use super::refusal::{over_rate, Members};

/// Largest message accepted: the schemas bound every member but a justification's free-form
/// `breakdown`; real messages are under 2 KiB.
pub const MAX_MESSAGE: u64 = 64 << 10;
/// Largest agent reply stored for replays (the SDK's handler answers a few dozen bytes).
pub const MAX_REPLY: u64 = 64 << 10;
/// How often a repeat polls while the first copy is still in flight.
const POLL: Duration = Duration::from_millis(20);

/// Whether `path` is under the quote channel, in any letter case: an agent whose router
/// ignores case must not be reachable around the guard by another spelling (those are
/// refused in [`handle`], not forwarded).
pub fn is_channel(config: &Config, path: &str) -> bool {
    match &config.aip2 {
        Some(a) => {
            let n = a.quote_channel.len();
            path.get(..n)
                .is_some_and(|p| p.eq_ignore_ascii_case(&a.quote_channel))
                && path.as_bytes().get(n).is_none_or(|b| *b == b'/')
        }
        None => false,
    }
}

pub async fn handle(
    call: &Call<'_>,
    enf: &Enforcement,
    qc: &QuoteChannelState,
    parts: http::request::Parts,
    body: Incoming,
) -> Staged {
    let (state, cx) = (&**call.state, &call.cx);
    let rec = state.recorder();
    let refused = |r: Refused| Err(Own::from(r));
    let Some(aip) = &state.config.aip2 else {
        return refused(refuse(rec, cx, not_found()).await);
    };
    let Some(rest) = parts.uri.path().strip_prefix(aip.quote_channel.as_str()) else {
        // Another letter case of the prefix.
        return refused(refuse(rec, cx, not_found()).await);
    };
    let mut segments = rest.trim_start_matches('/').split('/');
    let (Some(chain), Some(tx), None) = (segments.next(), segments.next(), segments.next()) else {
        return refused(refuse(rec, cx, not_found()).await);
    };
    if chain.is_empty() || tx.is_empty() {
        return refused(refuse(rec, cx, not_found()).await);
    }
    if parts.method != Method::POST {
        let r = Refusal::new(
            ErrorCode::MethodNotAllowed,
            "the quote channel accepts POST only",
        );
        let r = refuse(rec, cx, r).await;
        return refused(r.with_header(header::ALLOW, HeaderValue::from_static("POST")));
    }

    let client = client_addr(
        call.conn.peer.ip(),
        &parts.headers,
        &aip.trusted_proxies,
        aip.trusted_proxy_header,
    );
    if let Some(r) = over_rate(rec, enf, cx, &qc.rate, client, Members::QuoteChannel).await {
        return refused(r);
    }

    let limit = MAX_MESSAGE.min(state.config.limits.max_body);
    let bytes = match body::read_request_body(body, limit).await {
        Ok(b) => b,
        Err(CollectError::TooLarge(_)) => {
            let r = Refusal::new(
                ErrorCode::BodyTooLarge,
                "a quote-channel message is limited to 64 KiB",
            );
            return refused(refuse(rec, cx, r).await);
        }
        Err(CollectError::Read(_)) => {
            let r = Refusal::new(ErrorCode::BadRequest, "request body could not be read");
            return refused(refuse(rec, cx, r).await);
        }
    };
    let now_s = u64::try_from(enf.clock.now_ms() / 1000).unwrap_or(0);
    let checked = match aip2::check(&bytes, chain, tx, &qc.rules, now_s) {
        Ok(c) => c,
        Err(r) => return refused(refuse(rec, cx, r).await),
    };

    // The nonce store: a scoped key, so it never meets an Idempotency-Key of a write.
    let key =
        palisade_policy::Sha256Digest::of(format!("aip2\0{}", checked.dedup_key()).as_bytes())
            .to_string();
    let fingerprint = checked.fingerprint.to_string();
    let times = KeyTimes {
        retention_ms: i64::try_from(aip.dedup_ttl.as_millis()).unwrap_or(i64::MAX),
        hold_ms: KeyTimes::from_config(&state.config).hold_ms,
    };
    let waited_until =
        tokio::time::Instant::now() + state.config.upstream.timeout + Duration::from_secs(5);
    let pending = loop {
        let reservation =
            match idempotency::reserve(enf, key.clone(), fingerprint.clone(), times).await {
                Ok(r) => r,
                Err(r) => return refused(refuse(rec, cx, r).await),
            };
        match reservation {
            Reservation::Fresh(p) => break p,
            Reservation::Stored(rec) if rec.fingerprint == fingerprint => {
                let mut resp = idempotency::replay(&rec);
                *resp.status_mut() = StatusCode::OK;
                return Ok((resp, Outcome::Forwarded));
            }
            Reservation::Running(Some(f)) if f != fingerprint => {
                return refused(refuse(rec, cx, reused()).await);
            }
            Reservation::Stored(_) => return refused(refuse(rec, cx, reused()).await),
            // The first copy is in flight: its reply is this one's.
            Reservation::Running(_) => {
                if tokio::time::Instant::now() >= waited_until {
                    let r = Refusal::new(
                        ErrorCode::IdempotencyInFlight,
                        "the first copy of this message is still being delivered",
                    );
                    return refused(refuse(rec, cx, r).await);
                }
                tokio::time::sleep(POLL).await;
            }
        }
    };
    let req = http::Request::from_parts(parts, bytes);
    deliver(call, enf, req, pending, &checked).await
}

/// Forwards the first copy and stores its reply with a delivery receipt.
async fn deliver(
    call: &Call<'_>,
    enf: &Enforcement,
    req: http::Request<Bytes>,
    pending: Pending,
    checked: &aip2::Checked,
) -> Staged {
    let cx = &call.cx;
    let (parts, bytes) = req.into_parts();
    let sent = forward_plain(call.state, parts, body::full(bytes), call.conn, cx, None).await;
    let resp = match sent {
        Ok(resp) if !resp.status().is_server_error() => resp,
        // Not delivered (or the agent failed): the sender may send it again.
        sent => {
            pending.release().await;
            return sent.map(forwarded);
        }
    };
    let (head, reply) = resp.into_parts();
    let reply = match body::collect_proxy(reply, MAX_REPLY).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "quote-channel reply not stored");
            pending.release().await;
            let failure = Failure::ResponseTooLarge(Purpose::QuoteReply);
            return Err(Own::failed(failure, &cx.trace_id));
        }
    };
    let mut resp = Response::from_parts(head, body::full(reply.clone()));
    let record = pending.record(&resp, &reply);
    let receipt = ReceiptBody {
        method: Some("POST".into()),
        sor_target_uri: Some(cx.operation.trim_start_matches("POST ").to_owned()),
        request_digest: Some(checked.digest_uri()),
        upstream_status: Some(resp.status().as_u16()),
        outcome: Some(checked.kind.wire().to_owned()),
        trace_id: Some(cx.trace_id.to_string()),
        rules_digest: call.state.rules_digest(),
        ..ReceiptBody::new(
            format!("urn:uuid:{}", uuid::Uuid::new_v4()),
            ReceiptKind::Delivery,
            enf.now_rfc3339(),
        )
    };
    let attach = Attachments {
        idempotency: Some(record),
        freeze: None,
        escrow: None,
    };
    match enf.seal(receipt, attach).await {
        Ok(Some(sealed)) => {
            if let Some(v) = receipts::receipt_header_value(&sealed.value) {
                resp.headers_mut().insert(RECEIPT_HEADER, v);
            }
        }
        // Delivered, but a repeat would be delivered again: say so loudly.
        Ok(None) | Err(_) => {
            tracing::error!("quote-channel delivery not recorded; a repeat would be forwarded");
            metrics::counter!(crate::telemetry::RECEIPTS_NOT_STORED).increment(1);
        }
    }
    drop(pending);
    Ok((resp, Outcome::Forwarded))
}

fn not_found() -> Refusal {
    Refusal::new(
        ErrorCode::QuoteChannel,
        "the channel path must be {quote_channel}/{chainId}/{txId}",
    )
}

fn reused() -> Refusal {
    Refusal::new(
        ErrorCode::QuoteNonceReused,
        "another message was already received under this type, signer and nonce",
    )
}

/// A receipted refusal with the SDK handler's members.
async fn refuse(rec: Recorder<'_>, cx: &WriteContext, r: Refusal) -> Refused {
    super::refusal::refuse(rec, cx, r, Members::QuoteChannel).await
}
