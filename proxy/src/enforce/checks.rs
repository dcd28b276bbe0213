//! Write enforcement (SPEC §5.2), in the SPEC's order: pure checks first, I/O last.
//!
//! ```text
//! unbound? (404) → 1 lease present (428) → 2–8 policy::lease::verify
//!   → 10 inverse staged and matching → [per-resource lock]
//!   → 11 fence epoch (store read) → 12 pre-image (upstream GET)
//!   → write budgets (SPEC §14: one unit of every rule spent, 429 over any)
//!   → durable: advance epoch + stage inverse (store, fsync) → Permit
//! ```
//! The caller forwards the write while holding the [`Permit`] (and so the resource's lock),
//! then calls `receipts::commit` for the receipt. A refusal at any step goes through
//! `receipts::record`: counted, a rejection receipt in the receipt log, a drift event;
//! nothing reaches the upstream and no epoch moves. Contract checks 8 (reversibility) and 9
//! (`structural.input`) run here too, from the bound capability.
//!
//! A permit says what happens next (`Disposition`): forward, dry-run (nothing moves) or
//! hold in escrow (nothing moves until an operator releases it, when every check runs again).

use crate::telemetry::otlp::span;
use palisade_policy::digest::Sha256Digest;
use palisade_policy::lease::{self, RequestFacts, VerifyContext};
use palisade_policy::{fence, inverse, target, ErrorCode, Refusal};
use palisade_rules::LeaseFacts;

use crate::config::{Config, UnboundWrites};
use crate::context::{Binding, Enforcement};
use crate::enforce::contract;
use crate::enforce::facts::{InProcessGrant, Requester, WriteFacts};
use crate::enforce::permit::{Denied, Permit};
use crate::enforce::preimage::fetch_state;
use crate::enforce::rules::{self, Judged};
use crate::enforce::settle::{settle_fence, Fenced};
use crate::enforce::stop::Keys;
use crate::net::upstream::Upstream;
use crate::store::StoreError;

/// What the checks read beside the write: the configuration, enforcement's handles (store,
/// keys, clock) and the upstream the pre-image is fetched from.
#[derive(Clone, Copy)]
pub(crate) struct Handles<'a> {
    pub config: &'a Config,
    pub enf: &'a Enforcement,
    pub upstream: &'a Upstream,
    /// The operator's rules the write is decided by (SPEC §15), loaded once by the engine.
    pub rules: Option<&'a palisade_rules::RuleSet>,
}

/// Where in its life a write is checked, and its keys (SPEC §14).
pub(crate) struct Stage<'a> {
    pub releasing: bool,
    pub keys: &'a Keys,
}

