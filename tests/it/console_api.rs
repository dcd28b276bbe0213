//! The admin calls the console is made of (SPEC §9, issue 39), each on its own with curl:
//! the page and its headers, whoami, one held write in detail, decisions with a reason and
//! their refusals, the live drift stream (resuming, bounded), budgets.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use http::{Request, StatusCode};
use serde_json::{json, Value};

use crate::admin::{curl, guarded_with, hold_at};
use crate::support::writes::*;
use crate::support::*;

const TOKEN: &str = "tok-carol-61d0";

/// curl with the token and a JSON body: status and body.
fn post(p: &Palisade, path: &str, body: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-s", "-X", "POST", "-w", "\n%{http_code}", "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .args(["-H", "content-type: application/json", "--data", body])
        .arg(format!("http://{}{path}", p.admin))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

/// The drift stream as curl reads it for `secs` seconds, with `extra` arguments.
fn stream(p: &Palisade, query: &str, extra: &[&str], secs: u32) -> String {
    let out = Command::new("curl")
        .args(["-s", "-N", "--max-time", &secs.to_string(), "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .args(extra)
        .arg(format!(
            "http://{}/admin/v1/drift-events/stream{query}",
            p.admin
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A write without a lease: 428, and a drift event.
async fn refused(s: &Setup, path: &str) {
    let req = Request::put(s.p.url(path))
        .header("content-type", "application/json")
        .body(full("{}"))
        .unwrap();
    let (parts, _) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::PRECONDITION_REQUIRED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_made_of_documented_admin_calls() {
    let s = guarded_with(
        &format!("carol:{TOKEN}"),
        "[escrow]\napprovals_required = 2\n\
         [budgets]\nrules = [{ name = \"per-caller\", per = [\"caller\"], limit = 50, window = \"1m\" }]\n",
    )
    .await;

    // The page: no credential needed (it holds no data), a strict policy, only its own files.
    let head = Command::new("curl")
        .args(["-s", "-D", "-", "-o", "/dev/null"])
        .arg(format!("http://{}/ui/", s.p.admin))
        .output()
        .unwrap();
    let head = String::from_utf8_lossy(&head.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'none'; script-src 'self'"),
        "{head}"
    );
    assert!(head.contains("x-frame-options: deny") && head.contains("nosniff"));
    assert!(
        !head.contains("set-cookie"),
        "no ambient credential: {head}"
    );
    let (code, _) = curl(&s.p, "GET", "/ui", None);
    assert_eq!(code, 301);
    let (code, _) = curl(&s.p, "GET", "/ui/../admin/v1/escrow", None);
    assert_ne!(code, 200);
    let (code, _) = curl(&s.p, "POST", "/ui/", None);
    assert_eq!(code, 401, "only GET is open");

    // whoami: the credential's name, and how many names release a write.
    let (code, me) = curl(&s.p, "GET", "/admin/v1/whoami", Some(TOKEN));
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&me).unwrap(),
        json!({"name": "carol", "approvals_required": 2})
    );
    let (code, _) = curl(&s.p, "GET", "/admin/v1/whoami", Some("nope"));
    assert_eq!(code, 401);

    // One held write in detail: the body beside the pre-image, the lease window, the caller.
    let id = hold_at(&s, "/items/4").await;
    let (code, _) = curl(&s.p, "GET", &format!("/admin/v1/escrow/{id}"), None);
    assert_eq!(code, 401);
    let (code, body) = curl(&s.p, "GET", &format!("/admin/v1/escrow/{id}"), Some(TOKEN));
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["request"]["method"], "PUT");
    assert_eq!(doc["request"]["target"], "/items/4");
    assert_eq!(doc["request"]["body"], json!({"json": {"qty": 1150}}));
    assert_eq!(doc["pre_image"]["body"], json!({"json": {"ok": true}}));
    assert_eq!(doc["input_check"], json!({"bound": false}));
    assert_eq!(doc["expired"], false);
    assert_eq!(doc["approvals_required"], 2);
    let left = doc["lease_left_ms"].as_i64().unwrap();
    assert!((50_000..=62_000).contains(&left), "{left}");
    assert!(doc["lease_expires_at"].as_str().unwrap().ends_with('Z'));
    assert!(
        doc.get("headers").is_none() && !body.contains("agent-compensation-lease"),
        "no request header (its lease, its credentials) is shown: {body}"
    );
    let (code, _) = curl(&s.p, "GET", "/admin/v1/escrow/not-an-id", Some(TOKEN));
    assert_eq!(code, 404);
    // The agent's own status read shows neither the pre-image nor the request.
    let list = curl(&s.p, "GET", "/admin/v1/escrow", Some(TOKEN)).1;
    assert!(
        !list.contains("\"pre_image\":") && !list.contains("body_b64"),
        "{list}"
    );

    // Decisions carry a reason; a bad one is refused and records nothing.
    let approve = format!("/admin/v1/escrow/{id}/approve");
    let reject = format!("/admin/v1/escrow/{id}/reject");
    for bad in [
        json!({"reason": 7}),
        json!({"reason": "x".repeat(281)}),
        json!({"request_digest": "sha256:00"}),
    ] {
        for path in [&approve, &reject] {
            let (code, body) = post(&s.p, path, &bad.to_string());
            assert_eq!(code, 400, "{path} {bad}: {body}");
        }
    }
    let (_, body) = curl(&s.p, "GET", &format!("/admin/v1/escrow/{id}"), Some(TOKEN));
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (doc["state"].as_str(), doc.get("approvals")),
        (Some("held"), None)
    );
    let (code, body) = post(&s.p, &approve, r#"{"reason":"  counted twice  "}"#);
    assert_eq!(code, 202, "{body}");
    let r = verified_receipt(&serde_json::from_str::<Value>(&body).unwrap()["receipt"]);
    assert_eq!(
        (r["approver"].as_str(), r["reason"].as_str()),
        (Some("carol"), Some("counted twice"))
    );
    let (code, body) = post(&s.p, &reject, r#"{"reason":"wrong warehouse"}"#);
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "rejected");
    let r = verified_receipt(&doc["receipt"]);
    assert_eq!(
        (r["outcome"].as_str(), r["reason"].as_str()),
        (Some("rejected"), Some("wrong warehouse"))
    );
    assert_eq!(
        s.upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .count(),
        0
    );

    // The drift stream: needs the token; the backlog, then events as they come; resumable.
    let (code, _) = curl(&s.p, "GET", "/admin/v1/drift-events/stream", None);
    assert_eq!(code, 401);
    refused(&s, "/items/5").await;
    let first = stream(&s.p, "?backlog=10", &[], 1);
    assert!(first.contains("\"code\":\"ERR_LEASE_REQUIRED\""), "{first}");
    let cursor: u64 = first
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("id: "))
        .unwrap()
        .parse()
        .unwrap();
    // A live reader sees a refusal made while it reads: the refusal is made once the stream
    // is open (its head and opening comment arrived; the sidecar subscribes it before it
    // answers).
    let mut reading = Command::new("curl")
        .args(["-s", "-N", "-i", "--max-time", "3", "-H"])
        .arg(format!("Authorization: Bearer {TOKEN}"))
        .arg(format!("http://{}/admin/v1/drift-events/stream", s.p.admin))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let read: std::sync::Arc<std::sync::Mutex<String>> = Default::default();
    let reader = {
        let (read, out) = (read.clone(), reading.stdout.take().unwrap());
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                let mut r = read.lock().unwrap();
                r.push_str(&line);
                r.push('\n');
            }
        })
    };
    wait::until(
        "the stream's head arrives",
        std::time::Duration::from_secs(3),
        || read.lock().unwrap().starts_with("HTTP/1.1 200"),
    )
    .await;
    refused(&s, "/items/6").await;
    tokio::task::spawn_blocking(move || {
        let _ = reading.wait();
        reader.join().unwrap();
    })
    .await
    .unwrap();
    let live = std::mem::take(&mut *read.lock().unwrap());
    assert_eq!(
        live.matches("data: ").count(),
        1,
        "only what came after it opened: {live}"
    );
    assert!(live.contains(&format!("id: {}\n", cursor + 1)), "{live}");
    // Resuming after the first cursor gives exactly the later one (query or Last-Event-ID).
    for (query, header) in [
        (format!("?after={cursor}"), None),
        (String::new(), Some(format!("Last-Event-ID: {cursor}"))),
    ] {
        let extra: Vec<&str> = header.iter().flat_map(|h| ["-H", h.as_str()]).collect();
        let resumed = stream(&s.p, &query, &extra, 1);
        assert_eq!(resumed.matches("data: ").count(), 1, "{resumed}");
        // An opening comment, then the event.
        assert!(
            resumed.starts_with(&format!(": open\n\nid: {}\n", cursor + 1)),
            "{resumed}"
        );
    }

    // Budgets as configured.
    let (code, body) = curl(&s.p, "GET", "/admin/v1/budgets", Some(TOKEN));
    assert_eq!(code, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&body).unwrap(),
        json!({"rules": [{"name": "per-caller", "per": ["caller"], "limit": 50, "window_ms": 60000}]})
    );
}

