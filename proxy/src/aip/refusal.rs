//! How the quote channel and the relay refuse: a receipted problem+json (with a drift event)
//! that also carries the members the `agirails` SDK's peers read, and the per-client rate
//! limit that both apply before reading a body.

use std::net::IpAddr;

use http::{header, HeaderValue, Response};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{AppState, Enforcement, WriteContext};
use crate::enforce::receipts;
use crate::net::body::ProxyBody;
use crate::net::rate::{Admit, ClientRate};

/// The SDK members a refusal carries beside ours (`accepted`/`reason` for the quote
/// channel's handler, `error` for the relay's clients), each given the refusal's detail.
#[derive(Clone, Copy)]
pub enum Members {
    QuoteChannel,
    Relay,
}

impl Members {
    fn of(self, r: &Refusal) -> Vec<(&'static str, serde_json::Value)> {
        match self {
            Members::QuoteChannel => vec![
                ("accepted", false.into()),
                ("reason", r.detail.clone().into()),
            ],
            Members::Relay => vec![("error", r.detail.clone().into())],
        }
    }
}

/// A receipted refusal with the SDK's members.
pub async fn refuse(
    state: &AppState,
    cx: &WriteContext,
    r: Refusal,
    members: Members,
) -> Response<ProxyBody> {
    let evidence = receipts::Evidence::with_extra(&members.of(&r));
    receipts::record(state, r, cx, evidence)
        .await
        .into_response()
}

/// `Some(429)` when `client` is over `rate`. The first refusal per address and window is
/// receipted; the rest are counted only, so a flood cannot turn into a flood of receipts
/// (docs/decisions.md).
pub async fn over_rate(
    state: &AppState,
    enf: &Enforcement,
    cx: &WriteContext,
    rate: &ClientRate,
    client: IpAddr,
    members: Members,
) -> Option<Response<ProxyBody>> {
    let Admit::No {
        retry_after,
        receipt,
    } = rate.check(client, enf.clock.now_ms())
    else {
        return None;
    };
    let r = Refusal::new(
        ErrorCode::RateLimited,
        "too many requests from this client address (aip2.rate_limit)",
    );
    let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
    let mut resp = if receipt {
        refuse(state, cx, r, members).await
    } else {
        state.metrics.refusal(r.code);
        let mut p = crate::net::problem::Problem::of_refusal(&r, &cx.trace_id);
        p.extensions
            .extend(members.of(&r).into_iter().map(|(k, v)| (k.to_owned(), v)));
        p.into_response()
    };
    resp.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    Some(resp)
}
