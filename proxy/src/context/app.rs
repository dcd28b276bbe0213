//! The state one server's requests share.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::enforcement::Enforcement;
use super::locks::Drifted;
use crate::config::Config;
use crate::net::upstream::Upstream;
use crate::telemetry;

/// What the write engine, its legs and every helper below a stage's entry work with: the
/// configuration, the metrics, the upstream clients, write enforcement and the bundle in force. Built once at
/// start; a write's own task holds it (one `Arc`) instead of the whole server's state.
pub struct Plane {
    pub config: Config,
    pub metrics: telemetry::Metrics,
    /// Present when `ptcl.writes` is not empty: every write goes through it.
    pub enforcement: Option<Arc<Enforcement>>,
    /// `upstream.shadow_url`: where DRY_RUN_SHADOW writes go instead of the SoR.
    pub shadow: Option<Upstream>,
    pub upstream: Upstream,
    /// The RICH bundle in force (SPEC §7): swapped whole on reload; a request loads it once
    /// and is decided wholly by that version.
    pub bundle: arc_swap::ArcSwapOption<palisade_rich::Bundle>,
    /// The operator's rules in force (SPEC §15): swapped whole on reload like the bundle; a
    /// write loads them once.
    pub rules: arc_swap::ArcSwapOption<palisade_rules::RuleSet>,
    /// `rich.candidate`: the bundle in shadow, when configured (SPEC §15).
    pub candidate: arc_swap::ArcSwapOption<super::Candidate>,
    /// `[telemetry] otlp` (SPEC §16): every request's span is made here when configured.
    pub otlp: Option<Arc<telemetry::otlp::Exporters>>,
}

impl Plane {
    /// `rules_digest` for a receipt: the operator's rules in force, when configured.
    pub fn rules_digest(&self) -> Option<String> {
        self.rules
            .load()
            .as_deref()
            .map(|r| r.digest_text().to_owned())
    }

    pub fn recorder(&self) -> Recorder<'_> {
        Recorder {
            metrics: &self.metrics,
            enf: self.enforcement.as_deref(),
        }
    }
}

/// State shared by every request of one server: the [`Plane`] (which it derefs to, so a
/// stage reads `state.config` as any helper reads `plane.config`) and what only the stages
/// and the admin API read.
pub struct AppState {
    pub plane: Arc<Plane>,
    /// Set on SIGTERM: `/readyz` turns 503 at once.
    pub draining: AtomicBool,
    /// MCP tools last listed with a changed definition (SPEC §7).
    pub mcp_drifted: Drifted,
    /// The bundle whose pinned tools were last checked against the MCP server's own list.
    pub mcp_checked: super::locks::ToolsChecked,
    /// `[aip2]`: the quote channel's rules and its per-client rate limit.
    pub quote_channel: Option<QuoteChannelState>,
    /// `[admission]`: the issuers' keys and the verified-token cache.
    pub admission: Option<super::AdmissionState>,
    /// `[rcns]`: the callers file and the PROPOSE rate.
    pub rcns: Option<super::RcnsState>,
}

/// What the AIP-2.1 quote-channel guard keeps between requests.
pub struct QuoteChannelState {
    pub rules: palisade_policy::aip2::Rules,
    pub rate: crate::net::rate::ClientRate,
    /// Relay posts per client address: a window of their own, so that a busy relay client
    /// does not use up its quote-channel allowance (or the reverse).
    pub relay_rate: crate::net::rate::ClientRate,
}

impl QuoteChannelState {
    pub fn from_config(config: &Config) -> Option<Self> {
        let a = config.aip2.as_ref()?;
        Some(Self {
            rules: palisade_policy::aip2::Rules {
                kernels: a.kernels.clone(),
                grace_s: a.grace.as_secs(),
                max_ttl_s: a.max_ttl.as_secs(),
            },
            rate: crate::net::rate::ClientRate::per_minute(a.rate_limit),
            relay_rate: crate::net::rate::ClientRate::per_minute(a.rate_limit),
        })
    }
}

impl AppState {
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}

/// What a refusal is recorded with (`enforce::receipts::record`): the refusal counter, and
/// the store and drift sink when writes are enforced. The narrow handle the helpers below a
/// stage's entry take when recording a refusal is all they do with the server's state.
#[derive(Clone, Copy)]
pub struct Recorder<'a> {
    pub metrics: &'a telemetry::Metrics,
    pub enf: Option<&'a Enforcement>,
}

impl std::ops::Deref for AppState {
    type Target = Plane;

    fn deref(&self) -> &Plane {
        &self.plane
    }
}
