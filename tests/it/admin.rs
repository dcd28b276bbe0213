//! The admin listener's credential (SPEC §9): `admin.token_file` or a client certificate with
//! an allowed SPIFFE ID (mTLS), checked on every mutating and `/admin/v1/*` call, the probes
//! left open, a non-loopback listener refused without one, slow headers cut. Approvals are made with curl, as an operator would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{Read as _, Write as _};
use std::process::Command;
use std::time::Duration;

use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

/// `curl` against the admin listener: the status and the body. A mutating call says it is
/// JSON, as SPEC §9 asks of every admin client.
pub(crate) fn curl(p: &Palisade, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "-w", "\n%{http_code}"]);
    if method != "GET" {
        cmd.args(["-H", "content-type: application/json"]);
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("http://{}{path}", p.admin))
        .output()
        .expect("curl is installed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

/// A sidecar whose admin listener takes the token in `dir/admin-token`.
async fn guarded(token: &str) -> Setup {
    guarded_with(token, "").await
}

/// [`guarded`], with `more` configuration after it.
pub(crate) async fn guarded_with(token: &str, more: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let extra = format!(
        "[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n{more}",
        file.display()
    );
    start_in(Upstream::start().await, dir, &extra)
}

/// Holds a HUMAN_ESCROW write to `/items/1`; returns the escrow id.
async fn hold(s: &Setup) -> String {
    hold_at(s, "/items/1").await
}

pub(crate) async fn hold_at(s: &Setup, path: &str) -> String {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, path, 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
    });
    let (parts, body) = send(
        &http1_client(),
        put(&s.p, path, Some(&lease), Some(&inverse_for(path))),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    doc["escrow_id"].as_str().unwrap().to_owned()
}

fn puts(s: &Setup) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escrow_approval_needs_the_admin_token() {
    let s = guarded("approve-me-7f3a").await;
    let id = hold(&s).await;
    let approve = format!("/admin/v1/escrow/{id}/approve");

    // No token, a wrong one, another scheme: 401, and the write stays held.
    for token in [None, Some("approve-me"), Some("approve-me-7f3a-x")] {
        let (code, body) = curl(&s.p, "POST", &approve, token);
        assert_eq!(code, 401, "{token:?}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["code"], "ERR_ADMIN_UNAUTHORIZED");
    }
    let (code, _) = curl(&s.p, "POST", &format!("/admin/v1/escrow/{id}/reject"), None);
    assert_eq!(code, 401);
    let (code, _) = curl(&s.p, "POST", "/admin/v1/reload", None);
    assert_eq!(code, 401);
    for read in [
        "/admin/v1/escrow",
        "/admin/v1/drift-events",
        "/admin/v1/lockfile",
    ] {
        let (code, _) = curl(&s.p, "GET", read, None);
        assert_eq!(code, 401, "{read}");
    }
    assert_eq!(puts(&s), 0, "nothing was released");
    let (code, list) = curl(&s.p, "GET", "/admin/v1/escrow", Some("approve-me-7f3a"));
    assert_eq!(code, 200);
    assert!(list.contains(&id) && list.contains("\"held\""), "{list}");

    // Probes and scrapes stay open.
    for open in ["/healthz", "/readyz", "/metrics"] {
        let (code, _) = curl(&s.p, "GET", open, None);
        assert_eq!(code, 200, "{open}");
    }

    // The right token releases it, once.
    let (code, body) = curl(&s.p, "POST", &approve, Some("approve-me-7f3a"));
    assert_eq!(code, 200, "{body}");
    assert_eq!(puts(&s), 1);

    // A rotated token (the Secret's file rewritten) takes effect at once.
    std::fs::write(s.p.dir.path().join("admin-token"), "rotated-91c2\n").unwrap();
    let (code, _) = curl(&s.p, "GET", "/admin/v1/escrow", Some("approve-me-7f3a"));
    assert_eq!(code, 401);
    let (code, _) = curl(&s.p, "GET", "/admin/v1/escrow", Some("rotated-91c2"));
    assert_eq!(code, 200);
    // An emptied file refuses everything rather than accepting an empty token.
    std::fs::write(s.p.dir.path().join("admin-token"), "\n").unwrap();
    let out = Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "Authorization: Bearer ",
        ])
        .arg(format!("http://{}/admin/v1/escrow", s.p.admin))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "401");
    // The token never reaches the logs.
    assert!(!s.p.logs().contains("approve-me-7f3a"));
}

