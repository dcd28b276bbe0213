//! `[aip2]` (SPEC §13): the AIP-2.1 quote-channel guard and the negotiation relay.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::collector::Collector;
use super::model::{Aip2, ProxyHeader};

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct RawAip2 {
    pub quote_channel: Option<String>,
    pub kernels: Option<BTreeMap<String, String>>,
    pub grace: Option<String>,
    pub max_ttl: Option<String>,
    pub dedup_ttl: Option<String>,
    pub rate_limit: Option<i64>,
    pub trusted_proxies: Option<Vec<String>>,
    pub trusted_proxy_header: Option<String>,
    pub relay: Option<bool>,
    pub relay_ttl: Option<String>,
    pub relay_max_per_tx: Option<i64>,
    /// Ours, not the seed's: the relay's whole store is bounded too (docs/decisions.md).
    pub relay_max_messages: Option<i64>,
}

impl RawAip2 {
    pub(super) fn validate(self, c: &mut Collector<'_>) -> Aip2 {
        let quote_channel = self
            .quote_channel
            .unwrap_or_else(|| "/quote-channel".into());
        if !quote_channel.starts_with('/')
            || quote_channel.ends_with('/')
            || quote_channel.len() < 2
        {
            c.push(
                "aip2.quote_channel",
                "must be a path starting with '/', not ending with '/'",
            );
        }
        let mut kernels = BTreeMap::new();
        for (chain, addr) in self.kernels.unwrap_or_default() {
            let Ok(id) = chain.parse::<u64>() else {
                c.push("aip2.kernels", "keys must be decimal chain ids");
                continue;
            };
            match palisade_policy::aip2::message::address(&addr) {
                Some(a) => {
                    kernels.insert(id, a);
                }
                None => c.push(
                    &format!("aip2.kernels.{chain}"),
                    "expected a 0x-prefixed 20-byte hex address",
                ),
            }
        }
        if kernels.is_empty() {
            c.push(
                "aip2.kernels",
                "name at least one chain id and its kernel address: no message can verify without one",
            );
        }
        let rate_limit = match self.rate_limit {
            None => 60,
            Some(n @ 1..=1_000_000) => n as u32,
            Some(_) => {
                c.push(
                    "aip2.rate_limit",
                    "expected 1 to 1000000 requests per minute",
                );
                60
            }
        };
        let mut trusted_proxies = Vec::new();
        for text in self.trusted_proxies.unwrap_or_default() {
            // A bare address is a one-address network.
            let net = text
                .parse::<ipnet::IpNet>()
                .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
            match net {
                Ok(n) => trusted_proxies.push(n),
                Err(_) => c.push(
                    "aip2.trusted_proxies",
                    "expected CIDRs such as \"10.0.0.0/8\" or addresses",
                ),
            }
        }
        let trusted_proxy_header = match self.trusted_proxy_header.as_deref() {
            None => ProxyHeader::XForwardedFor,
            Some(h) if h.eq_ignore_ascii_case("x-forwarded-for") => ProxyHeader::XForwardedFor,
            Some(h) if h.eq_ignore_ascii_case("forwarded") => ProxyHeader::Forwarded,
            Some(_) => {
                c.push(
                    "aip2.trusted_proxy_header",
                    "expected \"x-forwarded-for\" or \"forwarded\": the one header the trusted proxies set",
                );
                ProxyHeader::XForwardedFor
            }
        };
        let relay_ttl = c.duration("aip2.relay_ttl", &self.relay_ttl, "24h");
        if relay_ttl.is_zero() {
            c.push("aip2.relay_ttl", "must be longer than zero");
        }
        let relay_max_per_tx = match self.relay_max_per_tx {
            None => 50,
            Some(n @ 1..=10_000) => n as u64,
            Some(_) => {
                c.push("aip2.relay_max_per_tx", "expected 1 to 10000 messages");
                50
            }
        };
        let relay_max_messages = match self.relay_max_messages {
            None => 100_000,
            Some(n @ 1..=100_000_000) => n as u64,
            Some(_) => {
                c.push(
                    "aip2.relay_max_messages",
                    "expected 1 to 100000000 messages",
                );
                100_000
            }
        };
        let grace = c.duration("aip2.grace", &self.grace, "30s");
        let max_ttl = c.duration("aip2.max_ttl", &self.max_ttl, "24h");
        let dedup_ttl = c.duration("aip2.dedup_ttl", &self.dedup_ttl, "25h");
        if dedup_ttl < max_ttl + grace {
            c.push(
                "aip2.dedup_ttl",
                "must be at least max_ttl + grace, or a replay could outlive its dedup record",
            );
        }
        Aip2 {
            quote_channel,
            kernels,
            grace,
            max_ttl,
            dedup_ttl,
            rate_limit,
            trusted_proxies,
            trusted_proxy_header,
            relay: self.relay.unwrap_or(true),
            relay_ttl,
            relay_max_per_tx,
            relay_max_messages,
        }
    }
}
