//! The durable part of a permit (SPEC §5.3): a write whose checks passed has its epoch
//! advanced, with its lease record, inverse and snapshot, before it leaves; budgets are spent
//! just before (SPEC §14). A dry run and a held write move nothing yet.

use crate::telemetry::otlp::span;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::lease;
use palisade_policy::{ErrorCode, Refusal};

use crate::context::Enforcement;
use crate::enforce::permit::{Denied, Disposition, Permit, Ruled};
use crate::enforce::stop::Keys;
use crate::store::{Advance, LeaseRecord, LeaseState, ResourceGuard, WriteIntent};

/// A write whose lease and checks 1–12 are settled, under its resource's lock.
pub(crate) struct Fenced<'a> {
    pub guard: ResourceGuard,
    pub verified: lease::VerifiedLease,
    pub target: String,
    pub resource: String,
    pub path: &'a str,
    /// An HTTP write's method (a tool call has none), kept with the lease record.
    pub method: Option<&'a str>,
    pub body: &'a [u8],
    pub pre_image: Option<Sha256Digest>,
    /// `upstream.if_match`: the ETag the write is sent with.
    pub if_match: Option<http::HeaderValue>,
    pub inverse: Option<Vec<u8>>,
    pub snapshot: Option<Vec<u8>>,
    pub releasing: bool,
    pub keys: &'a Keys,
    pub ruled: Ruled,
}

/// The durable part of a permit: the epoch advanced (with the lease record, its inverse and
/// snapshot) before the write leaves, unless the write moves nothing yet (a dry run, an
/// escrow's first pass).
pub(crate) async fn settle_fence(enf: &Enforcement, f: Fenced<'_>) -> Result<Permit, Denied> {
    let Fenced {
        guard,
        verified,
        target,
        resource,
        path,
        method,
        body,
        pre_image,
        if_match,
        inverse,
        snapshot,
        releasing,
        keys,
        ruled,
    } = f;
    let mut permit = Permit {
        _lock: guard,
        target,
        request_digest: Sha256Digest::of(body),
        pre_image,
        if_match,
        lease: verified,
        released: releasing,
        held_snapshot: None,
        ruled,
    };
    // A dry run passes every check the real write would, but moves nothing; so does a held
    // write until it is released (SPEC §5.4, §15). The permit's disposition says which.
    if permit.disposition() != Disposition::Forward {
        permit.held_snapshot = snapshot;
        return Ok(permit);
    }
    let (verified, guard) = (&permit.lease, &permit._lock);
    let l = verified.lease();

    // Durable before the write leaves (SPEC §5.3).
    let record = LeaseRecord {
        lease_id: l.lease_id.clone(),
        state: LeaseState::Committed,
        resource: resource.clone(),
        path: Some(path.to_owned()),
        method: method.map(str::to_owned),
        epoch: l.cas_fence_epoch,
        recovery_mode: l.recovery_mode.as_str().into(),
        expires_at_ms: verified.expires_at_ms(),
        agent_id: l.agent_id.clone(),
        lease_digest: Some(verified.digest().to_string()),
        compensation_epoch: None,
    };
    let intent = WriteIntent {
        resource: resource.clone(),
        epoch: l.cas_fence_epoch,
        lease_id: l.lease_id.clone(),
        expires_at_ms: verified.expires_at_ms(),
        lease_record: record,
        inverse,
        snapshot,
    };
    // SPEC §14: the write passed every check; it spends its budgets just before its epoch
    // moves (a refused one spends nothing, and one that goes nowhere gets them back).
    let spent = crate::enforce::stop::spend_budgets(enf, keys).await?;
    let waited = tokio::time::Instant::now();
    // The lock's confirmation travels beside the advance (it shows the lock held at that
    // moment, as well as after it: a lock is lost only with its session).
    let both = async { tokio::join!(enf.store.advance(intent), enf.store.confirm(guard)) };
    let (advanced, confirmed) = span::within("palisade.store.advance", both).await;
    metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "advance")
        .record(waited.elapsed().as_secs_f64());
    let refund = || async {
        if let Err(e) = enf.store.budget_refund(spent.clone()).await {
            tracing::warn!(error = %e, "budget spends of a write not sent were not given back");
        }
    };
    let advanced = match advanced {
        Ok(a) => a,
        Err(e) => {
            refund().await;
            return Err(e.into_refusal().into());
        }
    };
    match advanced {
        // The lock must still be held as the write leaves (a shared store's can be lost with
        // its database session); the fence stays advanced either way, so a retry needs a new
        // lease, as after an uncertain commit.
        Advance::Advanced => {
            if let Err(e) = confirmed {
                refund().await;
                return Err(e.into_refusal().into());
            }
        }
        Advance::Stale { current } => {
            refund().await;
            return Err(Denied {
                refusal: Refusal::new(
                    ErrorCode::StaleFenceEpoch,
                    "another write advanced the resource's epoch first",
                ),
                current_epoch: Some(current),
                peer: None,
                extra: Vec::new(),
            });
        }
    }
    Ok(permit)
}
