//! From the file as written to [`Config`]: each table read on its own with its unknown keys
//! collected, then every value parsed, each failure a [`ConfigProblem`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::collector::Collector;
use super::model::{
    AccessLog, AdminSection, Config, LimitsSection, ListenSection, ListenTls, Sink, StoreKind,
    StoreSection, UnboundWrites, UpstreamSection,
};
use super::raw::{RawConfig, RawSink};

impl RawConfig {
    pub(super) fn validate(mut self, c: &mut Collector<'_>) -> Config {
        let listen_addr = c.addr("listen.addr", &self.listen.addr, "0.0.0.0:8080");
        let drain_timeout = c.duration("listen.drain_timeout", &self.listen.drain_timeout, "20s");
        let public_base = self.listen.public_base.clone();
        if let Some(base) = &public_base {
            c.url("listen.public_base", base);
        }
        let admin_addr = c.addr("admin.addr", &self.admin.addr, "127.0.0.1:9901");
        let admin_token_file = self.admin.token_file.as_ref().map(PathBuf::from);
        // SPEC §9: without a credential the admin listener stays on loopback, where only the
        // pod's own containers reach it.
        let loopback = admin_addr
            .parse::<SocketAddr>()
            .map_or(true, |a| a.ip().is_loopback());
        let admin_tls = self.admin.tls.map(|t| ListenTls {
            cert: t.cert,
            key: t.key,
            client_ca: t.client_ca,
        });
        let admin_spiffe_ids = self.admin.allowed_spiffe_ids.unwrap_or_default();
        for id in &admin_spiffe_ids {
            let ok = id
                .strip_prefix("spiffe://")
                .is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/'));
            if !ok {
                c.push(
                    "admin.allowed_spiffe_ids",
                    format!("{id:?} is not a SPIFFE ID (spiffe://<trust domain>/<path>)"),
                );
            }
        }
        if !admin_spiffe_ids.is_empty()
            && admin_tls
                .as_ref()
                .and_then(|t| t.client_ca.as_ref())
                .is_none()
        {
            c.push(
                "admin.allowed_spiffe_ids",
                "needs admin.tls with client_ca: client certificates are verified against it",
            );
        }
        if !loopback && admin_token_file.is_none() && admin_spiffe_ids.is_empty() {
            c.push(
                "admin.addr",
                "a non-loopback admin listener needs a credential: admin.token_file or admin.allowed_spiffe_ids (or bind it to 127.0.0.1)",
            );
        }

        let upstream_url = match &self.upstream.url {
            Some(u) => c.url("upstream.url", u),
            None => {
                c.push("upstream.url", "is required");
                None
            }
        }
        .unwrap_or_else(|| http::Uri::from_static("http://127.0.0.1:1"));
        let shadow_url = self
            .upstream
            .shadow_url
            .as_deref()
            .and_then(|u| c.url("upstream.shadow_url", u));
        let upstream_tls = self.upstream.tls.unwrap_or_default();

        let max_json_depth = match self.limits.max_json_depth {
            None => 128,
            Some(d) if (1..=4096).contains(&d) => d as usize,
            Some(_) => {
                c.push("limits.max_json_depth", "must be between 1 and 4096");
                128
            }
        };
        let max_connections = match self.limits.max_connections {
            None => 10_000,
            Some(n) if (1..=1_000_000).contains(&n) => n as usize,
            Some(_) => {
                c.push("limits.max_connections", "must be between 1 and 1000000");
                10_000
            }
        };

        let store_kind = match self.store.kind.as_deref() {
            None | Some("embedded") => StoreKind::Embedded,
            Some("postgres") => StoreKind::Postgres,
            Some(_) => {
                c.push("store.kind", "must be \"embedded\" or \"postgres\"");
                StoreKind::Embedded
            }
        };
        if store_kind == StoreKind::Postgres
            && self.store.url.is_none()
            && self.store.url_env.is_none()
        {
            c.push(
                "store.url",
                "store.url or store.url_env is required when store.kind = \"postgres\"",
            );
        }
        let store_pool_size = match self.store.pool_size {
            None => 16,
            Some(n) if (1..=1024).contains(&n) => n as usize,
            Some(_) => {
                c.push("store.pool_size", "must be between 1 and 1024");
                16
            }
        };
        let receipts = match self.store.receipt_retention.as_deref() {
            Some("forever") => None,
            _ => Some(c.duration(
                "store.receipt_retention",
                &self.store.receipt_retention,
                "30d",
            )),
        };
        // Shorter than an hour would remove receipts that an open lease's lookup refers to.
        if receipts.is_some_and(|d| d < Duration::from_secs(3600)) {
            c.push(
                "store.receipt_retention",
                "must be at least \"1h\", or \"forever\"",
            );
        }
        let access_log = match (self.log.access.as_deref(), self.log.access_sample_rate) {
            (None | Some("full"), None) => AccessLog::Full,
            (Some("off"), None) => AccessLog::Off,
            (Some("sampled"), rate) => {
                let rate = rate.unwrap_or(0.01);
                if rate.is_finite() && rate > 0.0 && rate <= 1.0 {
                    AccessLog::Sampled {
                        every: (1.0 / rate).round().max(1.0) as u64,
                    }
                } else {
                    c.push(
                        "log.access_sample_rate",
                        "must be a number in (0, 1], e.g. 0.01 for one request in a hundred",
                    );
                    AccessLog::Full
                }
            }
            (None | Some("full" | "off"), Some(_)) => {
                c.push(
                    "log.access_sample_rate",
                    "applies only with log.access = \"sampled\"",
                );
                AccessLog::Full
            }
            (Some(_), _) => {
                c.push("log.access", "must be \"full\", \"sampled\" or \"off\"");
                AccessLog::Full
            }
        };
        let store_retention = super::model::Retention {
            leases: c.duration("store.lease_retention", &self.store.lease_retention, "24h"),
            receipts,
        };

        let methods =
            |c: &mut Collector<'_>, key: &str, list: Option<Vec<String>>, default: &[&str]| {
                list.unwrap_or_else(|| default.iter().map(|m| (*m).to_owned()).collect())
                    .iter()
                    .filter_map(|m| match http::Method::from_bytes(m.as_bytes()) {
                        Ok(method) if m.bytes().all(|b| b.is_ascii_uppercase()) => Some(method),
                        _ => {
                            c.push(key, "must list HTTP methods in upper case");
                            None
                        }
                    })
                    .collect::<Vec<_>>()
            };
        let writes = methods(
            c,
            "ptcl.writes",
            self.ptcl.writes,
            &["POST", "PUT", "PATCH", "DELETE"],
        );
        let reads = methods(
            c,
            "ptcl.reads",
            self.ptcl.reads,
            &["GET", "HEAD", "OPTIONS"],
        );
        if reads.iter().any(|m| writes.contains(m)) {
            c.push(
                "ptcl.reads",
                "must not name a method that ptcl.writes names",
            );
        }
        if reads
            .iter()
            .any(|m| *m == http::Method::CONNECT || *m == http::Method::TRACE)
        {
            c.push("ptcl.reads", "CONNECT and TRACE are never forwarded");
        }
        let pre_image_fetch = match self.ptcl.pre_image.as_deref() {
            None | Some("fetch") => true,
            Some("off") => false,
            Some(_) => {
                c.push("ptcl.pre_image", "must be \"fetch\" or \"off\"");
                true
            }
        };
        let unbound_writes = match self.rich.unbound_writes.as_deref() {
            None | Some("deny") => UnboundWrites::Deny,
            Some("allow") => UnboundWrites::Allow,
            Some(_) => {
                c.push("rich.unbound_writes", "must be \"deny\" or \"allow\"");
                UnboundWrites::Deny
            }
        };
        if self.rich.lockfile.is_some() != self.rich.contracts.is_some() {
            c.push("rich", "lockfile and contracts must be set together");
        }
        let candidate = self.rich.candidate.take().and_then(|k| k.validate(c));

