//! The admin listener: an emptied token line, and a web page that tries to drive it.

use super::*;

/// Defect 1 (high): `dave:` in the token file, meant to revoke dave, let `Bearer dave:` in as
/// `admin-token` on every admin route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_token_line_opens_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("admin-tokens");
    std::fs::write(&tokens, "alice:tok-alice\ndave:\n").unwrap();
    let upstream = Upstream::start().await;
    let extra = format!(
        "[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n",
        tokens.display()
    );
    let s = start_in(upstream, dir, &extra);
    let dave = [("authorization", "Bearer dave:"), JSON];
    for (method, path, body) in [
        ("GET", "/admin/v1/escrow", ""),
        ("GET", "/admin/v1/freeze", ""),
        ("GET", "/admin/v1/whoami", ""),
        (
            "POST",
            "/admin/v1/freeze",
            r#"{"scope":"all","reason":"dave was revoked"}"#,
        ),
        ("POST", "/admin/v1/escrow/x/approve", "{}"),
        ("POST", "/admin/v1/reload", "{}"),
    ] {
        let (status, doc) = admin_call(&s.p, method, path, &dave, body).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {path}: {doc}");
        if !doc.is_null() {
            assert_eq!(doc["code"], "ERR_ADMIN_UNAUTHORIZED", "{method} {path}");
        }
    }
    for spelled in ["Bearer dave", "Bearer dave: ", "bearer dave:"] {
        let (status, _) = admin_call(
            &s.p,
            "GET",
            "/admin/v1/escrow",
            &[("authorization", spelled)],
            "",
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{spelled}");
    }
    let alice = [("authorization", "Bearer tok-alice"), JSON];
    assert!(freezes(&s.p, &alice).await.is_empty(), "dave froze nothing");
    let (status, who) = admin_call(&s.p, "GET", "/admin/v1/whoami", &alice, "").await;
    assert_eq!(
        (status, who["name"].as_str()),
        (StatusCode::OK, Some("alice"))
    );
    assert!(
        s.p.logs().contains("a line has a name and no token"),
        "the emptied line is warned about"
    );
}

/// Defect 7: with no admin credential (the loopback default), a page could freeze every write
/// with `text/plain`, a foreign `Origin` or `Sec-Fetch-Site: cross-site`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_cannot_drive_the_admin_listener() {
    let s = start("").await;
    let freeze = r#"{"scope":"all","reason":"csrf"}"#;
    for (headers, status, code) in [
        (
            vec![("content-type", "text/plain")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "ERR_ADMIN_MEDIA_TYPE",
        ),
        (
            vec![],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "ERR_ADMIN_MEDIA_TYPE",
        ),
        (
            vec![("content-type", "application/x-www-form-urlencoded")],
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "ERR_ADMIN_MEDIA_TYPE",
        ),
        (
            vec![JSON, ("origin", "http://evil.example")],
            StatusCode::FORBIDDEN,
            "ERR_ADMIN_CROSS_SITE",
        ),
        (
            vec![JSON, ("sec-fetch-site", "cross-site")],
            StatusCode::FORBIDDEN,
            "ERR_ADMIN_CROSS_SITE",
        ),
        (
            vec![JSON, ("sec-fetch-site", "same-site")],
            StatusCode::FORBIDDEN,
            "ERR_ADMIN_CROSS_SITE",
        ),
        (
            vec![JSON, ("host", "evil.example:9901")],
            StatusCode::FORBIDDEN,
            "ERR_ADMIN_CROSS_SITE",
        ),
    ] {
        let (got, doc) = admin_call(&s.p, "POST", "/admin/v1/freeze", &headers, freeze).await;
        assert_eq!(got, status, "{headers:?}: {doc}");
        assert_eq!(doc["code"], code, "{headers:?}");
    }
    assert!(freezes(&s.p, &[]).await.is_empty(), "nothing was frozen");
    // A rebound name cannot read either.
    let (got, _) = admin_call(
        &s.p,
        "GET",
        "/admin/v1/freeze",
        &[("host", "evil.example")],
        "",
    )
    .await;
    assert_eq!(got, StatusCode::FORBIDDEN);
    // The console's own calls, and curl's, still work.
    let own = format!("http://{}", s.p.admin);
    let (got, doc) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON, ("origin", &own), ("sec-fetch-site", "same-origin")],
        freeze,
    )
    .await;
    assert_eq!(got, StatusCode::CREATED, "{doc}");
    let id = doc["id"].as_str().unwrap().to_owned();
    let (got, _) = admin_call(&s.p, "DELETE", &format!("/admin/v1/freeze/{id}"), &[], "").await;
    assert_eq!(
        got,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "DELETE needs JSON too"
    );
    let (got, _) = admin_call(
        &s.p,
        "DELETE",
        &format!("/admin/v1/freeze/{id}"),
        &[JSON],
        "",
    )
    .await;
    assert_eq!(got, StatusCode::OK);
    // Probes and the console's page stay open to anyone.
    for path in ["/healthz", "/metrics", "/ui/"] {
        let (got, _) = admin_call(
            &s.p,
            "GET",
            path,
            &[("sec-fetch-site", "cross-site"), ("host", "10.0.0.1")],
            "",
        )
        .await;
        assert_eq!(got, StatusCode::OK, "{path}");
    }
}
