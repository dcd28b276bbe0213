//! One resource and one caller however they are spelled; tiles past the tree.

use super::*;

/// Defect 3: freeze values in another spelling were answered 201 and stopped nothing. Each is
/// now stored as the data plane's key (the 201 echoes it) and stops the write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_in_any_spelling_stops_the_resource_it_names() {
    let s = start("").await;
    let canonical = format!("{BASE}/items/spelled");
    for (n, spelling) in [
        "/items/spelled",
        "HTTPS://ERP.EXAMPLE.COM/items/spelled",
        "https://erp.example.com:443/items/spelled",
        "https://erp.example.com/items/%73pelled",
        "https://erp.example.com/./items/spelled",
    ]
    .into_iter()
    .enumerate()
    {
        let body = json!({"scope": "resource", "value": spelling, "reason": "spelling"});
        let (status, made) =
            admin_call(&s.p, "POST", "/admin/v1/freeze", &[JSON], &body.to_string()).await;
        assert_eq!(status, StatusCode::CREATED, "{spelling}: {made}");
        assert_eq!(made["freeze"]["value"], canonical.as_str(), "{spelling}");
        let (parts, doc) = leased_put(
            &s,
            "/items/spelled",
            n as u64 + 1,
            &inverse_of("/items/spelled"),
            "Bearer a",
        )
        .await;
        assert_eq!(parts.status, StatusCode::LOCKED, "{spelling}: {doc}");
        assert_eq!(doc["freeze_id"], made["id"], "{spelling}");
        let id = made["id"].as_str().unwrap();
        admin_call(
            &s.p,
            "DELETE",
            &format!("/admin/v1/freeze/{id}"),
            &[JSON],
            "",
        )
        .await;
    }
    assert_eq!(
        puts_to(&s, "/items/spelled"),
        0,
        "the upstream saw no write"
    );
    for bad in [
        "items/spelled",
        "https://erp.example.com/a/%2F/b",
        "ftp://x/y",
    ] {
        let body = json!({"scope": "resource", "value": bad, "reason": "bad"});
        let (status, doc) =
            admin_call(&s.p, "POST", "/admin/v1/freeze", &[JSON], &body.to_string()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {doc}");
    }
    assert!(freezes(&s.p, &[]).await.is_empty());
}

fn inverse_of(path: &str) -> Vec<u8> {
    json!({"method": "PUT", "path": path, "body": {"qty": 1}})
        .to_string()
        .into_bytes()
}

/// Defect 4: `Bearer X`, `bearer X`, `BEARER X` and `Bearer  X` were four callers. A caller
/// freeze on one now stops all four, and a budget of 3 a minute lets 3 of 6 through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_credential_is_one_caller_however_it_is_spelled() {
    let extra = "[budgets]\nrules = [{ name = \"per-agent\", per = [\"caller\"], limit = 3, window = \"1m\" }]\n";
    let s = start(extra).await;
    let spellings = [
        "Bearer X",
        "bearer X",
        "BEARER X",
        "Bearer  X",
        "Bearer X",
        "bEaReR X",
    ];
    let mut passed = 0;
    let mut callers = std::collections::BTreeSet::new();
    for (n, auth) in spellings.into_iter().enumerate() {
        let path = format!("/items/budget-{n}");
        let (parts, doc) = leased_put(&s, &path, 1, &inverse_of(&path), auth).await;
        callers.insert(
            receipt_of(&parts, &doc)["caller"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
        match parts.status {
            StatusCode::OK => passed += 1,
            StatusCode::TOO_MANY_REQUESTS => assert_eq!(doc["code"], "ERR_WRITE_BUDGET"),
            other => panic!("{auth}: {other} {doc}"),
        }
    }
    assert_eq!(passed, 3, "one budget for one credential");
    assert_eq!(callers.len(), 1, "one caller in every receipt: {callers:?}");
    let caller = callers.into_iter().next().unwrap();
    assert_eq!(
        caller,
        format!("authz:{}", Sha256Digest::of(b"bearer X")),
        "the scheme lower-cased, one space, the credential as sent"
    );
    // A caller freeze made with one spelling's caller stops every spelling.
    let s = start("").await;
    let (status, _) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON],
        &json!({"scope": "caller", "value": caller, "reason": "runaway"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    for auth in spellings {
        let (parts, doc) = leased_put(&s, "/items/c", 1, &inverse_of("/items/c"), auth).await;
        assert_eq!(parts.status, StatusCode::LOCKED, "{auth}: {doc}");
    }
    // A second Authorization field cannot make a new caller: the write is refused.
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, "/items/c", 1, |_| {});
    let mut req = put(
        &s.p,
        "/items/c",
        Some(&lease),
        Some(&inverse_for("/items/c")),
    );
    req.headers_mut()
        .append("authorization", "Bearer junk".parse().unwrap());
    req.headers_mut()
        .append("authorization", "Bearer X".parse().unwrap());
    let (parts, bytes) = send(&http1_client(), req).await;
    assert_eq!(parts.status, StatusCode::BAD_REQUEST);
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(doc["code"], "ERR_BAD_REQUEST", "{doc}");
    assert_eq!(receipt_of(&parts, &doc)["kind"], "rejection");
    assert_eq!(puts_to(&s, "/items/c"), 0);
}

/// Defect 9: tile arithmetic at index 2^56 − 1 wrapped: a 410 named entries
/// `18446744073709551360..0`, hash tiles answered 503, and levels 30, 56 and 63 answered 200
/// with 8,192 bytes of made-up hashes marked immutable. Now each is 404, and real tiles still
/// answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiles_past_the_tree_are_not_found_however_large_the_index() {
    let s = start("").await;
    let (parts, _) = leased_put(&s, "/items/t", 1, &inverse_of("/items/t"), "Bearer a").await;
    assert_eq!(parts.status, StatusCode::OK);
    // 2^56 − 1 = 72057594037927935, in groups of three.
    let index = "x072/x057/x594/x037/x927/935";
    for path in [
        format!("/admin/v1/log/tile/entries/{index}"),
        format!("/admin/v1/log/tile/0/{index}"),
        format!("/admin/v1/log/tile/1/{index}"),
        format!("/admin/v1/log/tile/30/{index}"),
        format!("/admin/v1/log/tile/56/{index}"),
        format!("/admin/v1/log/tile/63/{index}"),
        "/admin/v1/log/tile/63/000".to_owned(),
        format!("/admin/v1/log/tile/entries/{index}.p/1"),
    ] {
        let (status, body) = admin_get(s.p.admin, &path).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{path}: {body}");
        assert!(!body.contains("18446744073709551360"), "{path}: {body}");
    }
    let (status, _) = admin_get(s.p.admin, "/admin/v1/log/tile/0/000.p/1").await;
    assert_eq!(status, StatusCode::OK, "the tree's own tile");
}
