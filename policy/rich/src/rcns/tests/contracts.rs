//! Synthesized contracts, callers files, scopes, invocation, tool steps.

use super::*;

/// A session-scoped contract of agent-1 for `RESERVE /reservations`.
fn synthesized() -> SynthesizedContract {
    SynthesizedContract {
        synthesis_id: "syn_1".into(),
        method: "RESERVE".into(),
        path: "/reservations".into(),
        endpoint: json!({"method": "RESERVE"}),
        recipe_name: "reserve".into(),
        recipe_version: "1".into(),
        recipe: recipe(),
        originating_agent_id: "agent-1".into(),
        negotiation_origin: contract::ORIGIN_PROPOSE,
        task_id: None,
        persistent: false,
        session: Some("ses_1".into()),
        issued_at_ms: 1_800_000_000_000,
        expires_at_ms: 1_800_003_600_000,
        idle_timeout_ms: Some(900_000),
        revoked: false,
        required_scopes: vec!["stock:reserve".into()],
        fingerprint: Some("ab".into()),
    }
}

#[test]
fn the_contract_hash_covers_the_captured_recipe_and_survives_storage() {
    let c = synthesized();
    let hash = c.contract_hash();
    assert_eq!(hash, Sha256Digest::of_json(&c.canonical()).to_hex());
    assert_eq!(c.canonical()["expires_at"], "2027-01-15T09:00:00.000Z");
    let back = SynthesizedContract::from_record(&c.to_record()).unwrap();
    assert_eq!(back, c);
    let mut edited = c.clone();
    edited.recipe["steps"][0]["body"] = json!("{}");
    assert_ne!(
        edited.contract_hash(),
        hash,
        "same name and version, another recipe"
    );
    let mut revoked = c.clone();
    revoked.revoked = true;
    assert_eq!(
        revoked.contract_hash(),
        hash,
        "revocation is state, not the contract"
    );
    assert_eq!(revoked.view()["revoked"], true);
}

#[test]
fn a_callers_file_is_checked_whole() {
    let ok = json!({"callers": [{"identity": format!("authz:sha256:{}", "a".repeat(64)),
        "agent_id": "agent-1", "scopes": ["rcns:negotiate"], "trust_tier": 1},
        {"identity": "spiffe://example.org/agent", "agent_id": "agent-2", "scopes": [], "trust_tier": 3}]});
    let c = Callers::parse(ok.to_string().as_bytes()).unwrap();
    assert_eq!(c.len(), 2);
    assert_eq!(c.get("spiffe://example.org/agent").unwrap().trust_tier, 3);
    let bad = json!({"callers": [
        {"identity": "authz:sha256:ABC", "agent_id": "a", "scopes": [], "trust_tier": 1},
        {"identity": "spiffe://x/y", "agent_id": "a b", "scopes": [], "trust_tier": 1},
        {"identity": "spiffe://x/z", "agent_id": "z", "scopes": ["has space"], "trust_tier": 1},
        {"identity": "spiffe://x/w", "agent_id": "w", "scopes": [], "trust_tier": 4}]});
    let ps = Callers::parse(bad.to_string().as_bytes()).unwrap_err();
    for at in [
        "/callers/0/identity",
        "/callers/1/agent_id",
        "/callers/2/scopes",
        "/callers/3/trust_tier",
    ] {
        assert!(ps.iter().any(|p| p.pointer.ends_with(at)), "{at}: {ps:?}");
    }
}

#[test]
fn claimed_scopes_read_tokens_and_nothing_else() {
    let c = claimed_scopes(Some("rcns:negotiate  erp:x,erp:y \"quoted\""));
    assert_eq!(c, claim(&["rcns:negotiate", "erp:x", "erp:y"]));
    assert!(claimed_scopes(None).is_empty());
}

/// The invocation rules (seed 000 §3.8, §4.2), each refusal alone.
#[test]
fn a_contract_is_invoked_only_by_its_agent_in_its_session_with_its_scopes() {
    use super::invocation::{check, Invoking};
    let mut c = synthesized();
    c.required_scopes.push("stock:read".into());
    let all: BTreeSet<String> = ["stock:reserve", "stock:read"].map(String::from).into();
    let one: BTreeSet<String> = ["stock:read"].map(String::from).into();
    let ok = Invoking {
        agent_id: "agent-1",
        session: Some("ses_1"),
        method: "RESERVE",
        path: "/reservations",
        granted: &all,
        claimed: &all,
    };
    assert_eq!(check(&c, &ok), Ok(()));
    let refused = |inv: Invoking<'_>| check(&c, &inv).unwrap_err();
    let r = refused(Invoking {
        agent_id: "agent-2",
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.refusal.reason),
        (ErrorCode::RcnsRefused, Some("contract-not-yours"))
    );
    for session in [None, Some("ses_2")] {
        let r = refused(Invoking { session, ..ok });
        assert_eq!(r.refusal.reason, Some("contract-not-yours"), "{session:?}");
    }
    let mut revoked = c.clone();
    revoked.revoked = true;
    let r = check(&revoked, &ok).unwrap_err();
    assert_eq!(r.refusal.reason, Some("contract-revoked"));
    for (method, path) in [("POST", "/reservations"), ("RESERVE", "/reservations/1")] {
        let r = refused(Invoking { method, path, ..ok });
        assert_eq!(r.refusal.code, ErrorCode::NotFound, "{method} {path}");
    }
    // The identity document lost a scope: 455, naming it; granted but not claimed: 262.
    let r = refused(Invoking {
        granted: &one,
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.missing_scopes.clone()),
        (
            ErrorCode::RcnsScopeExceeded,
            vec!["stock:reserve".to_owned()]
        )
    );
    let r = refused(Invoking {
        claimed: &one,
        ..ok
    });
    assert_eq!(
        (r.refusal.code, r.refusal.reason),
        (ErrorCode::RcnsScopeRequired, Some("scope-required"))
    );
    // A persistent contract has no session to match.
    let mut persistent = c.clone();
    persistent.session = None;
    assert_eq!(
        check(
            &persistent,
            &Invoking {
                session: None,
                ..ok
            }
        ),
        Ok(())
    );
}

/// A step on an MCP tool (issue 37): its arguments built from the context, its inverse from
/// the context and those arguments; what is not an object is refused at the step.
#[test]
fn a_tool_step_builds_its_call_and_its_inverse() {
    use crate::connector::t1::{Limits, T1};
    use crate::recipes::ToolStep;
    let expr = |t: &str| T1::compile(t, Limits::default()).unwrap();
    let step = ToolStep {
        name: "set_level".into(),
        arguments: Some(expr("{sku: input.sku, qty: steps[0].n}")),
        inverse: Some(("set_level".into(), expr("{sku: arguments.sku, qty: `0`}"))),
    };
    let cx = compose::context(&json!({"sku": "A"}), &[json!({"n": 4})]);
    let req = compose::tool_request(1, &step, &cx).unwrap();
    assert_eq!(req.name, "set_level");
    assert_eq!(req.arguments, json!({"sku": "A", "qty": 4}));
    assert_eq!(
        req.inverse,
        Some(json!({"tool": "set_level", "arguments": {"sku": "A", "qty": 0}}))
    );
    let scalar = ToolStep {
        arguments: Some(expr("input.sku")),
        ..step
    };
    let r = compose::tool_request(1, &scalar, &cx).unwrap_err();
    assert_eq!(r.code, ErrorCode::RcnsStepFailed);
    assert_eq!(r.location.as_deref(), Some("/steps/1"));
}
