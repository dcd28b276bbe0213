//! Who calls the admin API: SPIFFE client certificates, named tokens, two approvers.

use super::*;

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
