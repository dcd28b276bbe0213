//! The records the store keeps, typed, and the rules both backends apply to them.
//!
//! A record is stored as its JSON (the field names are the ones earlier versions wrote, so
//! a store written by them reads the same). What a backend decides about a record (may this
//! lease be compensated, is this escrow in the state an update expects, what does a key's
//! stored outcome hold once its receipt is sealed) is a pure function here, so the embedded
//! and the PostgreSQL backends cannot drift apart: each only reads and writes rows.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::error::StoreError;

/// Where a lease is in its life (SPEC §5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LeaseState {
    /// Granted by the sidecar (`POST /leases`), no write yet.
    Granted,
    /// Its write was sent and answered.
    Committed,
    /// Its write was sent and not completed (SPEC §7): nothing to compensate.
    Interim,
    /// Its inverse was started, once.
    Compensated,
}

impl LeaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Granted => "granted",
            Self::Committed => "committed",
            Self::Interim => "interim",
            Self::Compensated => "compensated",
        }
    }
}

/// A lease's record: written at grant or commit, read by the lease endpoints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LeaseRecord {
    pub lease_id: String,
    pub state: LeaseState,
    /// The resource key its fence guards (SPEC §4.3).
    pub resource: String,
    /// The write's path (a granted lease has none yet).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The write's method, for the inverse's binding rule at `compensate` (SPEC §5.4; a
    /// record written before it was kept has none, and is judged as if it could be a POST).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    pub epoch: u64,
    pub recovery_mode: String,
    pub expires_at_ms: i64,
    /// The caller the lease is bound to.
    #[serde(default)]
    pub agent_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_digest: Option<String>,
    /// The epoch the compensation was fenced with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_epoch: Option<u64>,
}

impl LeaseRecord {
    /// A committed lease with only what the store itself reads (its tests, tools).
    pub fn committed(lease_id: &str, resource: &str, epoch: u64, expires_at_ms: i64) -> Self {
        Self {
            lease_id: lease_id.into(),
            state: LeaseState::Committed,
            resource: resource.into(),
            path: Some(resource.into()),
            method: None,
            epoch,
            recovery_mode: "COMPENSATING_ACTION".into(),
            expires_at_ms,
            agent_id: None,
            lease_digest: None,
            compensation_epoch: None,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // A struct of strings and numbers always serialises.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The stored bytes, read; a record that does not parse is refused, not guessed at.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| {
            StoreError::Unavailable(format!("a stored lease record is unreadable: {e}"))
        })
    }
}

/// What [`Leases::begin_compensation`](super::Leases::begin_compensation) does with a lease's
/// record, decided before any row moves.
#[derive(Debug, PartialEq)]
pub enum CompensationStep {
    /// Advance `resource`'s fence by one, then store [`compensated`] with that epoch.
    Begin {
        record: Box<LeaseRecord>,
    },
    Already,
    NotCommitted,
}

pub fn compensation_step(record: Option<LeaseRecord>) -> CompensationStep {
    match record {
        Some(r) if r.state == LeaseState::Committed => CompensationStep::Begin {
            record: Box::new(r),
        },
        Some(r) if r.state == LeaseState::Compensated => CompensationStep::Already,
        _ => CompensationStep::NotCommitted,
    }
}

/// The record once its compensation started under `epoch`.
pub fn compensated(mut record: LeaseRecord, epoch: u64) -> LeaseRecord {
    record.state = LeaseState::Compensated;
    record.compensation_epoch = Some(epoch);
    record
}

/// When a staged lease's data is due (before retention): the record's expiry, or `now` for an
/// inverse staged without a record, so that inverses staged under ids no write uses go.
pub fn staged_expiry(record: Option<&LeaseRecord>, now_ms: i64) -> i64 {
    record.map_or(now_ms, |r| r.expires_at_ms)
}

/// An escrow's state (SPEC §5.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscrowState {
    Held,
    /// Approved; its release is under way (or a crash left it so).
    Releasing,
    Released,
    /// Approved, and the release was refused (its code says why).
    Refused,
    Rejected,
}

