//! What RCNS keeps (seed 000; issue 21): synthesized contracts (a PROPOSE under an
//! `Idempotency-Key` is found again by its contract's id, derived from the key), PROPOSE
//! attempts, and the count of rejections per (agent, task). Each is a JSON record under
//! (kind, key), owned by an agent and gone at its expiry. Both backends keep them, so a
//! contract made through one replica is served, listed and revoked through any other, and
//! survives restarts.

use serde_json::Value;

/// What a record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RcnsKind {
    /// A synthesized contract, by `synthesis_id`.
    Contract,
    /// A PROPOSE attempt (INSPECT target=rcns-attempt), by attempt id.
    Attempt,
    /// Rejections of one (agent, task): when to tell the agent to escalate.
    Rejections,
}

impl RcnsKind {
    pub fn tag(self) -> u8 {
        match self {
            Self::Contract => 1,
            Self::Attempt => 2,
            Self::Rejections => 3,
        }
    }

    pub fn of_tag(tag: u8) -> Option<Self> {
        Some(match tag {
            1 => Self::Contract,
            2 => Self::Attempt,
            3 => Self::Rejections,
            _ => return None,
        })
    }
}

/// One record.
#[derive(Debug, Clone, PartialEq)]
pub struct RcnsRecord {
    pub kind: RcnsKind,
    pub key: String,
    /// The agent it belongs to.
    pub owner: String,
    pub body: Value,
    /// Unix ms after which it is gone.
    pub expires_ms: i64,
}

/// How [`super::RcnsRecords::rcns_put`] stores a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RcnsPutMode {
    /// Only if no live record has the key, and the caps allow one more of the kind.
    Create { per_owner: u64, total: u64 },
    /// Whatever is there (a revocation, a counter).
    Replace,
    /// Only the expiry of a live record, to `record.expires_ms` (its body and owner are
    /// ignored): a session's idle timeout moved by use, never undoing a revocation made
    /// meanwhile.
    Touch,
}

/// The answer to [`super::RcnsRecords::rcns_put`].
#[derive(Debug, Clone, PartialEq)]
pub enum RcnsPut {
    Stored,
    /// A live record has the key (Create only); nothing changed.
    Exists(Box<RcnsRecord>),
    /// The owner has `per_owner` live records of the kind.
    OwnerFull,
    /// The store has `total` live records of the kind.
    Full,
    /// No live record has the key (Touch only).
    Missing,
}

/// The stored form (both backends): owner, expiry and body together.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Stored {
    pub owner: String,
    pub exp: i64,
    pub body: Value,
}

impl Stored {
    pub(crate) fn of(r: &RcnsRecord) -> Self {
        Self {
            owner: r.owner.clone(),
            exp: r.expires_ms,
            body: r.body.clone(),
        }
    }

    pub(crate) fn record(self, kind: RcnsKind, key: String) -> RcnsRecord {
        RcnsRecord {
            kind,
            key,
            owner: self.owner,
            body: self.body,
            expires_ms: self.exp,
        }
    }
}
