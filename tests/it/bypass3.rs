//! The third-generation bypasses (issue 54), each as the probe sent it, through the real
//! binary in front of a real HTTP upstream that records what it received: an emptied token
//! line, inverses that name another resource, freeze values in another spelling, callers in
//! another spelling, `compensate` past a freeze, cross-site admin calls, a read tool call that
//! carried its lease upstream, tile arithmetic at 2^56, and `Origin` on the MCP path. Each test
//! fails on the code before the fix; each asserts the status and code, and where the SPEC
//! gives one, the receipt, the drift event and what the upstream saw.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use http::{Request, StatusCode};
use palisade_policy::digest::Sha256Digest;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};

use crate::support;
use support::writes::*;
use support::*;

/// An admin call as a web page or a script would make it: method, path, headers, body.
async fn admin_call(
    p: &Palisade,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (StatusCode, Value) {
    let mut b = Request::builder()
        .method(method)
        .uri(format!("http://{}{path}", p.admin));
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let (parts, bytes) = send(&http1_client(), b.body(full(body.to_owned())).unwrap()).await;
    (
        parts.status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

const JSON: (&str, &str) = ("content-type", "application/json");

async fn freezes(p: &Palisade, auth: &[(&str, &str)]) -> Vec<Value> {
    let (status, doc) = admin_call(p, "GET", "/admin/v1/freeze", auth, "").await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    doc["freezes"].as_array().cloned().unwrap_or_default()
}

/// The codes of the drift events kept so far: a refusal's event is kept before it is
/// answered (enforce::receipts), so nothing needs waiting for.
async fn drift_codes(p: &Palisade) -> Vec<String> {
    drift_events(p)
        .iter()
        .filter_map(|e| e["code"].as_str().map(str::to_owned))
        .collect()
}

fn receipt_of(parts: &http::response::Parts, body: &Value) -> Value {
    let envelope = match parts.headers.get("agent-commit-receipt") {
        Some(h) => serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h.as_bytes()).unwrap()).unwrap(),
        None => body["receipt"].clone(),
    };
    verified_receipt(&envelope)
}

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

/// A leased PUT of `path` by the caller `auth`, its inverse `inverse` inline.
async fn leased_put(
    s: &Setup,
    path: &str,
    epoch: u64,
    inverse: &[u8],
    auth: &str,
) -> (http::response::Parts, Value) {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let digest = Sha256Digest::of(&palisade_policy::canon::canonicalize(inverse, 8).unwrap());
    let lease = lease_for(&agent, path, epoch, |f| {
        f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
    });
    let mut req = put(&s.p, path, Some(&lease), Some(inverse));
    req.headers_mut()
        .insert("authorization", auth.parse().unwrap());
    let (parts, bytes) = send(&http1_client(), req).await;
    (parts, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn puts_to(s: &Setup, path: &str) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method != "GET" && r.path_and_query.starts_with(path))
        .count()
}

/// Defect 2 (high), HTTP: the authority signed a lease for `/items/mine` whose inverse is
/// `PUT /items/victim`, and `compensate` sent it, moving victim's epoch backwards. Now the
/// grant, the inverse endpoint and an inline inverse are each refused 422
/// `ERR_INVERSE_TARGET`, with a receipt and a drift event, and victim is never written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inverse_is_bound_to_the_write_it_undoes() {
    let s = start("").await;
    let auth = Some("Bearer agent-7");
    let victim = json!({"method": "PUT", "path": "/items/victim", "body": {"qty": 0}});
    // The grant.
    let (parts, doc) = post_json(
        &s.p,
        "/.well-known/ptcl/v1/leases",
        auth,
        &json!({"sor_target_uri": format!("{BASE}/items/mine"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": victim}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    assert_eq!(receipt_of(&parts, &doc)["code"], "ERR_INVERSE_TARGET");
    // A grant with its own inverse, then the inverse endpoint asked to swap in victim's.
    let own = json!({"method": "PUT", "path": "/items/mine", "body": {"qty": 5}});
    let (parts, lease) = post_json(
        &s.p,
        "/.well-known/ptcl/v1/leases",
        auth,
        &json!({"sor_target_uri": format!("{BASE}/items/mine"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": own}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::CREATED, "{lease}");
    let lease_id = lease["lease_id"].as_str().unwrap();
    let req = Request::put(s.p.url(&format!("/.well-known/ptcl/v1/leases/{lease_id}/inverse")))
        .header("content-type", "application/json")
        .header("authorization", "Bearer agent-7")
        .body(full(victim.to_string()))
        .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    // An agent-signed lease with the victim's inverse inline.
    let victim_bytes = serde_json::to_vec(&victim).unwrap();
    let (parts, doc) = leased_put(&s, "/items/mine", 1, &victim_bytes, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    assert_eq!(receipt_of(&parts, &doc)["kind"], "rejection");
    // A member of the written resource is another resource unless the write is a POST.
    let member = br#"{"method":"DELETE","path":"/items/mine/child"}"#;
    let (parts, doc) = leased_put(&s, "/items/mine", 1, member, "Bearer agent-7").await;
    assert_eq!(
        (parts.status, doc["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("ERR_INVERSE_TARGET"))
    );
    assert_eq!(puts_to(&s, "/items/"), 0, "the upstream saw no write");
    assert!(
        drift_codes(&s.p)
            .await
            .iter()
            .filter(|c| *c == "ERR_INVERSE_TARGET")
            .count()
            >= 3,
        "each refusal left a drift event"
    );
    // The write's own inverse goes through, and compensation fences the same resource.
    let own_bytes = serde_json::to_vec(&own).unwrap();
    let (parts, doc) = leased_put(&s, "/items/mine", 1, &own_bytes, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
}

/// Defect 2, the upgrade path: a lease committed before the binding rule, whose staged inverse
/// names another resource (as an old sidecar kept it in its store), is refused at
/// `compensate` with the code staging would get now: 422 `ERR_INVERSE_TARGET`, a rejection
/// receipt, a drift event; the SoR receives nothing and the other resource's fence stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_from_before_the_rule_with_an_inverse_elsewhere_is_refused_at_compensate() {
    use palisade::store::embedded::EmbeddedStore;
    use palisade::store::{Fences as _, LeaseRecord, WriteIntent};
    let dir = tempfile::tempdir().unwrap();
    let lease_id = "urn:uuid:00000000-0000-4000-8000-0000000000aa";
    {
        // The store as the previous version left it: the write committed at epoch 1, its
        // record without the write's method, its inverse a PUT of another item.
        let store = EmbeddedStore::open(
            &dir.path().join("state.redb"),
            sidecar_log("erp.example.com/palisade"),
        )
        .unwrap();
        let mine = format!("{BASE}/items/mine");
        let expires = palisade::clock::WallClock::now_ms() + 3_600_000;
        let record = LeaseRecord {
            path: Some("/items/mine".into()),
            ..LeaseRecord::committed(lease_id, &mine, 1, expires)
        };
        let inverse = br#"{"body":{"qty":0},"method":"PUT","path":"/items/victim"}"#.to_vec();
        store
            .advance(WriteIntent {
                resource: mine,
                epoch: 1,
                lease_id: lease_id.to_owned(),
                expires_at_ms: expires,
                lease_record: record,
                inverse: Some(inverse),
                snapshot: None,
            })
            .await
            .unwrap();
    }
    let s = start_in(Upstream::start().await, dir, "");
    let req = Request::post(s.p.url(&format!(
        "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
    )))
    .header("authorization", "Bearer agent-7")
    .body(full(""))
    .unwrap();
    let (parts, bytes) = send(&http1_client(), req).await;
    let doc: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
    let receipt = receipt_of(&parts, &doc);
    assert_eq!(
        (receipt["kind"].as_str(), receipt["code"].as_str()),
        (Some("rejection"), Some("ERR_INVERSE_TARGET"))
    );
    assert!(
        drift_codes(&s.p)
            .await
            .contains(&"ERR_INVERSE_TARGET".to_owned()),
        "a drift event"
    );
    assert!(s.upstream.requests().is_empty(), "the SoR received nothing");
    let victim = format!("/admin/v1/fences/{}", "%2Fitems%2Fvictim");
    let (status, text) = admin_get(s.p.admin, &victim).await;
    assert_eq!(status, StatusCode::OK, "{text}");
    assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["epoch"], 0);
}

/// Defect 6, and the compensate half of defect 2: `compensate` is a write like any other. A
/// freeze of the resource stops it (423, a receipt, the SoR receives nothing), and once lifted
/// the inverse is fenced with the resource's next epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compensate_is_stopped_by_a_freeze_and_fenced_forward() {
    let s = start("").await;
    let inverse = br#"{"method":"DELETE","path":"/items/undo"}"#;
    let (parts, doc) = leased_put(&s, "/items/undo", 7, inverse, "Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    let lease_id = receipt_of(&parts, &doc)["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, made) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON],
        r#"{"scope":"resource","value":"/items/undo","reason":"incident 54"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    let compensate = |auth: &'static str| {
        let url = s.p.url(&format!(
            "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
        ));
        async move {
            let req = Request::post(url)
                .header("authorization", auth)
                .body(full(""))
                .unwrap();
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::LOCKED, "{doc}");
    assert_eq!(doc["code"], "ERR_FROZEN");
    assert_eq!(doc["freeze_id"], made["id"]);
    assert_eq!(receipt_of(&parts, &doc)["code"], "ERR_FROZEN");
    let deletes = || {
        s.upstream
            .requests()
            .iter()
            .filter(|r| r.method == "DELETE")
            .count()
    };
    assert_eq!(deletes(), 0, "the SoR received no inverse");
    // A freeze of the lease holder stops it too.
    let id = made["id"].as_str().unwrap();
    admin_call(
        &s.p,
        "DELETE",
        &format!("/admin/v1/freeze/{id}"),
        &[JSON],
        "",
    )
    .await;
    let caller = palisade_policy::caller::authorization_caller(b"Bearer agent-7");
    let (status, _) = admin_call(
        &s.p,
        "POST",
        "/admin/v1/freeze",
        &[JSON],
        &json!({"scope": "caller", "value": caller, "reason": "holder"}).to_string(),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(
        (parts.status, doc["code"].as_str()),
        (StatusCode::LOCKED, Some("ERR_FROZEN"))
    );
    assert_eq!(deletes(), 0);
    for f in freezes(&s.p, &[]).await {
        let id = f["id"].as_str().unwrap();
        admin_call(
            &s.p,
            "DELETE",
            &format!("/admin/v1/freeze/{id}"),
            &[JSON],
            "",
        )
        .await;
    }
    let (parts, doc) = compensate("Bearer agent-7").await;
    assert_eq!(parts.status, StatusCode::OK, "{doc}");
    assert_eq!(deletes(), 1);
    let sent = s
        .upstream
        .requests()
        .into_iter()
        .find(|r| r.method == "DELETE")
        .unwrap();
    assert_eq!(sent.path_and_query, "/items/undo");
    assert_eq!(
        sent.headers["agent-fence-token"], "8",
        "the next epoch, never an older one"
    );
}

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

// ---- MCP, with the official SDK on both sides -----------------------------------------------

use crate::mcp::{client, client_with_headers, meta, tool_lease, McpServer};
use support::bundles::*;

/// A tool lease (the `_meta.compensationLease` object) whose inverse is `inverse`.
fn tool_lease_naming(tool: &str, epoch: u64, inverse: &Value) -> Value {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let digest = inverse_digest(inverse.to_string().as_bytes());
    let b64 = lease_for(&agent, &format!("/mcp/tools/{tool}"), epoch, |f| {
        f.insert("inverse_payload_jcs_hash".into(), json!(digest.to_string()));
    });
    serde_json::from_slice(&URL_SAFE_NO_PAD.decode(b64).unwrap()).unwrap()
}

/// Defect 2 (high), MCP: a `set_stock` lease whose inverse names another tool made the server
/// receive `tools/call wipe_all` on compensation. The call is refused where the inverse is
/// staged (inline, and by the authority), with a receipt; its own tool's inverse passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_calls_inverse_is_a_call_of_the_same_tool() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = crate::mcp::erp_tools(dir.path());
    let p = crate::mcp::sidecar(&server, &b);
    let wipe = json!({"tool": "wipe_all", "arguments": {}});
    let steps = json!([
        {"op": "call", "name": "set_stock", "args": {"sku": "A", "qty": 1},
         "meta": {"compensationLease": tool_lease_naming("set_stock", 1, &wipe),
                  "compensationInverse": wipe}},
        {"op": "call", "name": "set_stock", "args": {"sku": "A", "qty": 2},
         "meta": meta(tool_lease("set_stock", 1))},
    ]);
    let out = client(p.url("/mcp"), "2026-07-28", steps).await;
    let e = &out[0]["error"]["data"];
    assert_eq!(e["code"], "ERR_INVERSE_TARGET", "{out:?}");
    assert_receipt_verifies(&e["receipt"], "rejection");
    assert_eq!(out[1]["is_error"], false, "{out:?}");
    assert_eq!(
        server.executions(),
        vec!["set_stock A 2"],
        "only the bound call ran"
    );
    // The authority does not sign such a lease either.
    let (parts, doc) = post_json(
        &p,
        "/.well-known/ptcl/v1/leases",
        Some("Bearer agent-7"),
        &json!({"sor_target_uri": format!("{BASE}/mcp/tools/set_stock"),
                "recovery_mode": "COMPENSATING_ACTION", "t_req_ms": 60000,
                "inverse_payload": wipe}),
    )
    .await;
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_INVERSE_TARGET");
}

/// Defect 5: a freeze of a connection's agent-facing tool did nothing, as it was matched
/// against the legacy tool's name only. Either name now stops the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_freeze_of_a_connections_agent_facing_tool_stops_it() {
    let server = McpServer::start_with(&[("LEVEL_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let (b, _) = crate::connectors_mcp::bundle(dir.path());
    let p = crate::mcp::sidecar(&server, &b);
    let call = |epoch: u64| {
        json!([{"op": "call", "name": "stock.set", "args": {"sku": "SKU-1", "level": 5},
                "meta": meta(tool_lease("set_level", epoch))}])
    };
    for name in ["mcp:tool/stock.set", "mcp:tool/set_level"] {
        let body = json!({"scope": "operation", "value": name, "reason": "runaway"});
        let (status, made) =
            admin_call(&p, "POST", "/admin/v1/freeze", &[JSON], &body.to_string()).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let out = client(p.url("/mcp"), "2026-07-28", call(1)).await;
        let e = &out[0]["error"]["data"];
        assert_eq!(e["code"], "ERR_FROZEN", "{name}: {out:?}");
        assert_eq!(e["freeze_id"], made["id"], "{name}");
        assert_receipt_verifies(&e["receipt"], "rejection");
        let id = made["id"].as_str().unwrap();
        admin_call(&p, "DELETE", &format!("/admin/v1/freeze/{id}"), &[JSON], "").await;
    }
    assert!(server.executions().is_empty(), "nothing ran while frozen");
    let out = client(p.url("/mcp"), "2026-07-28", call(1)).await;
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(server.executions(), vec!["set_level SKU-1 5"]);
}

/// Defect 8: a read tool call passed `_meta.compensationLease` and `compensationInverse` to the
/// server, signature included. The server now receives the call without them (and with the
/// rest of `_meta` as sent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_tool_call_reaches_the_server_without_its_lease() {
    let server = McpServer::start_with(&[("PEEK_TOOL", "1")]).await;
    let dir = tempfile::tempdir().unwrap();
    let b = write_mcp_bundle(
        dir.path(),
        "urn:palisade:test:peek/1",
        &[(
            "peek",
            "peek",
            contract(json!("unknown"), "read", "reversible", "none"),
        )],
    );
    let p = crate::mcp::sidecar(&server, &b);
    let mut m = meta(tool_lease("peek", 1));
    m["x-kept"] = json!("yes");
    let steps = json!([{"op": "call", "name": "peek", "args": {}, "meta": m}]);
    for mode in ["2026-07-28", "legacy"] {
        let out = client(p.url("/mcp"), mode, steps.clone()).await;
        assert_eq!(out[0]["is_error"], false, "{mode}: {out:?}");
    }
    let seen = server.executions();
    assert_eq!(seen.len(), 2, "{seen:?}");
    for line in seen {
        assert!(line.contains("x-kept"), "the rest of _meta arrives: {line}");
        assert!(
            !line.contains("compensation"),
            "no lease or inverse: {line}"
        );
    }
}

/// A sidecar in front of `server` with `mcp.allowed_origins`.
fn sidecar_allowing(server: &McpServer, bundle: &BundleFiles, origins: &str) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let upstream_url = format!("http://127.0.0.1:{}", server.port());
    let text = write_config_for(
        &upstream_url,
        dir.path(),
        "",
        &format!(
            "[mcp]\npath = \"/mcp\"\nallowed_origins = {origins}\n{}",
            bundle.rich_toml("")
        ),
    );
    Palisade::start_in(dir, &text)
}

/// Defect 10: the MCP transport's DNS-rebinding rule. A request to `mcp.path` with an `Origin`
/// not in `mcp.allowed_origins` is refused 403 `ERR_ORIGIN_NOT_ALLOWED` (a JSON-RPC error
/// with no id), whatever its method; a listed origin, in any spelling, passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_request_from_another_origin_is_refused() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let b = crate::mcp::erp_tools(dir.path());
    // The SDK server checks Origin itself (against localhost); the sidecar's list is the
    // operator's, checked first.
    let p = sidecar_allowing(&server, &b, r#"["http://localhost:8080"]"#);
    let list = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {}}}});
    let raw = |method: &str, origin: &str| {
        let mut r = Request::builder()
            .method(method)
            .uri(p.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/list");
        if !origin.is_empty() {
            r = r.header("origin", origin);
        }
        r.body(full(if method == "POST" {
            list.to_string()
        } else {
            String::new()
        }))
        .unwrap()
    };
    for origin in [
        "http://evil.example",
        "null",
        "http://localhost.evil.example:8080",
        "http://localhost:8081",
        "https://localhost:8080",
    ] {
        for method in ["POST", "GET", "DELETE"] {
            let (parts, bytes) = send(&http1_client(), raw(method, origin)).await;
            let doc: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            assert_eq!(
                parts.status,
                StatusCode::FORBIDDEN,
                "{method} {origin}: {doc}"
            );
            assert_eq!(
                doc["error"]["data"]["code"], "ERR_ORIGIN_NOT_ALLOWED",
                "{doc}"
            );
            assert_eq!(doc["id"], Value::Null);
        }
    }
    let (parts, bytes) = send(&http1_client(), raw("POST", "http://localhost:8080")).await;
    assert_eq!(
        parts.status,
        StatusCode::OK,
        "{}",
        String::from_utf8_lossy(&bytes)
    );
    // Another spelling of the listed origin passes the sidecar (the server judges it then).
    let (_, bytes) = send(&http1_client(), raw("POST", "HTTP://LOCALHOST:8080")).await;
    assert!(!String::from_utf8_lossy(&bytes).contains("ERR_ORIGIN_NOT_ALLOWED"));
    // The official client, sending a listed Origin on every request, works as before.
    let steps = json!([{"op": "call", "name": "set_stock", "args": {"sku": "O", "qty": 3},
                        "meta": meta(tool_lease("set_stock", 1))}]);
    let out = client_with_headers(
        p.url("/mcp"),
        "legacy",
        steps,
        json!({"Origin": "http://localhost:8080"}),
    )
    .await;
    assert_eq!(out[0]["is_error"], false, "{out:?}");
    assert_eq!(server.executions(), vec!["set_stock O 3"]);
    // With no list, any Origin is refused (the default is none).
    let q = crate::mcp::sidecar(&server, &b);
    let (parts, _) = send(
        &http1_client(),
        Request::post(q.url("/mcp"))
            .header("content-type", "application/json")
            .header("origin", "http://localhost:8080")
            .body(full(list.to_string()))
            .unwrap(),
    )
    .await;
    assert_eq!(parts.status, StatusCode::FORBIDDEN);
}