impl EscrowState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Releasing => "releasing",
            Self::Released => "released",
            Self::Refused => "refused",
            Self::Rejected => "rejected",
        }
    }

    /// Not decided yet: listed by `GET /admin/v1/escrow`.
    pub fn is_open(self) -> bool {
        matches!(self, Self::Held | Self::Releasing)
    }
}

/// Which protocol carried a held write: it is judged again as that protocol on release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeldProtocol {
    Http,
    Mcp,
}

/// A held write's request, as it came (the SoR needs its credentials): kept until the escrow
/// is decided, then removed from the record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeldRequest {
    pub method: String,
    pub target: String,
    /// `[name, base64 value]` pairs, hop-by-hop headers removed.
    pub headers: Vec<(String, String)>,
    pub body_b64: String,
    pub origin: Option<String>,
    pub peer: String,
    pub tls: bool,
    pub protocol: HeldProtocol,
}

/// An escrow's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EscrowRecord {
    pub escrow_id: String,
    pub state: EscrowState,
    pub lease_id: String,
    pub operation: String,
    pub trace_id: String,
    pub held_at: String,
    /// The holder's caller, for its own status reads; never shown outside.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<HeldRequest>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected_at: Option<String>,
    /// A released write's answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_status: Option<u16>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_b64: Option<String>,
    /// A refused release's error code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The receipt sealed with the record's last change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Value>,
    /// The names that approved it so far (SPEC §9: `escrow.approvals_required` distinct ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<String>,
    /// The contract the write was held under (an approval may name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_digest: Option<String>,
    /// `sha256:` of the held request's body (an approval may name it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_digest: Option<String>,
    /// When the held write's lease expires (unix ms): it cannot be approved after that.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_expires_at_ms: Option<i64>,
    /// The resource as check 12 fetched it before the hold (`{"absent":true}` or
    /// `{"content_type","body_b64"}`), for the operator's diff; never shown to the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_image: Option<Value>,
    /// The agent-facing operation a connection mapped the held write from, so that a freeze
    /// of that name stops its release too (SPEC §14).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub facing: Option<String>,
    /// The held write's operation and resource as freezes and budgets name them
    /// (`PUT /api/v2/items/{id}`, the fence key), beside `operation`, the request as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource: Option<String>,
    /// The operator's rule that held the write (SPEC §15), when a rule did rather than its
    /// lease's `HUMAN_ESCROW`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// That rule's `reason`, as the operator wrote it, for the approvers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_reason: Option<String>,
    /// The rule's `approvals`: distinct approvers this write needs (else
    /// `escrow.approvals_required`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals_required: Option<u32>,
    /// The rule's `expires`, as unix ms: undecided by then, the write is refused (as it is
    /// once its lease expires, whichever comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_expires_at_ms: Option<i64>,
}

impl EscrowRecord {
    /// A held escrow with no request kept (the store's tests, tools).
    pub fn held(escrow_id: &str, lease_id: &str) -> Self {
        Self {
            escrow_id: escrow_id.into(),
            state: EscrowState::Held,
            lease_id: lease_id.into(),
            operation: String::new(),
            trace_id: String::new(),
            held_at: String::new(),
            caller: None,
            request: None,
            released_at: None,
            rejected_at: None,
            upstream_status: None,
            content_type: None,
            body_b64: None,
            code: None,
            receipt: None,
            approvals: Vec::new(),
            contract_digest: None,
            request_digest: None,
            lease_expires_at_ms: None,
            pre_image: None,
            facing: None,
            operation_key: None,
            resource: None,
            rule: None,
            rule_reason: None,
            approvals_required: None,
            hold_expires_at_ms: None,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| {
            StoreError::Unavailable(format!("a stored escrow record is unreadable: {e}"))
        })
    }

    /// The record once decided: the held request (credentials, body) leaves it.
    pub fn decided(&self) -> Self {
        Self {
            request: None,
            pre_image: None,
            ..self.clone()
        }
    }
}

