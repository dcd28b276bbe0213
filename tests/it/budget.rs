//! Write budgets (SPEC §14, issue 38) through the real binary: a runaway loop of 500 valid
//! writes against a budget of 20 per 10 s forwards 20; every write over it is refused 429
//! `ERR_WRITE_BUDGET` with `Retry-After` and the rule's name, a rejection receipt and a drift
//! event, and reaches no one; refused writes spend nothing; the window slides.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::Value;

use crate::support;
use support::writes::*;
use support::*;

struct Answer {
    status: StatusCode,
    problem: Value,
    retry_after: Option<u64>,
}

/// A write of `/items/<name>` as `caller`, leased at `epoch` (or with no lease).
async fn write(p: &Palisade, caller: &str, name: &str, epoch: Option<u64>) -> Answer {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = format!("/items/{name}");
    let lease = epoch.map(|e| lease_for(&agent, &path, e, |_| {}));
    let mut req = put(p, &path, lease.as_deref(), Some(&inverse_for(&path)));
    req.headers_mut()
        .insert("authorization", format!("Bearer {caller}").parse().unwrap());
    let (parts, bytes) = send(&http1_client(), req).await;
    Answer {
        status: parts.status,
        problem: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        retry_after: parts
            .headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok()?.parse().ok()),
    }
}

fn sidecar(upstream: Upstream, rules: &str) -> Setup {
    start_configured(
        upstream,
        tempfile::tempdir().unwrap(),
        "",
        &format!("[budgets]\nrules = [{rules}]\n"),
    )
}

fn puts(s: &Setup) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runaway_loop_is_stopped_at_its_budget() {
    let s = sidecar(
        Upstream::start().await,
        r#"{ name = "per-agent", per = ["caller"], limit = 20, window = "10s" }"#,
    );
    let p = std::sync::Arc::new(s.p);
    let mut tasks = Vec::new();
    for t in 0..16 {
        let p = p.clone();
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in (t..500).step_by(16) {
                out.push(write(&p, "loop-agent", &format!("loop-{i}"), Some(1)).await);
            }
            out
        }));
    }
    let mut answers = Vec::new();
    for t in tasks {
        answers.extend(t.await.unwrap());
    }
    assert_eq!(answers.len(), 500);
    let ok = answers
        .iter()
        .filter(|a| a.status == StatusCode::OK)
        .count();
    assert_eq!(ok, 20, "forwarded under a budget of 20 per 10 s");
    let upstream_puts = s
        .upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .count();
    assert_eq!(upstream_puts, 20, "the upstream saw {upstream_puts}");
    for a in answers.iter().filter(|a| a.status != StatusCode::OK) {
        assert_eq!(a.status, StatusCode::TOO_MANY_REQUESTS, "{}", a.problem);
        assert_eq!(a.problem["code"], "ERR_WRITE_BUDGET");
        assert_eq!(a.problem["rule"], "per-agent");
        let after = a.retry_after.expect("Retry-After");
        assert!((1..=10).contains(&after), "Retry-After {after}");
        assert_eq!(a.problem["retry_after"], after);
        assert_receipt_verifies(&a.problem["receipt"], "rejection");
    }
    // Another caller has a budget of its own.
    let other = write(&p, "other-agent", "other-1", Some(1)).await;
    assert_eq!(other.status, StatusCode::OK, "{}", other.problem);
    let events = drift_events(&p);
    let rate = events
        .iter()
        .filter(|e| e["code"] == "ERR_WRITE_BUDGET" && e["category"] == "rate")
        .count();
    assert!(rate >= 1, "{events:?}");
    let (_, metrics) = admin_get(p.admin, "/metrics").await;
    assert!(
        metrics.contains("palisade_budget_refusals_total{rule=\"per-agent\"} 480"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_writes_spend_nothing_and_the_window_slides() {
    let rules = r#"{ name = "two", per = ["caller"], limit = 2, window = "2s" }, { name = "res", per = ["caller", "resource"], limit = 5, window = "1m" }"#;
    let s = start_in_process(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        &format!("[budgets]\nrules = [{rules}]\n"),
    )
    .await;
    // Refused by the checks before the budget: no lease, a stale epoch, a bad inverse.
    for i in 0..4 {
        let a = write(&s.p, "a", &format!("refused-{i}"), None).await;
        assert_eq!(a.status.as_u16(), 428, "{}", a.problem);
    }
    assert_eq!(write(&s.p, "a", "x", Some(1)).await.status, StatusCode::OK);
    let stale = write(&s.p, "a", "x", Some(1)).await;
    assert_eq!(stale.status, StatusCode::CONFLICT, "{}", stale.problem);
    // One spent so far: one more fits, then the third is over.
    assert_eq!(write(&s.p, "a", "y", Some(1)).await.status, StatusCode::OK);
    let over = write(&s.p, "a", "z", Some(1)).await;
    assert_eq!(
        over.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        over.problem
    );
    assert_eq!(over.problem["rule"], "two");
    assert!(over.retry_after.unwrap() <= 2);
    assert_eq!(puts(&s), 2);
    // The window slides: 2 s after the first, one more fits; the refused one spent nothing.
    s.p.advance(Duration::from_millis(2100));
    let again = write(&s.p, "a", "z", Some(1)).await;
    assert_eq!(again.status, StatusCode::OK, "{}", again.problem);
    assert_eq!(puts(&s), 3);
    // Nothing of the refused writes went out.
    let seen: Vec<String> = s
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.path_and_query)
        .collect();
    assert_eq!(seen, ["/items/x", "/items/y", "/items/z"]);
}

#[test]
fn a_rule_that_cannot_be_kept_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\n[upstream]\nurl = \"http://127.0.0.1:9\"\n[store]\npath = \"{}/s.redb\"\n\
         [budgets]\nrules = [{{ name = \"a\", per = [\"agent\"], limit = 0, window = \"1ms\" }}, {{ name = \"a\", per = [], limit = 1, window = \"2d\" }}]\n",
        dir.path().display()
    );
    let cfg = dir.path().join("p.toml");
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    for needle in [
        "budgets.rules[0].per",
        "budgets.rules[0].limit",
        "budgets.rules[0].window",
        "budgets.rules[1].name",
        "budgets.rules[1].per",
        "budgets.rules[1].window",
    ] {
        assert!(err.contains(needle), "{needle}: {err}");
    }
}