/// At most 16 streams at once; the 17th is 503 with Retry-After, and a place comes back when
/// a reader goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_streams_are_bounded() {
    let s = guarded_with(&format!("carol:{TOKEN}"), "").await;
    let url = format!("http://{}/admin/v1/drift-events/stream", s.p.admin);
    // Each reader holds its place before the next starts (its answer's head is on disk).
    let heads = tempfile::tempdir().unwrap();
    let mut readers = Vec::new();
    for n in 0..16 {
        let head = heads.path().join(format!("h{n}"));
        readers.push(
            Command::new("curl")
                .args(["-s", "-N", "-o", "/dev/null", "-D"])
                .arg(&head)
                .arg("-H")
                .arg(format!("Authorization: Bearer {TOKEN}"))
                .arg(&url)
                .spawn()
                .unwrap(),
        );
        wait::until(
            "the reader has its head",
            std::time::Duration::from_secs(5),
            || std::fs::read_to_string(&head).is_ok_and(|seen| seen.contains("\r\n\r\n")),
        )
        .await;
        let seen = std::fs::read_to_string(&head).unwrap_or_default();
        assert!(seen.starts_with("HTTP/1.1 200"), "reader {n}: {seen}");
    }
    let over = || {
        let out = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-D", "-", "--max-time", "1", "-H"])
            .arg(format!("Authorization: Bearer {TOKEN}"))
            .arg(&url)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
    };
    let head = over();
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert!(head.contains("retry-after: 5"), "{head}");
    for r in &mut readers {
        r.kill().unwrap();
        r.wait().unwrap();
    }
    wait::until(
        "a place comes back",
        std::time::Duration::from_secs(5),
        || over().starts_with("http/1.1 200"),
    )
    .await;
}