/// Whether an escrow whose stored record is `current` is in the state `expect` (`None`: the
/// escrow must not exist). A stored record that does not parse matches nothing.
pub fn escrow_state_is(current: Option<&[u8]>, expect: Option<EscrowState>) -> bool {
    match (current, expect) {
        (None, None) => true,
        (Some(bytes), Some(state)) => {
            EscrowRecord::from_bytes(bytes).is_ok_and(|r| r.state == state)
        }
        _ => false,
    }
}

/// Whether `update` applies to an escrow whose stored record is `current`: the escrow is in
/// the state the update expects, and an approval (held → held) adds exactly one name to the
/// names stored, so that two replicas approving at once cannot both write over one list (the
/// second finds the list changed and is refused, to be tried again).
pub fn escrow_update_applies(current: Option<&[u8]>, update: &EscrowUpdate) -> bool {
    if !escrow_state_is(current, update.expect) {
        return false;
    }
    if update.expect == Some(EscrowState::Held) && update.record.state == EscrowState::Held {
        let Some(stored) = current.and_then(|b| EscrowRecord::from_bytes(b).ok()) else {
            return false;
        };
        let new = &update.record.approvals;
        return new.len() == stored.approvals.len() + 1 && new.starts_with(&stored.approvals);
    }
    true
}

/// An escrow update's record as stored in a receipt's transaction: with the receipt.
pub fn sealed_escrow(update: &EscrowUpdate, receipt: &Value) -> Vec<u8> {
    EscrowRecord {
        receipt: Some(receipt.clone()),
        ..update.record.clone()
    }
    .to_bytes()
}

/// An idempotency key's stored outcome: the response as the client got it, and its receipt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredOutcome {
    pub fingerprint: String,
    pub status: u16,
    /// The kept response headers, `[name, value]`.
    pub headers: Vec<(String, String)>,
    pub body_b64: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receipt: Option<Value>,
    #[serde(default)]
    pub expires_ms: i64,
}

impl StoredOutcome {
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| {
            StoreError::Unavailable(format!("a stored idempotency outcome is unreadable: {e}"))
        })
    }
}

/// A key's outcome as stored in a receipt's transaction: with the receipt and its expiry.
pub fn sealed_outcome(idem: &IdempotencyRecord, receipt: &Value) -> Vec<u8> {
    let outcome = StoredOutcome {
        receipt: Some(receipt.clone()),
        expires_ms: idem.expires_ms,
        ..idem.outcome.clone()
    };
    serde_json::to_vec(&outcome).unwrap_or_default()
}

/// What a receipt carries into its transaction: records that must be durable exactly when the
/// receipt is (one fsync for both, and never one without the other).
#[derive(Debug, Clone, Default)]
pub struct Attachments {
    /// SPEC §5.6: the final outcome of an idempotency key.
    pub idempotency: Option<IdempotencyRecord>,
    /// SPEC §5.4: an escrow's new state.
    pub escrow: Option<EscrowUpdate>,
    /// SPEC §14: a freeze made or lifted, with the receipt that says so.
    pub freeze: Option<FreezeChange>,
}

/// A freeze made (`record`: its JSON) or lifted (`None`).
#[derive(Debug, Clone)]
pub struct FreezeChange {
    pub id: String,
    pub record: Option<Vec<u8>>,
}

/// An idempotency key's stored outcome. The store adds the sealed receipt and the expiry to
/// `outcome` before storing it ([`sealed_outcome`]).
#[derive(Debug, Clone)]
pub struct IdempotencyRecord {
    /// The scoped key (a digest of caller scope and key: bounded, and no credential stored).
    pub key: String,
    pub outcome: StoredOutcome,
    /// Unix ms after which the record is gone.
    pub expires_ms: i64,
}

/// Replaces an escrow's record if its current state is `expect` (`None`: the escrow must not
/// exist yet). The store adds the sealed receipt, when there is one, as `receipt`.
#[derive(Debug, Clone)]
pub struct EscrowUpdate {
    pub id: String,
    pub expect: Option<EscrowState>,
    pub record: EscrowRecord,
    /// On the update that creates the escrow: its lease's expiry (unix ms). The escrow is
    /// removed `store.lease_retention` after it, whatever its state by then: a held write can
    /// no longer be released once its lease expired, and a decided one is history.
    pub expires_at_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn lease(state: LeaseState) -> LeaseRecord {
        LeaseRecord {
            state,
            ..LeaseRecord::committed("l1", "/items/1", 4, 10)
        }
    }

