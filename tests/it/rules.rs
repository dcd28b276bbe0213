//! Operator rules (SPEC §15, issue 56) through the real binary and a real upstream: a rule
//! that denies (403 `ERR_POLICY_DENIED` naming it, a rejection receipt naming it and the
//! rules' digest, a `policy` drift event, nothing forwarded), one that holds whatever the
//! lease asked (two approvers, released on the second), an exception listed first, a rule in
//! report mode (the write goes on; an event and `rules_report`), an expression that fails
//! (fail-closed), and a reload that refuses a bad file and applies a good one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use palisade_policy::Sha256Digest;
use serde_json::{json, Value};

use crate::admin::{curl, guarded_with};
use crate::support;
use support::writes::*;
use support::*;

mod holds;

const RULES: &str = r#"
[[rule]]
name = "vip-exception"
when = 'has(body.vip) && body.vip == true'
action = "allow"

[[rule]]
name = "no-experiments"
when = '"x-tenant" in headers && headers["x-tenant"] == "experiments"'
action = "deny"
reason = "the experiments tenant does not write"

[[rule]]
name = "big-orders"
on = ["PUT /orders/big"]
when = 'body.qty > 10000'
action = "hold"
approvals = 2
expires = "1h"

[[rule]]
name = "watch-middling"
when = 'has(body.qty) && body.qty > 500'
action = "deny"
mode = "report"

[[rule]]
name = "guard-amounts"
on = ["PUT /orders/guarded"]
when = 'body.amount > 10'
action = "deny"
"#;

const TOKENS: &str = "alice:tok-alice\nbob:tok-bob";

struct Answer {
    status: StatusCode,
    doc: Value,
    receipt: Value,
}

/// A PUT of `body` to `path`, leased at epoch 1, with `headers`.
async fn write(s: &Setup, path: &str, body: Value, headers: &[(&str, &str)]) -> Answer {
    write_at(s, path, 1, body, headers).await
}

/// As [`write`], leased at `epoch`.
async fn write_at(
    s: &Setup,
    path: &str,
    epoch: u64,
    body: Value,
    headers: &[(&str, &str)],
) -> Answer {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, path, epoch, |_| {});
    let inverse = base64::Engine::encode(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
        inverse_for(path),
    );
    let mut b = Request::put(s.p.url(path))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header("agent-compensation-inverse", inverse);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, bytes) = send(&http1_client(), b.body(full(body.to_string())).unwrap()).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let receipt = if parts.headers.contains_key("agent-commit-receipt") {
        receipt_of(&parts.headers)
    } else {
        doc["receipt"].clone()
    };
    Answer {
        status: parts.status,
        doc,
        receipt,
    }
}

fn puts_to(s: &Setup, path: &str) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == path)
        .count()
}

/// A sidecar with `rules` in force: the setup, the rules file, and its directory (kept for
/// the test's length).
async fn sidecar(rules: &str) -> (Setup, std::path::PathBuf, tempfile::TempDir) {
    sidecar_with(rules, "").await
}