/// Runs checks in SPEC order; `Ok` means the write may go on as its [`Permit::disposition`]
/// says. `stage.releasing`: an escrowed write being released (forwarded, not held again).
pub(crate) async fn check(
    h: Handles<'_>,
    facts: WriteFacts<'_>,
    who: &Requester,
    binding: Binding<'_>,
    stage: Stage<'_>,
) -> Result<Permit, Denied> {
    let Handles {
        config,
        enf,
        upstream,
        ..
    } = h;
    let Stage { releasing, keys } = stage;
    // SPEC §4.2: without a lockfile every write is unbound.
    if binding.capability().is_none() && config.unbound_writes == UnboundWrites::Deny {
        return Err(Refusal::new(
            ErrorCode::UnboundOperation,
            "no lockfile binding for this operation and rich.unbound_writes is deny",
        )
        .into());
    }
    if let Some(grant) = &facts.granted {
        return granted(h, &facts, grant, binding, keys).await;
    }
    // Check 1.
    let carried = facts.lease.as_ref().ok_or_else(|| {
        Refusal::new(
            ErrorCode::LeaseRequired,
            "a write needs a compensation lease",
        )
    })?;
    let raw = carried.lease_bytes()?;
    let raw: &[u8] = &raw;
    let body = facts.body;
    let target = facts.target.clone().ok_or_else(|| {
        Refusal::new(
            ErrorCode::TargetMismatch,
            "the request's target cannot be formed (Host missing or invalid)",
        )
    })?;
    // Checks 2–3, then check 4 batched with concurrent writes' leases, then checks 5–8. The
    // window of a lease without issued_at starts when first seen (check 6).
    let unsigned = lease::prepare(raw, &enf.trust)?;
    let signed = span::within("palisade.lease.verify", enf.signatures.check(unsigned)).await?;
    // Scoped so that the borrowed callback is gone before the next await (the future must be
    // Send for every lifetime).
    let verified = {
        let now = enf.clock.now_ms();
        let first_seen = |lease_id: &str| enf.first_seen.get_or_insert(lease_id, now);
        let cx = VerifyContext {
            now_ms: now,
            max_clock_skew_ms: config.max_clock_skew.as_millis() as i64,
            first_seen: Some(&first_seen),
            request: Some(RequestFacts {
                target: &target,
                // Check 8: the bound contract's reversibility gates the recovery mode.
                reversibility: binding.capability().map(|c| c.contract.reversibility),
            }),
        };
        signed.finish(&cx)
    };
    let verified = verified?;
    let l = verified.lease();
    contract::check(config, &binding, &facts)?;
    // A lease this sidecar granted names its caller (SPEC §5.7): only that caller may use it.
    if let Some(agent) = &l.agent_id {
        if who.caller.as_deref() != Some(agent.as_str()) {
            return Err(Refusal::new(
                ErrorCode::LeaseNotYours,
                "the lease was granted to another caller",
            )
            .into());
        }
    }
    // SPEC §15: the operator's rules, on a write whose lease and input are settled.
    let lease_facts = LeaseFacts {
        recovery_mode: l.recovery_mode.as_str(),
        t_granted_ms: l.t_granted_ms,
        agent_id: l.agent_id.as_deref(),
        issuer: Some(&l.kid),
    };
    let judged = Judged {
        facts: &facts,
        who,
        keys,
        binding: &binding,
        lease: lease_facts,
        now_ms: enf.clock.now_ms(),
        releasing,
        composed: false,
    };
    let ruled = rules::judge(h.rules, config, judged).map_err(|d| *d)?;

    // Check 10: the inverse travels inline or was staged earlier.
    let staged = match &facts.inverse {
        Some(carried) => Some(inverse::parse(
            &carried.inverse_bytes()?,
            config.limits.max_json_depth,
        )?),
        None => match enf
            .store
            .inverse(&l.lease_id)
            .await
            .map_err(StoreError::into_refusal)?
        {
            Some(bytes) => Some(inverse::parse(&bytes, config.limits.max_json_depth)?),
            None => None,
        },
    };
    inverse::check(staged.as_ref(), l)?;
    // The inverse undoes this write and no other (SPEC §5.4): staged inline, by the inverse
    // endpoint or by a grant, it is judged here against the write it came with.
    if let Some(inv) = &staged {
        inverse::check_target(inv, &facts.undoes_for(&binding))?;
    }

    // Checks 11–12 and the forward happen under the resource's lock.
    let resource = facts
        .resource
        .clone()
        .unwrap_or_else(|| target::resource_key(&target).to_owned());
    let pq = facts.path;
    let locked = enf.store.lock_and_epoch(&resource);
    let (guard, current) = span::within("palisade.store.lock", locked)
        .await
        .map_err(StoreError::into_refusal)?;
    let at_epoch = |refusal| Denied {
        current_epoch: Some(current),
        ..Denied::from(refusal)
    };
    fence::check_epoch(current, l.cas_fence_epoch).map_err(at_epoch)?;
    // Check 12 applies to HTTP resources only (`facts.headers` is `None` for a tool call).
    let pre_image = if let (true, Some(headers)) = (config.pre_image_fetch, facts.headers) {
        let identity = binding
            .capability()
            .and_then(|c| c.deployment_identity.as_deref());
        let actual = fetch_state(config, upstream, pq, headers, identity)
            .await
            .map_err(|d| Denied {
                current_epoch: Some(current),
                ..d
            })?;
        fence::check_pre_image(&l.pre_image_state_hash, &actual.digest).map_err(at_epoch)?;
        Some(actual)
    } else {
        None
    };
    // `upstream.if_match`: the SoR's own ETag closes the window between this fetch and the
    // write's arrival (a change made through another path of the SoR meanwhile).
    let if_match = match (&pre_image, facts.headers) {
        (Some(state), Some(headers)) if config.upstream.if_match => {
            state.if_match(headers).map_err(at_epoch)?
        }
        _ => None,
    };
    // SNAPSHOT_RESTORE keeps what the write replaces; a held write, for its operator's diff.
    let snapshot = match (l.recovery_mode, &pre_image) {
        (lease::RecoveryMode::SnapshotRestore, Some(state)) => Some(state.snapshot()),
        (lease::RecoveryMode::HumanEscrow, Some(state)) if !releasing => Some(state.snapshot()),
        (_, Some(state)) if ruled.hold.is_some() && !releasing => Some(state.snapshot()),
        _ => None,
    };
    let pre_image = pre_image.map(|s| s.digest);
    settle_fence(
        enf,
        Fenced {
            guard,
            verified,
            target,
            resource,
            path: pq,
            method: facts.http_method(),
            body,
            pre_image,
            if_match,
            inverse: staged.map(|s| s.jcs),
            snapshot,
            releasing,
            keys,
            ruled,
        },
    )
    .await
}