    #[test]
    fn only_a_committed_lease_is_compensated_and_only_once() {
        let step = compensation_step(Some(lease(LeaseState::Committed)));
        let CompensationStep::Begin { record } = step else {
            panic!("a committed lease begins compensation")
        };
        let done = compensated(*record, 5);
        assert_eq!(done.state, LeaseState::Compensated);
        assert_eq!(done.compensation_epoch, Some(5));
        assert_eq!(compensation_step(Some(done)), CompensationStep::Already);
        for s in [LeaseState::Granted, LeaseState::Interim] {
            assert_eq!(
                compensation_step(Some(lease(s))),
                CompensationStep::NotCommitted
            );
        }
        assert_eq!(compensation_step(None), CompensationStep::NotCommitted);
    }

    #[test]
    fn records_read_as_earlier_versions_wrote_them() {
        // A commit record as the untyped code wrote it.
        let old = br#"{"lease_id":"l1","lease_digest":"sha-256:ab","recovery_mode":"INVERSE_OPERATION","expires_at_ms":10,"resource":"/items/1","path":"/items/1","epoch":4,"state":"committed","agent_id":null}"#;
        let r = LeaseRecord::from_bytes(old).unwrap();
        assert_eq!(r.state, LeaseState::Committed);
        assert_eq!(r.agent_id, None);
        // A grant record has no path.
        let grant = br#"{"lease_id":"g","state":"granted","resource":"/r","epoch":1,"recovery_mode":"COMPENSATING_ACTION","expires_at_ms":9,"agent_id":"a"}"#;
        assert_eq!(LeaseRecord::from_bytes(grant).unwrap().path, None);
        assert!(LeaseRecord::from_bytes(b"{\"state\":\"committed\"}").is_err());
    }

    #[test]
    fn an_escrow_update_matches_only_its_expected_state() {
        let rec = EscrowRecord::held("e", "l");
        let bytes = rec.to_bytes();
        assert!(escrow_state_is(None, None));
        assert!(!escrow_state_is(None, Some(EscrowState::Held)));
        assert!(escrow_state_is(Some(&bytes), Some(EscrowState::Held)));
        assert!(!escrow_state_is(Some(&bytes), Some(EscrowState::Releasing)));
        assert!(!escrow_state_is(Some(&bytes), None));
        assert!(!escrow_state_is(Some(b"not json"), Some(EscrowState::Held)));
        // An approval adds one name to the names stored, or applies not at all.
        let approval = |names: &[&str]| EscrowUpdate {
            id: "e".into(),
            expect: Some(EscrowState::Held),
            record: EscrowRecord {
                approvals: names.iter().map(|n| (*n).to_owned()).collect(),
                ..EscrowRecord::held("e", "l")
            },
            expires_at_ms: None,
        };
        assert!(escrow_update_applies(Some(&bytes), &approval(&["alice"])));
        assert!(!escrow_update_applies(
            Some(&bytes),
            &approval(&["alice", "bob"])
        ));
        let alice = approval(&["alice"]).record.to_bytes();
        assert!(escrow_update_applies(
            Some(&alice),
            &approval(&["alice", "bob"])
        ));
        assert!(
            !escrow_update_applies(Some(&alice), &approval(&["bob"])),
            "a lost update"
        );
        assert!(!escrow_update_applies(
            Some(&alice),
            &approval(&["carol", "bob"])
        ));
    }
}

/// One rule's part of a write's budget check (SPEC §14): its key and window.
#[derive(Debug, Clone)]
pub struct BudgetSpend {
    pub key: [u8; 16],
    pub limit: u32,
    pub window_ms: u64,
}

/// What a budget check did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BudgetVerdict {
    /// Every rule had room: one unit of each spent, named by these (for a refund).
    Spent(Vec<Vec<u8>>),
    /// Rule `rule` (its index in the check) had none; one more fits after `retry_after_ms`.
    /// Nothing was spent.
    Over { rule: usize, retry_after_ms: u64 },
}
