use super::*;
use std::collections::HashSet;

/// The whole table, walked: every code is unique, round-trips through its wire name, has a
/// sane status, a title, a kebab-case problem type, and the category the SPEC implies.
#[test]
fn the_table_is_complete_and_consistent() {
    let mut names = HashSet::new();
    let mut types = HashSet::new();
    for &code in ErrorCode::ALL {
        let name = code.as_str();
        assert!(names.insert(name), "{name} appears twice");
        assert!(
            name.starts_with("ERR_") && name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
            "{name}"
        );
        assert_eq!(ErrorCode::from_wire(name), Some(code), "{name} round-trips");
        let status = code.status();
        // 262 is AGTP-RCNS's "Authorization Required" (seed 000 §3.6 step 5): a refusal the
        // seed puts in the 2xx range.
        let seed_2xx = code == ErrorCode::RcnsScopeRequired && status == 262;
        assert!(
            (400..=599).contains(&status) || seed_2xx,
            "{name}: status {status}"
        );
        assert!(!code.title().is_empty(), "{name}: title");
        let ty = code.problem_type();
        assert!(
            ty.starts_with("urn:palisade:error:") && !ty.contains('_'),
            "{name}: {ty}"
        );
        assert!(types.insert(ty), "{name}: problem type unique");
        // Client errors and policy refusals are drift; upstream failures and our own are not,
        // except where the SPEC names a drift category for a 5xx.
        if status >= 500 {
            let drift_5xx = [
                ErrorCode::PreimageUnavailable,
                ErrorCode::ContractOutput,
                ErrorCode::DeploymentIdentity,
                ErrorCode::StoreUnavailable,
                // A refused bundle is a lockfile event (SPEC §7); no client sees its status.
                ErrorCode::BundleRejected,
            ];
            assert_eq!(
                code.category().is_some(),
                drift_5xx.contains(&code),
                "{name}: category"
            );
        }
    }
    assert_eq!(ErrorCode::from_wire("ERR_NOPE"), None);
}

/// Spot checks against the SPEC's text, one row per code the SPEC names.
#[test]
fn statuses_match_the_spec() {
    use ErrorCode::*;
    let rows = [
        (LeaseRequired, 428, DriftCategory::Lease),
        (LeaseMalformed, 400, DriftCategory::Lease),
        (LeaseUntrustedKey, 403, DriftCategory::Lease),
        (LeaseSignature, 403, DriftCategory::Lease),
        (RecoveryWindow, 403, DriftCategory::Lease),
        (ClockSkew, 403, DriftCategory::Lease),
        (LeaseExpired, 403, DriftCategory::Lease),
        (TargetMismatch, 403, DriftCategory::Lease),
        (RecoveryMode, 403, DriftCategory::Lease),
        (ContractInput, 422, DriftCategory::Structural),
        (InverseNotStaged, 428, DriftCategory::Lease),
        (InverseDigest, 403, DriftCategory::Lease),
        (InverseTarget, 422, DriftCategory::Lease),
        (StaleFenceEpoch, 409, DriftCategory::Fence),
        (PreimageUnavailable, 503, DriftCategory::Fence),
        (UnboundOperation, 404, DriftCategory::Lockfile),
        (AlreadyCompensated, 409, DriftCategory::Lease),
        (IdempotencyKeyReused, 422, DriftCategory::Idempotency),
        (IdempotencyInFlight, 409, DriftCategory::Idempotency),
        (IdempotencyKeyRequired, 400, DriftCategory::Idempotency),
        (CallerUnidentified, 401, DriftCategory::Lease),
        (LeaseNotYours, 403, DriftCategory::Lease),
        (ContractOutput, 502, DriftCategory::Structural),
        (DeploymentIdentity, 502, DriftCategory::Identity),
        (ToolDrifted, 409, DriftCategory::ToolDefinition),
        (McpMethodMismatch, 400, DriftCategory::Representation),
        (OriginNotAllowed, 403, DriftCategory::Identity),
        (StoreUnavailable, 503, DriftCategory::Fence),
    ];
    for (code, status, category) in rows {
        assert_eq!(code.status(), status, "{code}");
        assert_eq!(code.category(), Some(category), "{code}");
    }
    assert_eq!(
        StaleFenceEpoch.problem_type(),
        "urn:palisade:error:stale-fence-epoch"
    );
}

#[test]
fn a_refusal_may_override_the_status() {
    let r = Refusal::new(ErrorCode::LeaseExpired, "lease window has passed");
    assert_eq!(r.status(), 403);
    assert_eq!(r.with_status(410).status(), 410);
}
