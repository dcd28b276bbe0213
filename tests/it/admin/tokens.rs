//! The admin token: escrow approval needs it, a non-loopback listener needs one, slow headers.

use super::*;

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