        let drift_sinks = self
            .drift
            .sinks
            .unwrap_or_else(|| vec![RawSink::Named("stdout".into())])
            .into_iter()
            .filter_map(|s| match s {
                RawSink::Named(n) if n == "stdout" => Some(Sink::Stdout),
                RawSink::Named(_) => {
                    c.push("drift.sinks", "a named sink must be \"stdout\"");
                    None
                }
                RawSink::File { file } => Some(Sink::File(file)),
                RawSink::Webhook { webhook } => {
                    c.url("drift.sinks.webhook", &origin_of(&webhook));
                    Some(Sink::Webhook(webhook))
                }
            })
            .collect();

        let mcp_allowed_origins: Vec<String> = self
            .mcp
            .as_ref()
            .and_then(|m| m.allowed_origins.clone())
            .unwrap_or_default()
            .iter()
            .filter_map(|o| {
                let plain = o
                    .split_once("://")
                    .is_some_and(|(_, rest)| !rest.trim_end_matches('/').contains('/'));
                match palisade_policy::target::normalize_origin(o) {
                    Ok(n) if plain => Some(n),
                    _ => {
                        c.push(
                            "mcp.allowed_origins",
                            "each entry is an origin: http(s)://host[:port], no path",
                        );
                        None
                    }
                }
            })
            .collect();
        let mcp_path = self.mcp.map(|m| m.path.unwrap_or_else(|| "/mcp".into()));
        if let Some(p) = &mcp_path {
            if !p.starts_with('/') {
                c.push("mcp.path", "must start with '/'");
            }
        }

        // `[aip2]` stands alone (issue 37): with `ptcl.writes = []` the sidecar still opens
        // the store and key its nonce store, relay and receipts need.
        let aip2 = self.aip2.map(|a| a.validate(c));

