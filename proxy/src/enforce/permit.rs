//! What the checks hand on: a [`Permit`] for a write that passed (holding its resource's
//! lock), or a [`Denied`] with the refusal and the fence's epoch.

use palisade_policy::digest::Sha256Digest;
use palisade_policy::lease::{self, VerifiedLease};
use palisade_policy::receipt::RuleReport;
use palisade_policy::Refusal;

use crate::net::identity::Mismatch;

/// A write that passed every check and whose epoch advance is durable. Holding it holds the
/// resource's lock, so the forward happens under the lock too.
pub struct Permit {
    pub(super) _lock: crate::store::ResourceGuard,
    pub(super) lease: VerifiedLease,
    pub(super) target: String,
    pub(super) request_digest: Sha256Digest,
    pub(super) pre_image: Option<Sha256Digest>,
    /// `upstream.if_match`: the `If-Match` the write goes with (check 12's strong ETag).
    pub(super) if_match: Option<http::HeaderValue>,
    /// An escrowed write on its release: forwarded, not held again.
    pub(super) released: bool,
    /// A write to hold: the resource as check 12 fetched it (`preimage::State::snapshot`),
    /// kept with the escrow for the operator's diff.
    pub(super) held_snapshot: Option<Vec<u8>>,
    /// What the operator's rules left on it (SPEC §15): a hold, the report-mode rules.
    pub(super) ruled: Ruled,
}

/// A hold a rule asked for.
#[derive(Debug, Clone)]
pub struct RuleHold {
    pub rule: std::sync::Arc<str>,
    pub approvals: Option<u32>,
    pub expires_ms: Option<u64>,
    pub reason: Option<String>,
}

/// What the rules left on a write that goes on.
#[derive(Debug, Default, Clone)]
pub struct Ruled {
    pub hold: Option<RuleHold>,
    /// Report-mode rules that matched: for the receipt and the drift events.
    pub report: Vec<RuleReport>,
}

/// A refused write: the refusal, and the resource's epoch when the refusal came from the
/// fence (checks 11–12), for `current_epoch` and `Agent-Fence-Token`.
#[derive(Debug)]
pub struct Denied {
    pub refusal: Refusal,
    pub current_epoch: Option<u64>,
    /// Check 12's GET met another deployment identity: the peer, for the drift event.
    pub peer: Option<Mismatch>,
    /// Members the problem carries beside ours (a freeze's `freeze_id` and `reason`).
    pub extra: Vec<(String, serde_json::Value)>,
}

impl From<Refusal> for Denied {
    fn from(refusal: Refusal) -> Self {
        Self {
            refusal,
            current_epoch: None,
            peer: None,
            extra: Vec::new(),
        }
    }
}

/// What a permitted write does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Its epoch advance is durable: forward it.
    Forward,
    /// DRY_RUN_SHADOW: to the shadow (or nowhere); no epoch moved.
    DryRun,
    /// HUMAN_ESCROW, first pass: hold it durably; no epoch moved.
    Hold,
}

impl Permit {
    /// `upstream.if_match`: the `If-Match` the write is sent with.
    pub(crate) fn if_match(&self) -> Option<&http::HeaderValue> {
        self.if_match.as_ref()
    }

    /// The lease's epoch (what a forwarded write advanced its resource to).
    pub fn epoch(&self) -> u64 {
        self.lease.lease().cas_fence_epoch
    }

    pub fn disposition(&self) -> Disposition {
        match self.lease.lease().recovery_mode {
            lease::RecoveryMode::DryRunShadow => Disposition::DryRun,
            _ if self.released => Disposition::Forward,
            lease::RecoveryMode::HumanEscrow => Disposition::Hold,
            // An operator's rule holds it whatever its lease asked (SPEC §15).
            _ if self.ruled.hold.is_some() => Disposition::Hold,
            _ => Disposition::Forward,
        }
    }

    pub fn is_dry_run(&self) -> bool {
        self.disposition() == Disposition::DryRun
    }

    /// What the operator's rules left on the write.
    pub fn ruled(&self) -> &Ruled {
        &self.ruled
    }

    pub fn lease(&self) -> &lease::Lease {
        self.lease.lease()
    }

    /// The lease's expiry (unix ms).
    pub fn expires_at_ms(&self) -> i64 {
        self.lease.expires_at_ms()
    }

    pub fn target(&self) -> &str {
        &self.target
    }

    pub fn request_digest(&self) -> Sha256Digest {
        self.request_digest
    }

    pub fn pre_image(&self) -> Option<Sha256Digest> {
        self.pre_image
    }

    /// The resource as it was fetched before a held write (see `held_snapshot`).
    pub fn held_snapshot(&self) -> Option<&[u8]> {
        self.held_snapshot.as_deref()
    }
}