/// [`sidecar`] with `extra` configuration.
async fn sidecar_with(rules: &str, extra: &str) -> (Setup, std::path::PathBuf, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.toml");
    std::fs::write(&file, rules).unwrap();
    let more = format!(
        "[rules]\nfile = \"{}\"\nexpose_headers = [\"X-Tenant\"]\n{extra}",
        file.display()
    );
    (guarded_with(TOKENS, &more).await, file, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_denies_stops_the_write_names_itself_and_leaves_a_receipt() {
    // One write per resource a minute: a denied write must not spend it.
    let budget = "[budgets]\nrules = [{ name = \"one-each\", per = [\"resource\"], limit = 1, window = \"1m\" }]\n";
    let (s, _, _dir) = sidecar_with(RULES, budget).await;
    let digest = Sha256Digest::of(RULES.as_bytes()).to_string();
    let tenant = [("x-tenant", "experiments")];
    let a = write(&s, "/orders/1", json!({"qty": 3}), &tenant).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.doc);
    assert_eq!(a.doc["code"], "ERR_POLICY_DENIED");
    assert_eq!(a.doc["rule"], "no-experiments");
    assert_eq!(a.doc["detail"], "the experiments tenant does not write");
    assert_receipt_verifies(&a.doc["receipt"], "rejection");
    assert_eq!(a.receipt["rule"], "no-experiments");
    assert_eq!(a.receipt["rules_digest"], digest);
    assert_eq!(
        puts_to(&s, "/orders/1"),
        0,
        "the upstream saw the denied write"
    );
    let events = events(&s);
    let e = events
        .iter()
        .find(|e| e["code"] == "ERR_POLICY_DENIED")
        .expect("a policy drift event");
    assert_eq!(e["category"], "policy");
    assert_eq!(e["actionTaken"], "blocked");
    assert_eq!(e["diagnostics"]["rule"], "no-experiments");
    // Another spelling of the header's name is the same header.
    let a = write(
        &s,
        "/orders/1",
        json!({"qty": 3}),
        &[("X-TENANT", "experiments")],
    )
    .await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.doc);
    // The exception listed first lets the same tenant's VIP write through: the resource's
    // budget of one is still there after two denials.
    let vip = json!({"qty": 3, "vip": true});
    let a = write(&s, "/orders/1", vip.clone(), &tenant).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    assert_eq!(a.receipt["rules_digest"], digest);
    assert_eq!(puts_to(&s, "/orders/1"), 1);
    // And it is spent now: the budget counts.
    let a = write_at(&s, "/orders/1", 2, vip, &tenant).await;
    assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.doc);
    assert_eq!(a.doc["code"], "ERR_WRITE_BUDGET");
    assert_eq!(puts_to(&s, "/orders/1"), 1);
    // Another tenant is not denied.
    let a = write(&s, "/orders/4", json!({"qty": 3}), &[("x-tenant", "prod")]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    let (_, metrics) = curl(&s.p, "GET", "/metrics", None);
    for want in [
        r#"palisade_rule_decisions_total{rule="no-experiments",action="deny",mode="enforce"} 2"#,
        r#"palisade_rule_decisions_total{rule="vip-exception",action="allow",mode="enforce"} 2"#,
    ] {
        assert!(metrics.contains(want), "{want}\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_that_holds_takes_its_own_approvers_whatever_the_lease_asked() {
    let (s, _, _dir) = sidecar(RULES).await;
    let a = write(&s, "/orders/big", json!({"qty": 20000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    assert_eq!(a.doc["rule"], "big-orders");
    assert_eq!(a.doc["state"], "held");
    assert_eq!(a.receipt["rule"], "big-orders");
    assert_eq!(a.receipt["outcome"], "held");
    assert_eq!(puts_to(&s, "/orders/big"), 0, "held, not forwarded");
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    // Its lease asked for COMPENSATING_ACTION: the rule's two approvers decide it.
    let approve = |token: &'static str| {
        let p = &s.p;
        let path = format!("/admin/v1/escrow/{id}/approve");
        curl(p, "POST", &path, Some(token))
    };
    let (code, body) = approve("tok-alice");
    assert_eq!(code, 202, "{body}");
    assert_eq!(puts_to(&s, "/orders/big"), 0, "one approval of two");
    // The approval's own receipt names the rules in force too.
    let doc: Value = serde_json::from_str(&body).unwrap();
    let approval = &doc["receipt"]["receipt"];
    assert_eq!(approval["kind"], "approval", "{doc}");
    assert_eq!(
        approval["rules_digest"],
        Sha256Digest::of(RULES.as_bytes()).to_string(),
        "{doc}"
    );
    let (code, body) = approve("tok-alice");
    assert_eq!(code, 409, "the same approver twice: {body}");
    let (code, body) = approve("tok-bob");
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "released", "{doc}");
    assert_eq!(
        puts_to(&s, "/orders/big"),
        1,
        "released on the second approval"
    );
    // A small order on the same operation (the resource's next epoch) is not held.
    let a = write_at(&s, "/orders/big", 2, json!({"qty": 2}), &[]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_in_report_mode_lets_the_write_through_and_says_what_it_would_have_done() {
    let (s, _, _dir) = sidecar(RULES).await;
    let a = write(&s, "/orders/7", json!({"qty": 600}), &[]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    assert_eq!(puts_to(&s, "/orders/7"), 1);
    assert_eq!(
        a.receipt["rules_report"],
        json!([{"rule": "watch-middling", "would": "deny"}])
    );
    let events = events(&s);
    let e = events
        .iter()
        .find(|e| e["category"] == "policy" && e["actionTaken"] == "notify")
        .expect("a report event");
    assert_eq!(
        e["diagnostics"],
        json!({"rule": "watch-middling", "would": "deny"})
    );
    assert_eq!(e["code"], "ERR_POLICY_DENIED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expression_that_fails_denies_and_nothing_is_forwarded() {
    let (s, _, _dir) = sidecar(RULES).await;
    // No `amount`: `body.amount > 10` cannot be evaluated; a deny rule then matches.
    let a = write(&s, "/orders/guarded", json!({"qty": 1}), &[]).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.doc);
    assert_eq!(a.doc["rule"], "guard-amounts");
    let a = write(&s, "/orders/guarded", json!({"qty": 1, "amount": 5}), &[]).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.doc);
    assert_eq!(puts_to(&s, "/orders/guarded"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_file_that_does_not_load_never_replaces_the_one_in_force() {
    let (s, file, _dir) = sidecar(RULES).await;
    let before = Sha256Digest::of(RULES.as_bytes()).to_string();
    std::fs::write(
        &file,
        "[[rule]]\nname = \"typo\"\nwhen = 'bdy.qty > 1'\naction = \"deny\"\n",
    )
    .unwrap();
    let (code, body) = curl(&s.p, "POST", "/admin/v1/reload", Some("tok-alice"));
    assert_eq!(code, 422, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(
        doc["problems"][0]
            .as_str()
            .unwrap()
            .contains("unknown variable `bdy`"),
        "{doc}"
    );
    assert_eq!(doc["rules_digest"], before);
    // The rules in force still decide.
    let tenant = [("x-tenant", "experiments")];
    let a = write(&s, "/orders/r1", json!({"qty": 1}), &tenant).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.doc);
    // A good file is applied.
    let next = "[[rule]]\nname = \"nothing-to-r2\"\non = [\"PUT /orders/r2\"]\naction = \"deny\"\n";
    std::fs::write(&file, next).unwrap();
    let (code, body) = curl(&s.p, "POST", "/admin/v1/reload", Some("tok-alice"));
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        doc["rules_digest"],
        Sha256Digest::of(next.as_bytes()).to_string()
    );
    let a = write(&s, "/orders/r1", json!({"qty": 1}), &tenant).await;
    assert_eq!(a.status, StatusCode::OK, "the old rule is gone: {}", a.doc);
    let a = write(&s, "/orders/r2", json!({"qty": 1}), &[]).await;
    assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.doc);
    assert_eq!(a.receipt["rule"], "nothing-to-r2");
    assert_eq!(puts_to(&s, "/orders/r2"), 0);
}

/// The drift events the sidecar kept (the admin API behind its token).
fn events(s: &Setup) -> Vec<Value> {
    let (code, body) = curl(
        &s.p,
        "GET",
        "/admin/v1/drift-events?limit=1000",
        Some("tok-alice"),
    );
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    doc["events"].as_array().unwrap().clone()
}
