//! The emergency stop (SPEC §14, issue 38) through the real binary: a freeze made on the admin
//! listener refuses every write it names (423 `ERR_FROZEN` with the freeze's id and reason, a
//! rejection receipt naming it, a drift event of category `freeze`, nothing forwarded), lets
//! reads flow, is an entry of the receipt log naming who made it, survives a restart, is
//! lifted the same way, and bad input changes nothing. The `palisade freeze` command line does
//! the same against a running sidecar.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::process::Command;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support;
use support::writes::*;
use support::*;

async fn admin(
    admin: SocketAddr,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> (StatusCode, Value) {
    let req = Request::builder()
        .method(method)
        .uri(format!("http://{admin}{path}"))
        .header("content-type", "application/json")
        .body(full(body.map(Value::to_string).unwrap_or_default()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// A leased write of `/items/<sku>` at `epoch`: its status, problem or receipt.
async fn write(p: &Palisade, sku: &str, epoch: u64) -> (StatusCode, Value, Option<Value>) {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let path = format!("/items/{sku}");
    let lease = lease_for(&agent, &path, epoch, |_| {});
    let mut req = put(p, &path, Some(&lease), Some(&inverse_for(&path)));
    // The caller, as the sidecar tells callers apart without admission: its credential.
    req.headers_mut()
        .insert("authorization", "Bearer agent-7".parse().unwrap());
    let (parts, bytes) = send(&http1_client(), req).await;
    let receipt = parts.headers.get("agent-commit-receipt").map(|h| {
        use base64::Engine as _;
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(h.as_bytes())
            .unwrap();
        serde_json::from_slice(&raw).unwrap()
    });
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        receipt,
    )
}

fn puts(s: &Setup) -> Vec<String> {
    s.upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .map(|r| r.path_and_query)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_stops_what_it_names_survives_a_restart_and_is_lifted() {
    let upstream = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let text = write_config(&upstream, dir.path(), "", "");
    let mut s = Setup {
        upstream,
        p: Palisade::start_in(dir, &text),
    };
    let (status, _, receipt) = write(&s.p, "A", 1).await;
    assert_eq!(status, StatusCode::OK);
    let first = verified_receipt(&receipt.unwrap());
    let caller = first["caller"]
        .as_str()
        .expect("the receipts' caller")
        .to_owned();

    // Bad input: a 400 problem each, and nothing made.
    for bad in [
        json!({"scope": "caller", "reason": "no value"}),
        json!({"scope": "all", "value": "x", "reason": "value on all"}),
        json!({"scope": "everyone", "reason": "x"}),
        json!({"scope": "all"}),
        json!({"scope": "all", "reason": "x", "until": "2020-01-01T00:00:00Z"}),
        json!({"scope": "all", "reason": "x", "extra": 1}),
    ] {
        let (status, p) = admin(s.p.admin, "POST", "/admin/v1/freeze", Some(&bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {p}");
        assert_eq!(p["code"], "ERR_BAD_REQUEST", "{p}");
    }
    let (status, list) = admin(s.p.admin, "GET", "/admin/v1/freeze", None).await;
    assert_eq!(
        (status, list["freezes"].as_array().unwrap().len()),
        (StatusCode::OK, 0)
    );
    let (status, _) = admin(s.p.admin, "DELETE", "/admin/v1/freeze/0193", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // This caller frozen: made, receipted, in force before the answer.
    let body = json!({"scope": "caller", "value": caller, "reason": "refund loop, ticket 42"});
    let (status, made) = admin(s.p.admin, "POST", "/admin/v1/freeze", Some(&body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let id = made["id"].as_str().unwrap().to_owned();
    let r = verified_receipt(&made["receipt"]);
    assert_eq!(
        (
            r["kind"].as_str(),
            r["outcome"].as_str(),
            r["freeze_id"].as_str()
        ),
        (Some("freeze"), Some("frozen"), Some(id.as_str()))
    );
    assert_eq!(
        r["by"], "admin-listener",
        "no admin credential is configured here"
    );

    let before = puts(&s);
    let (status, problem, _) = write(&s.p, "B", 1).await;
    assert_eq!(status.as_u16(), 423, "{problem}");
    assert_eq!(problem["code"], "ERR_FROZEN");
    assert_eq!(problem["freeze_id"], id.as_str());
    assert_eq!(problem["reason"], "refund loop, ticket 42");
    let rejection = verified_receipt(&problem["receipt"]);
    assert_eq!(
        (rejection["kind"].as_str(), rejection["freeze_id"].as_str()),
        (Some("rejection"), Some(id.as_str()))
    );
    assert_eq!(puts(&s), before, "a frozen write reached the upstream");
    // Reads flow.
    let req = Request::get(s.p.url("/items/B")).body(full("")).unwrap();
    assert_eq!(send(&http1_client(), req).await.0.status, StatusCode::OK);
    let events = drift_events(&s.p);
    assert!(
        events
            .iter()
            .any(|e| e["code"] == "ERR_FROZEN" && e["category"] == "freeze"),
        "{events:?}"
    );

    // Another caller's scope, an operation and a resource: only the named one is stopped.
    let other =
        json!({"scope": "resource", "value": format!("{BASE}/items/C"), "reason": "bad row"});
    let (status, made_c) = admin(s.p.admin, "POST", "/admin/v1/freeze", Some(&other)).await;
    assert_eq!(status, StatusCode::CREATED, "{made_c}");
    let (status, list) = admin(s.p.admin, "GET", "/admin/v1/freeze", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["freezes"].as_array().unwrap().len(), 2, "{list}");
    assert_eq!(list["freezes"][0]["in_force"], true);

    // A restart: the freezes hold from the first request.
    s.p.sigterm();
    s.p.child().wait().unwrap();
    let dir = std::mem::replace(&mut s.p.dir, tempfile::tempdir().unwrap());
    s.p = Palisade::start_in(dir, &text);
    let (status, problem, _) = write(&s.p, "B", 1).await;
    assert_eq!(
        (status.as_u16(), problem["freeze_id"].as_str()),
        (423, Some(id.as_str()))
    );

    // Lifted: receipted, and the caller writes again; the resource freeze still holds.
    let (status, lifted) =
        admin(s.p.admin, "DELETE", &format!("/admin/v1/freeze/{id}"), None).await;
    assert_eq!(status, StatusCode::OK, "{lifted}");
    let r = verified_receipt(&lifted["receipt"]);
    assert_eq!(
        (r["outcome"].as_str(), r["freeze_id"].as_str()),
        (Some("unfrozen"), Some(id.as_str()))
    );
    let (status, _, _) = write(&s.p, "B", 1).await;
    assert_eq!(status, StatusCode::OK);
    let (status, problem, _) = write(&s.p, "C", 1).await;
    assert_eq!(
        (status.as_u16(), problem["code"].as_str()),
        (423, Some("ERR_FROZEN"))
    );
    let (status, _) = admin(s.p.admin, "DELETE", &format!("/admin/v1/freeze/{id}"), None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "lifted once");
    assert_eq!(puts(&s), ["/items/A", "/items/B"]);

    // The command line, against the running sidecar: all writes, then lifted.
    let url = format!("http://{}", s.p.admin);
    let out = Command::new(bin())
        .args([
            "freeze",
            "--admin",
            &url,
            "--scope",
            "all",
            "--reason",
            "maintenance",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let made: Value = serde_json::from_slice(&out.stdout).unwrap();
    let (status, problem, _) = write(&s.p, "D", 1).await;
    assert_eq!((status.as_u16(), &problem["freeze_id"]), (423, &made["id"]));
    let listed = Command::new(bin())
        .args(["freeze", "--admin", &url, "--list"])
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["freezes"].as_array().unwrap().len(), 2);
    let out = Command::new(bin())
        .args([
            "unfreeze",
            "--admin",
            &url,
            "--id",
            made["id"].as_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (status, _, _) = write(&s.p, "D", 1).await;
    assert_eq!(status, StatusCode::OK);
    // Refused input: exit 1 with the problem, exit 2 for usage.
    let out = Command::new(bin())
        .args([
            "freeze", "--admin", &url, "--scope", "caller", "--reason", "no value",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("value is required"));
    let out = Command::new(bin())
        .args([
            "freeze", "--admin", &url, "--scope", "some", "--reason", "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(bin())
        .args(["unfreeze", "--admin", &url, "--id", "../reload"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