        let admission = self.admission.map(|a| a.validate(c));
        if admission.is_some() && writes.is_empty() {
            c.push(
                "admission",
                "needs PTCL enforcement (ptcl.writes not empty): its refusals are receipted in the store",
            );
        }
        if admission.as_ref().is_some_and(|a| a.required) && self.rich.lockfile.is_none() {
            c.push(
                "admission",
                "needs a RICH bundle (rich.lockfile): tokens name operations and contract digests from it",
            );
        }

        let receipts = self.receipts.validate(c, public_base.as_deref());
        let budgets = self.budgets.validate(c);
        let rules = self.rules.and_then(|r| r.validate(c, writes.is_empty()));
        let escrow = self.escrow.validate(c);
        let otlp = self.telemetry.validate(c);
        let runtime_threads = match self.runtime.threads {
            None => None,
            Some(n) if (1..=256).contains(&n) => Some(n as usize),
            Some(_) => {
                c.push("runtime.threads", "expected 1 to 256 data-plane runtimes");
                None
            }
        };
        let rcns = self.rcns.map(|r| r.validate(c));
        if rcns.is_some() && (writes.is_empty() || self.rich.lockfile.is_none()) {
            c.push(
                "rcns",
                "needs PTCL enforcement (ptcl.writes not empty) and a RICH bundle (rich.lockfile): recipes compose bound capabilities, contracts are kept in the store",
            );
        }
        let if_match = self.upstream.if_match.unwrap_or(false);
        if if_match && !pre_image_fetch {
            c.push(
                "upstream.if_match",
                "needs ptcl.pre_image = \"fetch\": the ETag it sends is the one check 12's fetch answered with",
            );
        }
        if rcns.is_some() && !pre_image_fetch {
            c.push(
                "rcns",
                "needs ptcl.pre_image = \"fetch\": a composed write that fails half way is undone by putting back what its steps replaced",
            );
        }

        Config {
            otlp,
            budgets,
            rules,
            escrow,
            runtime_threads,
            aip2,
            admission,
            rcns,
            receipts,
            listen: ListenSection {
                addr: listen_addr,
                drain_timeout,
                tls: self.listen.tls.map(|t| ListenTls {
                    cert: t.cert,
                    key: t.key,
                    client_ca: t.client_ca,
                }),
            },
            public_base,
            admin: AdminSection {
                addr: admin_addr,
                token_file: admin_token_file,
                tls: admin_tls,
                spiffe_ids: admin_spiffe_ids,
            },
            upstream: UpstreamSection {
                url: upstream_url,
                connect_timeout: c.duration(
                    "upstream.connect_timeout",
                    &self.upstream.connect_timeout,
                    "2s",
                ),
                timeout: c.duration("upstream.timeout", &self.upstream.timeout, "30s"),
                ca: upstream_tls.ca,
                identity: upstream_tls.identity,
                if_match,
            },
            shadow_url,
            limits: LimitsSection {
                max_body: c.size("limits.max_body", &self.limits.max_body, 1 << 20),
                max_response: c.size("limits.max_response", &self.limits.max_response, 8 << 20),
                max_json_depth,
                header_timeout: c.duration(
                    "limits.header_timeout",
                    &self.limits.header_timeout,
                    "10s",
                ),
                max_connections,
            },
            store: StoreSection {
                kind: store_kind,
                path: self
                    .store
                    .path
                    .unwrap_or_else(|| "/var/lib/palisade/state.redb".into()),
                url: self.store.url,
                url_env: self.store.url_env,
                pool_size: store_pool_size,
                statement_timeout: c.duration(
                    "store.statement_timeout",
                    &self.store.statement_timeout,
                    "2s",
                ),
                retention: store_retention,
            },
            access_log,
            signing_key: self.signing.key,
            trust_issuers: self.trust.issuers,
            reads,
            writes,
            max_clock_skew: c.duration("ptcl.max_clock_skew", &self.ptcl.max_clock_skew, "60s"),
            pre_image_fetch,
            max_grant: c.duration("ptcl.max_grant", &self.ptcl.max_grant, "5m"),
            authority: self.ptcl.authority.unwrap_or(true),
            idempotency_retention: c.duration(
                "ptcl.idempotency_retention",
                &self.ptcl.idempotency_retention,
                "24h",
            ),
            candidate,
            lockfile: self.rich.lockfile,
            contracts: self.rich.contracts,
            expected_digest: self.rich.expected_digest,
            unbound_writes,
            watch: self.rich.watch.unwrap_or(true),
            mcp_path,
            mcp_allowed_origins,
            drift_sinks,
            quarantine_dir: self
                .drift
                .quarantine_dir
                .unwrap_or_else(|| "/var/lib/palisade/quarantine".into()),
        }
    }
}

/// The origin part of a URL (for validating webhook URLs, which may have a path).
fn origin_of(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => match (u.scheme_str(), u.authority()) {
            (Some(s), Some(a)) => format!("{s}://{a}"),
            _ => url.to_owned(),
        },
        Err(_) => url.to_owned(),
    }
}