#[test]
fn a_non_loopback_admin_listener_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("palisade.toml");
    std::fs::write(
        &config,
        "[admin]\naddr = \"0.0.0.0:0\"\n[upstream]\nurl = \"http://127.0.0.1:9\"\n[ptcl]\nwrites = []\n",
    )
    .unwrap();
    for cmd in [
        &["config", "check", "--config"][..],
        &["run", "--config"][..],
    ] {
        let out = Command::new(bin()).args(cmd).arg(&config).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("admin.addr") && err.contains("admin.token_file"),
            "{err}"
        );
    }
    // A token file that cannot be read stops the start too.
    std::fs::write(
        &config,
        format!(
            "[admin]\naddr = \"0.0.0.0:0\"\ntoken_file = \"{}/missing\"\n[upstream]\nurl = \"http://127.0.0.1:9\"\n[ptcl]\nwrites = []\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let out = Command::new(bin())
        .args(["run", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("admin.token_file"));
}

#[test]
fn slow_headers_are_cut_on_the_admin_listener() {
    let p = Palisade::start(
        "[upstream]\nurl = \"http://127.0.0.1:9\"\n[ptcl]\nwrites = []\n[limits]\nheader_timeout = \"1s\"\n",
    );
    let mut s = std::net::TcpStream::connect(p.admin).unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: a\r\n")
        .unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = Vec::new();
    // The listener answers (408 or nothing) and closes: read_to_end returns.
    let _ = s.read_to_end(&mut buf);
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(5),
        "connection held {waited:?}"
    );
    assert!(!String::from_utf8_lossy(&buf).contains("200 OK"));
}

/// `curl` over TLS to the admin listener with an optional client certificate: the status
/// (0 when the TLS handshake failed) and the body.
fn curl_tls(
    p: &Palisade,
    pki: &Pki,
    method: &str,
    path: &str,
    client: Option<&str>,
    token: Option<&str>,
) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "-w", "\n%{http_code}", "--cacert"])
        .arg(pki.path("ca.pem"));
    if method != "GET" {
        cmd.args(["-H", "content-type: application/json"]);
    }
    if let Some(name) = client {
        cmd.arg("--cert")
            .arg(pki.path(&format!("{name}.crt")))
            .arg("--key")
            .arg(pki.path(&format!("{name}.key")));
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("https://localhost:{}{path}", p.admin.port()))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    (code.trim().parse().unwrap_or(0), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn escrow_approval_by_an_allowed_spiffe_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki_dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(pki_dir.path());
    pki.write_server("palisade-admin");
    let write = |name: &str, issued: &Issued| {
        std::fs::write(pki.path(&format!("{name}.crt")), &issued.cert_pem).unwrap();
        std::fs::write(pki.path(&format!("{name}.key")), &issued.key_pem).unwrap();
    };
    let operator = "spiffe://cluster.local/ns/ops/sa/escrow-approver";
    write("operator", &pki.issue_client_spiffe(operator));
    write(
        "other",
        &pki.issue_client_spiffe("spiffe://cluster.local/ns/erp/sa/agent"),
    );
    let rogue_dir = tempfile::tempdir().unwrap();
    let rogue_ca = Pki::new(rogue_dir.path());
    write("rogue", &rogue_ca.issue_client_spiffe(operator));
    let token = dir.path().join("admin-token");
    std::fs::write(&token, "tok-5d1e\n").unwrap();
    let extra = format!(
        "[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\nallowed_spiffe_ids = [\"{operator}\"]\n\
         tls = {{ cert = \"{}\", key = \"{}\", client_ca = \"{}\" }}\n",
        token.display(),
        pki.path("server.crt").display(),
        pki.path("server.key").display(),
        pki.path("ca.pem").display(),
    );
    let s = start_in(Upstream::start().await, dir, &extra);
    let id = hold(&s).await;
    let approve = format!("/admin/v1/escrow/{id}/approve");

    // Probes need no certificate (kubelet has none); plain HTTP is not spoken.
    let (code, _) = curl_tls(&s.p, &pki, "GET", "/healthz", None, None);
    assert_eq!(code, 200);
    let (code, _) = curl(&s.p, "GET", "/healthz", None);
    assert_ne!(code, 200, "plain HTTP on a TLS admin port");
    // No certificate, another workload's, or the right SPIFFE ID from another CA: refused.
    for client in [None, Some("other")] {
        let (code, body) = curl_tls(&s.p, &pki, "POST", &approve, client, None);
        assert_eq!(code, 401, "{client:?}: {body}");
        let doc: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(doc["code"], "ERR_ADMIN_UNAUTHORIZED");
    }
    let (code, _) = curl_tls(&s.p, &pki, "POST", &approve, Some("rogue"), None);
    assert_eq!(code, 0, "a certificate from another CA fails the handshake");
    assert_eq!(puts(&s), 0, "nothing was released");
    // The token still works without a certificate (either credential is enough).
    let (code, list) = curl_tls(
        &s.p,
        &pki,
        "GET",
        "/admin/v1/escrow",
        None,
        Some("tok-5d1e"),
    );
    assert_eq!(code, 200, "{list}");
    assert!(list.contains(&id), "{list}");
    // The console's sign-in with a client certificate: whoami names the SPIFFE ID, and the
    // console's page itself needs no credential.
    let (code, me) = curl_tls(
        &s.p,
        &pki,
        "GET",
        "/admin/v1/whoami",
        Some("operator"),
        None,
    );
    assert_eq!(code, 200, "{me}");
    assert_eq!(
        serde_json::from_str::<Value>(&me).unwrap()["name"],
        operator
    );
    let (code, _) = curl_tls(&s.p, &pki, "GET", "/admin/v1/whoami", Some("other"), None);
    assert_eq!(code, 401);
    let (code, page) = curl_tls(&s.p, &pki, "GET", "/ui/", None, None);
    assert_eq!(code, 200);
    assert!(page.contains("console.js"), "{page}");
    // The operator's certificate releases the write, once.
    let (code, body) = curl_tls(&s.p, &pki, "POST", &approve, Some("operator"), None);
    assert_eq!(code, 200, "{body}");
    assert_eq!(puts(&s), 1);
    let (code, _) = curl_tls(&s.p, &pki, "POST", &approve, Some("operator"), None);
    assert_eq!(code, 409);
    assert_eq!(puts(&s), 1);
}

