//! `[aip2]` (SPEC §13): the AIP-2.1 quote-channel guard.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;

use super::validate::Collector;

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
    pub relay: Option<bool>,
    pub relay_ttl: Option<String>,
    pub relay_max_per_tx: Option<i64>,
}

/// The quote channel's settings, validated.
#[derive(Debug, Clone)]
pub struct Aip2 {
    /// Path prefix: `POST {quote_channel}/{chainId}/{txId}` is guarded.
    pub quote_channel: String,
    /// EIP-712 `verifyingContract` (the ACTP kernel) per accepted chain id.
    pub kernels: BTreeMap<u64, [u8; 20]>,
    pub grace: Duration,
    pub max_ttl: Duration,
    pub dedup_ttl: Duration,
    /// Requests per minute per client address.
    pub rate_limit: u32,
    pub trusted_proxies: Vec<ipnet::IpNet>,
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
        // The relay (seed §6.3) is not in this build: accepting `relay = true` silently would
        // promise endpoints that answer 404.
        if self.relay == Some(true) {
            c.push(
                "aip2.relay",
                "the negotiation relay is not available in this build; set relay = false",
            );
        }
        let _ = (self.relay_ttl, self.relay_max_per_tx);
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
        }
    }
}