/// A write under a lease the sidecar grants it here (an RCNS step): the contract checks, then
/// under the resource's lock the epoch read and the pre-image fetched once; the lease is made
/// from them (the next epoch, that pre-image, SNAPSHOT_RESTORE keeping it), signed with the
/// sidecar's key, and the write goes on as any permitted one. Checks 1–8 and 10–12 are the
/// grant's own making: there is no lease to verify, and the pre-image it names is the one read.
async fn granted(
    h: Handles<'_>,
    facts: &WriteFacts<'_>,
    g: &InProcessGrant,
    binding: Binding<'_>,
    keys: &Keys,
) -> Result<Permit, Denied> {
    let Handles {
        config,
        enf,
        upstream,
        ..
    } = h;
    let target = facts.target.clone().ok_or_else(|| {
        Refusal::new(
            ErrorCode::TargetMismatch,
            "the request's target cannot be formed (Host missing or invalid)",
        )
    })?;
    // Check 9, as for any write; then the operator's rules (a composed step is not held).
    contract::check(config, &binding, facts)?;
    let who = Requester {
        origin: None,
        caller: Some(g.caller.clone()),
    };
    let judged = Judged {
        facts,
        who: &who,
        keys,
        binding: &binding,
        lease: LeaseFacts {
            recovery_mode: g.mode.as_str(),
            t_granted_ms: g.window_ms.max(1),
            agent_id: Some(&g.caller),
            issuer: Some(enf.key.kid()),
        },
        now_ms: enf.clock.now_ms(),
        releasing: false,
        composed: true,
    };
    let ruled = rules::judge(h.rules, config, judged).map_err(|d| *d)?;
    let resource = facts
        .resource
        .clone()
        .unwrap_or_else(|| target::resource_key(&target).to_owned());
    let locked = enf.store.lock_and_epoch(&resource);
    let (guard, current) = span::within("palisade.store.lock", locked)
        .await
        .map_err(StoreError::into_refusal)?;
    let pre_image = if let (true, Some(headers)) = (config.pre_image_fetch, facts.headers) {
        let identity = binding
            .capability()
            .and_then(|c| c.deployment_identity.as_deref());
        let state = fetch_state(config, upstream, facts.path, headers, identity)
            .await
            .map_err(|d| Denied {
                current_epoch: Some(current),
                ..d
            })?;
        Some(state)
    } else {
        None
    };
    let fields = serde_json::json!({
        "ptcl_version": "1.0",
        "lease_id": g.lease_id,
        "sor_target_uri": target,
        "recovery_mode": g.mode.as_str(),
        "t_req_ms": g.window_ms,
        "t_granted_ms": g.window_ms.max(1),
        "cas_fence_epoch": current + 1,
        "pre_image_state_hash": pre_image
            .as_ref()
            .map_or_else(Sha256Digest::empty, |s| s.digest)
            .to_string(),
        "inverse_payload_jcs_hash": g.inverse.digest.to_string(),
        "issued_at": lease::format_rfc3339_ms(enf.clock.now_ms()),
        "agent_id": g.caller,
    });
    let serde_json::Value::Object(fields) = fields else {
        return Err(Refusal::new(ErrorCode::Internal, "a lease could not be granted").into());
    };
    let reversibility = binding.capability().map(|c| c.contract.reversibility);
    let verified = lease::grant(fields, &enf.key, reversibility)?;
    let snapshot = match (g.mode, &pre_image) {
        (lease::RecoveryMode::SnapshotRestore, Some(state)) => Some(state.snapshot()),
        _ => None,
    };
    let if_match = match (&pre_image, facts.headers) {
        (Some(state), Some(headers)) if config.upstream.if_match => {
            state.if_match(headers).map_err(Denied::from)?
        }
        _ => None,
    };
    settle_fence(
        enf,
        Fenced {
            guard,
            verified,
            target,
            resource,
            path: facts.path,
            method: facts.http_method(),
            body: facts.body,
            pre_image: pre_image.map(|s| s.digest),
            if_match,
            inverse: Some(g.inverse.jcs.clone()),
            snapshot,
            releasing: false,
            keys,
            ruled,
        },
    )
    .await
}