#[test]
fn spiffe_ids_need_a_client_ca_and_must_be_spiffe_ids() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("palisade.toml");
    for (admin, want) in [
        (
            "allowed_spiffe_ids = [\"spiffe://td/ops\"]\n",
            "needs admin.tls with client_ca",
        ),
        (
            "allowed_spiffe_ids = [\"https://td/ops\"]\n",
            "is not a SPIFFE ID",
        ),
    ] {
        std::fs::write(
            &config,
            format!("[admin]\naddr = \"127.0.0.1:0\"\n{admin}[upstream]\nurl = \"http://127.0.0.1:9\"\n[ptcl]\nwrites = []\n"),
        )
        .unwrap();
        let out = Command::new(bin())
            .args(["config", "check", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("admin.allowed_spiffe_ids") && err.contains(want),
            "{err}"
        );
    }
}

/// Named admin tokens (SPEC §9): `name:token` lines, each call attributed to its token's name.
/// A freeze made with bob's token names bob in its receipt; a token that is no one's is 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_tokens_attribute_each_admin_call() {
    let s = guarded("alice:tok-alice-19\nbob:tok-bob-27").await;
    let body = r#"{"scope":"all","reason":"drill"}"#;
    let freeze = |token: &str| {
        let out = Command::new("curl")
            .args(["-s", "-X", "POST", "-w", "\n%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(["-H", "content-type: application/json", "--data", body])
            .arg(format!("http://{}/admin/v1/freeze", s.p.admin))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.trim().parse::<u16>().unwrap(), body.to_owned())
    };
    let (code, made) = freeze("tok-bob-27");
    assert_eq!(code, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    assert_eq!(verified_receipt(&made["receipt"])["by"], "bob");
    assert_eq!(made["freeze"]["by"], "bob");
    for wrong in ["bob:tok-bob-27", "tok-bob", "alice"] {
        let (code, doc) = freeze(wrong);
        assert_eq!(code, 401, "{wrong}: {doc}");
    }
    let (code, list) = curl(&s.p, "GET", "/admin/v1/freeze", Some("tok-alice-19"));
    assert_eq!(code, 200, "{list}");
}

/// The two-person rule (SPEC §9): with `escrow.approvals_required = 2`, one approval leaves the
/// write held (202), the same name again is refused and counts once, a second name releases it
/// exactly once; each approval and a rejection are receipts of kind `approval` naming the
/// approver, bound to the escrow and its request's digest; one rejection rejects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_named_approvers_release_a_held_write() {
    let s = guarded_with(
        "alice:tok-alice-19\nbob:tok-bob-27",
        "[escrow]\napprovals_required = 2\n",
    )
    .await;
    let id = hold(&s).await;
    let approve = format!("/admin/v1/escrow/{id}/approve");
    // An approval bound to another request than the one held approves nothing.
    let with_body = |token: &str, body: &str| {
        let out = Command::new("curl")
            .args(["-s", "-X", "POST", "-w", "\n%{http_code}", "-H"])
            .arg(format!("Authorization: Bearer {token}"))
            .args(["-H", "content-type: application/json", "--data", body])
            .arg(format!("http://{}{approve}", s.p.admin))
            .output()
            .expect("curl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let (body, code) = text.rsplit_once('\n').unwrap();
        (code.trim().parse::<u16>().unwrap(), body.to_owned())
    };
    let held = format!("sha256:{}", sha256_hex(br#"{"qty":1150}"#));
    let wrong = format!("{{\"request_digest\":\"sha256:{}\"}}", "0".repeat(64));
    let (code, body) = with_body("tok-alice-19", &wrong);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("request_digest"), "{body}");
    let (code, body) = with_body("tok-alice-19", "not json");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("JSON object"), "{body}");
    let (code, body) = with_body(
        "tok-alice-19",
        &format!("{{\"request_digest\":\"{held}\"}}"),
    );
    assert_eq!(code, 202, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "held");
    assert_eq!(doc["approvals"], json!(["alice"]));
    let r = verified_receipt(&doc["receipt"]);
    assert_eq!(
        (
            r["kind"].as_str(),
            r["outcome"].as_str(),
            r["approver"].as_str()
        ),
        (Some("approval"), Some("approved"), Some("alice"))
    );
    assert_eq!(r["escrow_id"], id.as_str());
    assert_eq!(
        r["request_digest"],
        format!("sha256:{}", sha256_hex(br#"{"qty":1150}"#))
    );
    // The same name again counts once: refused (409, a code of its own), still one
    // approval, nothing sent.
    let (code, body) = curl(&s.p, "POST", &approve, Some("tok-alice-19"));
    assert_eq!(code, 409, "{body}");
    assert!(body.contains("ERR_APPROVAL_REPEATED"), "{body}");
    assert_eq!(puts(&s), 0);
    // A second name releases it, once.
    let (code, body) = curl(&s.p, "POST", &approve, Some("tok-bob-27"));
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "released", "{doc}");
    assert_eq!(doc["approvals"], json!(["alice", "bob"]));
    assert_eq!(puts(&s), 1);
    let (code, _) = curl(&s.p, "POST", &approve, Some("tok-bob-27"));
    assert_eq!(code, 409);
    assert_eq!(puts(&s), 1, "released exactly once");

    // One rejection rejects, whatever was approved before; it names the approver.
    let other = hold_at(&s, "/items/2").await;
    let (code, _) = curl(
        &s.p,
        "POST",
        &format!("/admin/v1/escrow/{other}/approve"),
        Some("tok-alice-19"),
    );
    assert_eq!(code, 202);
    let (code, body) = curl(
        &s.p,
        "POST",
        &format!("/admin/v1/escrow/{other}/reject"),
        Some("tok-bob-27"),
    );
    assert_eq!(code, 200, "{body}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(doc["state"], "rejected");
    let r = verified_receipt(&doc["receipt"]);
    assert_eq!(
        (
            r["kind"].as_str(),
            r["outcome"].as_str(),
            r["approver"].as_str()
        ),
        (Some("approval"), Some("rejected"), Some("bob"))
    );
    let (code, _) = curl(
        &s.p,
        "POST",
        &format!("/admin/v1/escrow/{other}/approve"),
        Some("tok-bob-27"),
    );
    assert_eq!(code, 409);
    assert_eq!(puts(&s), 1, "the rejected write never left");
}
