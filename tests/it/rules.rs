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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_undecided_at_its_expiry_is_rejected_and_nothing_is_forwarded() {
    let rules = "[[rule]]\nname = \"brief\"\non = [\"PUT /orders/brief\"]\naction = \"hold\"\nexpires = \"1s\"\n";
    let (s, _, _dir) = sidecar(rules).await;
    let a = write(&s, "/orders/brief", json!({"qty": 1}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    let status = || {
        let (_, body) = curl(
            &s.p,
            "GET",
            &format!("/admin/v1/escrow/{id}"),
            Some("tok-alice"),
        );
        serde_json::from_str::<Value>(&body).unwrap_or(Value::Null)
    };
    assert_eq!(status()["state"], "held");
    wait::until(
        "the hold runs out",
        std::time::Duration::from_secs(10),
        || status()["state"] == "rejected",
    )
    .await;
    assert_eq!(status()["code"], "ERR_POLICY_DENIED");
    let e = events(&s)
        .into_iter()
        .find(|e| e["code"] == "ERR_POLICY_DENIED")
        .expect("a policy event for the expired hold");
    assert_eq!(e["diagnostics"]["rule"], "brief");
    // An approval now finds nothing held; nothing was ever forwarded.
    let (code, body) = curl(
        &s.p,
        "POST",
        &format!("/admin/v1/escrow/{id}/approve"),
        Some("tok-alice"),
    );
    assert_eq!(code, 409, "{body}");
    assert_eq!(puts_to(&s, "/orders/brief"), 0);
}

/// `escrow.webhook_format = "slack"`: one message per held write, in the shape Slack's
/// incoming webhooks document (an object: `text`, the fallback, and `blocks`, here one
/// `section` of `mrkdwn` text, at most 3,000 characters), naming the operation's template,
/// the rule, the approvals needed and the console link, and no value of the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_write_is_announced_to_slack_in_its_documented_shape() {
    let receiver = Receiver::start(0, StatusCode::OK).await;
    let extra = format!(
        "[escrow]\nwebhook = \"{}\"\nwebhook_format = \"slack\"\nconsole_url = \"https://palisade-admin.example/ui/\"\n",
        receiver.url()
    );
    let (s, _, _dir) = sidecar_with(RULES, &extra).await;
    let a = write(
        &s,
        "/orders/big",
        json!({"qty": 20000, "note": "secret-7731"}),
        &[],
    )
    .await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let id = a.doc["escrow_id"].as_str().unwrap().to_owned();
    wait::until(
        "the hold is announced",
        std::time::Duration::from_secs(10),
        || !receiver.accepted.lock().unwrap().is_empty(),
    )
    .await;
    let bodies = receiver.accepted.lock().unwrap().clone();
    assert_eq!(bodies.len(), 1, "one message, not a batch");
    let raw = String::from_utf8(bodies[0].to_vec()).unwrap();
    let msg: Value = serde_json::from_str(&raw).unwrap();
    // Slack's incoming-webhook payload: an object with `text` and optional `blocks`.
    let obj = msg.as_object().expect("an object, not an array");
    assert!(obj.keys().all(|k| k == "text" || k == "blocks"), "{msg}");
    let text = msg["text"].as_str().unwrap();
    assert!(!text.is_empty() && text.len() <= 40_000, "{msg}");
    let blocks = msg["blocks"].as_array().unwrap();
    assert!(!blocks.is_empty() && blocks.len() <= 50, "{msg}");
    for b in blocks {
        assert_eq!(b["type"], "section", "{msg}");
        assert!(
            matches!(b["text"]["type"].as_str(), Some("mrkdwn" | "plain_text")),
            "{msg}"
        );
        assert!(b["text"]["text"].as_str().unwrap().len() <= 3000, "{msg}");
    }
    let shown = blocks[0]["text"]["text"].as_str().unwrap();
    assert!(shown.contains("`PUT /orders/big`"), "{shown}");
    assert!(shown.contains("`big-orders`"), "{shown}");
    assert!(shown.contains("*Approvals needed:* 2"), "{shown}");
    assert!(
        shown.contains(&format!(
            "<https://palisade-admin.example/ui/#/escrow/{id}|"
        )),
        "{shown}"
    );
    for value in ["20000", "secret-7731"] {
        assert!(
            !raw.contains(value),
            "a request value in the message: {raw}"
        );
    }
}

/// The approval register (`GET /admin/v1/approvals`): every approval and rejection of a
/// scenario with two approvers, from the receipt log, as JSON lines and as CSV.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_register_lists_every_decision_of_two_approvers() {
    let (s, _, _dir) = sidecar(RULES).await;
    let a = write(&s, "/orders/big", json!({"qty": 20000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let first = a.doc["escrow_id"].as_str().unwrap().to_owned();
    let decide = |id: &str, what: &str, token: &str| {
        let (code, body) = curl(
            &s.p,
            "POST",
            &format!("/admin/v1/escrow/{id}/{what}"),
            Some(token),
        );
        assert!(code < 300, "{what}: {code} {body}");
    };
    decide(&first, "approve", "tok-alice");
    decide(&first, "approve", "tok-bob");
    // The resource's next epoch: a second big order, rejected by bob.
    let a = write_at(&s, "/orders/big", 2, json!({"qty": 30000}), &[]).await;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.doc);
    let second = a.doc["escrow_id"].as_str().unwrap().to_owned();
    decide(&second, "reject", "tok-bob");

    let (code, body) = curl(&s.p, "GET", "/admin/v1/approvals", Some("tok-alice"));
    assert_eq!(code, 200, "{body}");
    let lines: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let seen: Vec<(String, String, String)> = lines
        .iter()
        .map(|l| {
            (
                l["escrow_id"].as_str().unwrap().to_owned(),
                l["approver"].as_str().unwrap().to_owned(),
                l["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        vec![
            (first.clone(), "alice".to_owned(), "approved".to_owned()),
            (first.clone(), "bob".to_owned(), "approved".to_owned()),
            (second.clone(), "bob".to_owned(), "rejected".to_owned()),
        ],
        "{body}"
    );
    // Each line names its receipt's place in the log, and the register pages by it.
    let after = lines[0]["index"].as_u64().unwrap();
    let (_, body) = curl(
        &s.p,
        "GET",
        &format!("/admin/v1/approvals?after={after}&limit=1"),
        Some("tok-alice"),
    );
    let page: Vec<Value> = body
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(page.len(), 1);
    assert_eq!(page[0]["approver"], "bob");
    // CSV: a header row and one row a decision.
    let (code, csv) = curl(
        &s.p,
        "GET",
        "/admin/v1/approvals?format=csv",
        Some("tok-alice"),
    );
    assert_eq!(code, 200);
    let rows: Vec<&str> = csv.trim_end().split("\r\n").collect();
    assert_eq!(
        rows[0],
        "index,at,escrow_id,outcome,approver,reason,request_digest,lease_id,receipt_id"
    );
    assert_eq!(rows.len(), 4, "{csv}");
    assert!(
        rows[3].contains(&second) && rows[3].contains(",rejected,bob,"),
        "{csv}"
    );
}
