//! The operators' console (SPEC §9, issue 39) in a real browser: headless Chromium (Debian's
//! `chromium` and `chromium-driver`) driven by Selenium from `tests/console/drive.py`, with
//! axe-core (npm) checking each view. The writes it decides on are real leased writes made
//! through the sidecar here; what reached the upstream is asserted here, byte for byte, after
//! the browser is done.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use http::{Request, StatusCode};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::admin::curl;
use crate::support::bundles::{contract, qty_schema, write_bundle};
use crate::support::writes::*;
use crate::support::*;

const ALICE: &str = "tok-alice-console-5c1e";
const BOB: &str = "tok-bob-console-83aa";
const CONSOLE_URL: &str = "https://palisade-admin.example/ui/";

/// A HUMAN_ESCROW write of `body` to `path`, leased for `window_ms`; its escrow id.
async fn hold(s: &Setup, path: &str, body: &str, window_ms: u64) -> String {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, path, 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
        f.insert("t_req_ms".into(), json!(window_ms.min(1000)));
        f.insert("t_granted_ms".into(), json!(window_ms));
    });
    let req = Request::put(s.p.url(path))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            base64::Engine::encode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                inverse_for(path),
            ),
        )
        .body(full(body.to_owned()))
        .unwrap();
    let (parts, answer) = send(&http1_client(), req).await;
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(parts.status, StatusCode::ACCEPTED, "{text}");
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    doc["escrow_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operators_decide_held_writes_in_a_real_browser() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(
        python.exists(),
        "run scripts/test.sh: it makes the venv with Selenium"
    );
    let hook = Receiver::start(0, StatusCode::OK).await;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_owned();
    std::fs::write(d.join("admin-token"), format!("alice:{ALICE}\nbob:{BOB}\n")).unwrap();
    // An operator's rule holds the big quantity too (SPEC §15): the console names it.
    std::fs::write(
        d.join("rules.toml"),
        "[[rule]]\nname = \"large-counts\"\non = [\"PUT /items/{id}\"]\n\
         when = 'has(body.qty) && body.qty > 1000'\naction = \"hold\"\n\
         reason = \"quantities over 1000 need a second look\"\n",
    )
    .unwrap();
    let put = contract(qty_schema(), "write", "compensable", "optional");
    let contract_digest = format!(
        "sha-256:{}",
        palisade_policy::digest::Sha256Digest::of_json(&put).to_hex()
    );
    let bundle = write_bundle(
        &d,
        "urn:palisade:test:console/1",
        &[("set_item", "PUT /items/{id}", put, None)],
    );
    let extra = format!(
        "[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n\
         [escrow]\napprovals_required = 2\nwebhook = \"{}\"\nconsole_url = \"{CONSOLE_URL}\"\n\
         [rules]\nfile = \"{}\"\n{}",
        d.join("admin-token").display(),
        hook.url(),
        d.join("rules.toml").display(),
        bundle.rich_toml("unbound_writes = \"allow\"\n"),
    );
    let s = start_in_process(Upstream::start().await, dir, &extra).await;

    // Three real held writes: one to approve (two names), one whose body holds markup (to
    // reject), one whose lease runs out before anyone looks.
    let approve = hold(&s, "/items/1", r#"{"qty":1150}"#, 120_000).await;
    let markup = r#"{"qty":3,"note":"<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>"}"#;
    let reject = hold(&s, "/items/2", markup, 120_000).await;
    let expired = hold(&s, "/items/3", r#"{"qty":7}"#, 1_500).await;
    s.p.advance(std::time::Duration::from_millis(1_600));

    let shots = std::env::var("PALISADE_CONSOLE_SCREENSHOTS").unwrap_or_default();
    let out = tokio::task::spawn_blocking({
        let (admin, data) = (s.p.admin.to_string(), s.p.data.to_string());
        let ids = json!({"approve": approve, "reject": reject, "expired": expired});
        let contract_digest = contract_digest.clone();
        move || {
            Command::new(python)
                .arg(repo.join("tests/console/drive.py"))
                .env("ADMIN_URL", format!("http://{admin}"))
                .env("DATA_URL", format!("http://{data}"))
                .env("ALICE", ALICE)
                .env("BOB", BOB)
                .env("ESCROWS", ids.to_string())
                .env("CONTRACT", &contract_digest)
                .env(
                    "AXE",
                    repo.join("target/node/node_modules/axe-core/axe.min.js"),
                )
                .env("SCREENSHOTS", shots)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the browser run failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");

    // The approved write reached the upstream exactly once, byte for byte; the rejected and
    // the expired ones never did.
    let puts: Vec<_> = s
        .upstream
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT")
        .collect();
    assert_eq!(puts.len(), 1, "{puts:?}");
    assert_eq!(puts[0].path_and_query, "/items/1");
    assert_eq!(puts[0].body_sha256, sha256_hex(br#"{"qty":1150}"#));

    // Each decision is a receipt naming its approver, with the reason typed in the console.
    let (code, body) = curl(
        &s.p,
        "GET",
        &format!("/admin/v1/escrow/{reject}"),
        Some(ALICE),
    );
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "rejected");
    let r = verified_receipt(&doc["receipt"]);
    assert_eq!(r["kind"], "approval");
    assert_eq!(r["outcome"], "rejected");
    assert_eq!(r["approver"], "bob");
    assert_eq!(r["reason"], "markup in the note; ask the agent");
    let (_, body) = curl(
        &s.p,
        "GET",
        &format!("/admin/v1/escrow/{approve}"),
        Some(BOB),
    );
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "released", "{doc}");
    assert_eq!(doc["approvals"], json!(["alice", "bob"]));
    assert!(
        doc.get("request").is_none(),
        "a decided escrow keeps no request"
    );

    // Each hold was announced to escrow.webhook with a link into the console, and no payload.
    let held: Vec<Value> = hook
        .events()
        .into_iter()
        .filter(|e| e["event"] == "escrow_held")
        .collect();
    assert_eq!(held.len(), 3, "{held:?}");
    for (n, (e, id)) in held.iter().zip([&approve, &reject, &expired]).enumerate() {
        assert_eq!(e["escrow_id"], id.as_str());
        assert_eq!(e["operation"], format!("PUT /items/{}", n + 1));
        assert_eq!(e["contract_digest"], contract_digest.as_str());
        assert_eq!(e["approvals_required"], 2);
        assert_eq!(e["link"], format!("{CONSOLE_URL}#/escrow/{id}"));
        assert!(e["lease_expires_at"].is_string());
        assert!(!e.to_string().contains("qty"), "no payload: {e}");
    }
}
