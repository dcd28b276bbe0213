//! How the quote channel and the relay refuse: a receipted problem+json (with a drift event)
//! that also carries the members the `agirails` SDK's peers read, and the per-client rate
//! limit that both apply before reading a body.

use std::net::IpAddr;

use http::{header, HeaderValue};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{Enforcement, Recorder, WriteContext};
use crate::enforce::receipts::{self, Refused};
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
pub async fn refuse(rec: Recorder<'_>, cx: &WriteContext, r: Refusal, members: Members) -> Refused {
    let evidence = receipts::Evidence::with_extra(&members.of(&r));
    receipts::record(rec, r, cx, evidence).await
}

/// `Some(429)` when `client` is over `rate`. The first refusal per address and window is
/// receipted; the rest are counted only, so a flood cannot turn into a flood of receipts
/// (docs/decisions.md).
pub async fn over_rate(
    rec: Recorder<'_>,
    enf: &Enforcement,
    cx: &WriteContext,
    rate: &ClientRate,
    client: IpAddr,
    members: Members,
) -> Option<Refused> {
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
    let refused = if receipt {
        refuse(rec, cx, r, members).await
    } else {
        let extra = members.of(&r).into_iter().map(|(k, v)| (k.to_owned(), v));
        receipts::counted(rec, r, cx).with_extra(extra.collect())
    };
    Some(refused.with_header(header::RETRY_AFTER, HeaderValue::from(secs.max(1))))
}
