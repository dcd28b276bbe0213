//! The chart's Grafana dashboard (`deploy/helm/palisade/dashboards/palisade.json`, issue 58)
//! against the real binary: every metric its queries name is one a sidecar exports. A
//! sidecar with rules, a write budget and a hold is driven through a write, a refusal, a
//! rule's denial, a budget's refusal, a hold and a freeze, then its `/metrics` is read, and
//! each metric the dashboard queries must be in it. (`tests/k8s/check_chart.py` renders the
//! dashboard's ConfigMap with Helm's engine and checks its label and JSON.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support::writes::*;
use crate::support::*;

const RULES: &str = r#"
[[rule]]
name = "no-archive"
on = ["PUT /items/archive"]
action = "deny"

[[rule]]
name = "big-items"
on = ["PUT /items/big"]
action = "hold"
"#;

fn dashboard_metrics() -> BTreeSet<String> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/palisade/dashboards/palisade.json");
    let board: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for panel in board["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            let mut rest = expr;
            while let Some(at) = rest.find("palisade_") {
                let name: String = rest[at..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                rest = &rest[at + name.len()..];
                names.insert(name);
            }
        }
    }
    names
}

async fn write(s: &Setup, path: &str, epoch: u64) -> StatusCode {
    let key = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&key, path, epoch, |_| {});
    let req = put(&s.p, path, Some(&lease), Some(&inverse_for(path)));
    send(&http1_client(), req).await.0.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_one_the_sidecar_exports() {
    let names = dashboard_metrics();
    assert!(names.len() >= 12, "{names:?}");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let s = start_in(
        Upstream::start().await,
        dir,
        &format!(
            "[rules]\nfile = \"{}\"\n[budgets]\nrules = [{{ name = \"one-each\", per = [\"resource\"], limit = 1, window = \"1m\" }}]\n",
            rules.display()
        ),
    );
    assert_eq!(write(&s, "/items/a", 1).await, StatusCode::OK);
    assert_eq!(
        write(&s, "/items/a", 2).await,
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(write(&s, "/items/archive", 1).await, StatusCode::FORBIDDEN);
    assert_eq!(write(&s, "/items/big", 1).await, StatusCode::ACCEPTED);
    let unleased = put(&s.p, "/items/b", None, None);
    assert!(send(&http1_client(), unleased)
        .await
        .0
        .status
        .is_client_error());
    let freeze = Request::post(format!("http://{}/admin/v1/freeze", s.p.admin))
        .header("content-type", "application/json")
        .body(full(
            json!({"scope": "caller", "value": "nobody", "reason": "test"}).to_string(),
        ))
        .unwrap();
    assert_eq!(
        send(&http1_client(), freeze).await.0.status,
        StatusCode::CREATED
    );

    let (status, text) = admin_get(s.p.admin, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    let exported: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    // A histogram is exported as its `_bucket`, `_sum` and `_count` series.
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| n.strip_suffix(s))
                .unwrap_or(n);
            !exported.contains(n.as_str()) && !exported.contains(format!("{base}_bucket").as_str())
        })
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which /metrics does not have:\n{text}"
    );
    // The held write is counted, the freeze is in force.
    assert!(text.contains("palisade_escrows_held 1"), "{text}");
    assert!(text.contains("palisade_freezes_active 1"), "{text}");
    assert!(
        text.contains("palisade_request_duration_seconds_bucket{kind=\"write\""),
        "{text}"
    );
}
