//! Issue 44, the second-generation bypasses: queries checked whole, h2 cookies, Host and
//! :authority, rate keys behind a proxy, access tokens in a query.

use super::*;

// ---- Issue 44: the second-generation bypasses ----

/// The sidecar in front of `up` with a bundle of two bound operations whose contracts check
/// query parameters: a read (`limit` ≤ 100) and a leased write (`mode` must be `safe`).
fn sidecar_with_query_contracts(up: &RawUpstream) -> Palisade {
    use serde_json::json;
    use support::bundles::{contract, write_bundle, DIALECT};
    let dir = tempfile::tempdir().unwrap();
    let mut list = contract(json!("unknown"), "read", "reversible", "none");
    list["structural"]["parameters"] = json!({"query": {"limit": {"required": false,
        "schema": {"$schema": DIALECT, "type": "integer", "minimum": 1, "maximum": 100}}}});
    let mut update = contract(json!("unknown"), "write", "compensable", "optional");
    update["structural"]["parameters"] = json!({"query": {"mode": {"required": true,
        "schema": {"$schema": DIALECT, "type": "string", "enum": ["safe"]}}}});
    let b = write_bundle(
        dir.path(),
        "urn:palisade:test:bypass/2",
        &[
            ("list", "GET /api/v2/items", list, None),
            ("update", "PUT /api/v2/items/{id}", update, None),
        ],
    );
    let text = write_config_for(&up.url(), dir.path(), "", &b.rich_toml(""));
    Palisade::start_in(dir, &text)
}

/// `n` distinct filler pairs, each followed by `&`.
fn filler(n: usize) -> String {
    (0..n).map(|i| format!("f{i}=1&")).collect()
}

/// A refusal as the client sees it: status, code, a verifying rejection receipt.
fn assert_refusal(a: &Answer, status: u16, code: &str, what: &str) {
    let doc = a.json();
    assert_eq!(a.status, status, "{what}: {doc}");
    assert_eq!(doc["code"], code, "{what}: {doc}");
    assert_eq!(
        doc["receipt"]["receipt"]["kind"], "rejection",
        "{what}: {doc}"
    );
    assert_receipt_verifies(&doc["receipt"], "rejection");
}

#[test]
fn a_query_is_checked_whole_or_refused_never_on_a_prefix() {
    // The documented bounds (docs/decisions.md), written out: the test holds the sidecar to
    // them rather than to whatever its constants say.
    const MAX_QUERY_PAIRS: usize = 1024;
    const MAX_QUERY_BYTES: usize = 16 * 1024;
    let up = RawUpstream::start();
    let p = sidecar_with_query_contracts(&up);
    let get = |q: &str| raw(&p, &format!("GET /api/v2/items?{q} HTTP/1.1"), "");
    let n = MAX_QUERY_PAIRS;
    // (query, status, code) at the bound and one either side of it; padding before a bad
    // value, and a name given twice around the padding.
    let refused = [
        (
            format!("{}limit=500", filler(n - 2)),
            422,
            "ERR_CONTRACT_INPUT",
        ), // n − 1 pairs
        (
            format!("{}limit=500", filler(n - 1)),
            422,
            "ERR_CONTRACT_INPUT",
        ), // n pairs
        (
            format!("{}limit=500", filler(n)),
            400,
            "ERR_QUERY_TOO_MANY_PAIRS",
        ), // n + 1
        (
            format!("limit=5&{}limit=500", filler(n - 2)),
            422,
            "ERR_CONTRACT_INPUT",
        ), // twice, n
        (
            format!("limit=5&{}limit=500", filler(n - 1)),
            400,
            "ERR_QUERY_TOO_MANY_PAIRS",
        ),
        (
            format!("limit=5&{}", filler(n)),
            400,
            "ERR_QUERY_TOO_MANY_PAIRS",
        ), // all good, n + 1
    ];
    for (q, status, code) in &refused {
        let a = get(q);
        assert_refusal(&a, *status, code, &format!("{} bytes", q.len()));
        if *code == "ERR_CONTRACT_INPUT" {
            assert_eq!(
                a.json()["violationLocation"],
                "/query/limit",
                "{}",
                a.json()
            );
        }
    }
    // Good values at the bound pass, and reach the upstream byte for byte.
    let good_at_bound = format!("{}limit=5", filler(n - 1));
    assert_eq!(get(&good_at_bound).status, 200);
    // Length: at MAX_QUERY_BYTES read and passed; one byte more refused 414.
    let long = |len: usize| format!("limit=5&x={}", "a".repeat(len - "limit=5&x=".len()));
    assert_eq!(get(&long(MAX_QUERY_BYTES)).status, 200);
    assert_refusal(
        &get(&long(MAX_QUERY_BYTES + 1)),
        414,
        "ERR_QUERY_TOO_LONG",
        "one byte over",
    );
    let reads: Vec<String> = up
        .requests()
        .into_iter()
        .filter(|r| r.starts_with("GET /api/v2/items?"))
        .collect();
    assert_eq!(reads.len(), 2, "only the good queries reached the upstream");
    assert!(reads[0].starts_with(&format!("GET /api/v2/items?{good_at_bound} HTTP/1.1\r\n")));
    let at_bytes = long(MAX_QUERY_BYTES);
    assert!(reads[1].starts_with(&format!("GET /api/v2/items?{at_bytes} HTTP/1.1\r\n")));

    // A leased write whose mode must be `safe`, padded past the old prefix.
    let put = |q: &str, epoch: u64| {
        let path = format!("/api/v2/items/1?{q}");
        raw(
            &p,
            &format!("PUT {path} HTTP/1.1\r\n{}", lease_headers(&path, epoch)),
            BODY,
        )
    };
    let a = put(&format!("mode=safe&{}mode=unsafe", filler(n - 2)), 1);
    assert_refusal(&a, 422, "ERR_CONTRACT_INPUT", "mode twice");
    assert_eq!(a.json()["violationLocation"], "/query/mode");
    let a = put(&format!("mode=safe&{}mode=unsafe", filler(n - 1)), 1);
    assert_refusal(&a, 400, "ERR_QUERY_TOO_MANY_PAIRS", "mode twice, n + 1");
    assert!(up.writes().is_empty(), "upstream saw {:?}", up.writes());
    let a = put("mode=safe", 1);
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let writes = up.writes();
    assert_eq!(writes.len(), 1);
    assert!(writes[0].starts_with("PUT /api/v2/items/1?mode=safe HTTP/1.1\r\n"));
    assert!(writes[0].ends_with(BODY));

    // Every refusal left a drift event naming its code, and none names a value it refused.
    let events = drift_events(&p);
    for code in [
        "ERR_CONTRACT_INPUT",
        "ERR_QUERY_TOO_MANY_PAIRS",
        "ERR_QUERY_TOO_LONG",
    ] {
        assert!(
            events.iter().any(|e| e["code"] == code),
            "{code}: {events:?}"
        );
    }
    let text = serde_json::to_string(&events).unwrap();
    assert!(
        !text.contains("unsafe") && !text.contains("limit=500"),
        "{text}"
    );
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok, "{out}{err}");
}

/// The `Cookie` lines of a request as the upstream received it.
fn cookie_lines(request: &str) -> Vec<&str> {
    request
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("cookie:"))
        .collect()
}

#[test]
fn h2_cookie_fields_reach_an_http1_upstream_as_one_header() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    let answer = futures_block(async {
        let client = h2c_client();
        let mut req = http::Request::get(p.url("/api/v2/items/1"))
            .body(full(""))
            .unwrap();
        for c in ["a=1", "b=2", "session=xyz"] {
            req.headers_mut()
                .append(http::header::COOKIE, c.parse().unwrap());
        }
        send(&client, req).await
    });
    assert_eq!(answer.0.status, 200);
    let read = up.requests().pop().unwrap();
    let cookies = cookie_lines(&read);
    assert_eq!(cookies, ["cookie: a=1; b=2; session=xyz"], "{read}");

    // A write's pre-image is fetched with every cookie too, and the write carries them.
    let answer = futures_block(async {
        let client = h2c_client();
        let mut req = http::Request::put(p.url("/api/v2/items/2"))
            .header(
                "agent-compensation-lease",
                lease_for(&agent(), "/api/v2/items/2", 1, |_| {}),
            )
            .header(
                "agent-compensation-inverse",
                URL_SAFE_NO_PAD.encode(inverse_for("/api/v2/items/2")),
            )
            .body(full(BODY))
            .unwrap();
        for c in ["a=1", "b=2"] {
            req.headers_mut()
                .append(http::header::COOKIE, c.parse().unwrap());
        }
        send(&client, req).await
    });
    assert_eq!(
        answer.0.status,
        200,
        "{}",
        String::from_utf8_lossy(&answer.1)
    );
    let seen = up.requests();
    let last_two = &seen[seen.len() - 2..];
    assert!(last_two[0].starts_with("GET /api/v2/items/2 HTTP/1.1\r\n"));
    assert!(last_two[1].starts_with("PUT /api/v2/items/2 HTTP/1.1\r\n"));
    for r in last_two {
        let cookies = cookie_lines(r);
        assert_eq!(cookies, ["cookie: a=1; b=2"], "{r}");
    }
    // Two Cookie lines on HTTP/1.1 are joined the same way.
    let a = raw(
        &p,
        "GET /api/v2/items/3 HTTP/1.1\r\nCookie: a=1\r\nCookie: b=2",
        "",
    );
    assert_eq!(a.status, 200);
    let read = up.requests().pop().unwrap();
    let cookies = cookie_lines(&read);
    assert_eq!(cookies, ["cookie: a=1; b=2"], "{read}");
}

#[test]
fn host_and_authority_must_name_one_host() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    // HTTP/1.1 absolute form naming another host than Host: refused before anything.
    let a = raw(&p, "GET http://other.example/api/v2/items/1 HTTP/1.1", "");
    assert_refusal(&a, 400, "ERR_AUTHORITY_MISMATCH", "absolute form");
    let a = raw(
        &p,
        &format!(
            "PUT http://other.example/api/v2/items/1 HTTP/1.1\r\n{}",
            lease_headers("/api/v2/items/1", 1)
        ),
        BODY,
    );
    assert_refusal(&a, 400, "ERR_AUTHORITY_MISMATCH", "absolute form write");
    assert!(up.requests().is_empty(), "upstream saw {:?}", up.requests());
    // The same host, in another case and with the default port: one host.
    let a = raw(
        &p,
        "GET http://ERP.example.com:80/api/v2/items/1 HTTP/1.1",
        "",
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let read = up.requests().pop().unwrap();
    assert!(
        read.starts_with("GET /api/v2/items/1 HTTP/1.1\r\n"),
        "{read}"
    );

    // HTTP/2: `:authority` (the URI's, 127.0.0.1:port) and a `host` field that differ are
    // refused; the same host in both passes.
    let h2 = |host: String| {
        futures_block(async {
            let req = http::Request::get(p.url("/api/v2/items/1"))
                .header(http::header::HOST, host)
                .body(full(""))
                .unwrap();
            let (parts, body) = send(&h2c_client(), req).await;
            assert_eq!(parts.version, http::Version::HTTP_2);
            let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            (parts.status.as_u16(), doc)
        })
    };
    let before = up.requests().len();
    let (status, doc) = h2("erp.example.com".into());
    assert_eq!(
        (status, doc["code"].as_str()),
        (400, Some("ERR_AUTHORITY_MISMATCH")),
        "{doc}"
    );
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(up.requests().len(), before, "refused before the upstream");
    let (status, doc) = h2(format!("127.0.0.1:{}", p.data.port()));
    assert_eq!(status, 200, "{doc}");
    assert_eq!(up.requests().len(), before + 1);
    let events = drift_events(&p);
    assert!(events.iter().any(|e| e["code"] == "ERR_AUTHORITY_MISMATCH"));
}

#[test]
fn a_client_behind_the_proxy_does_not_choose_its_rate_key() {
    let up = RawUpstream::start();
    const KERNEL: &str = "0x9d25A874f046185d9237Cd4954C88D2B74B0021b";
    let tx = format!("0x{}", "ab".repeat(32));
    let post = |p: &Palisade, headers: &str| {
        raw(
            p,
            &format!("POST /quote-channel/84532/{tx} HTTP/1.1\r\nContent-Type: application/json\r\n{headers}"),
            "{}",
        )
    };
    for (mode, chosen_by_client, set_by_proxy) in [
        (
            "x-forwarded-for",
            "Forwarded: for=198.51.100.{i}",
            "X-Forwarded-For: 203.0.113.9",
        ),
        (
            "forwarded",
            "X-Forwarded-For: 198.51.100.{i}",
            "Forwarded: for=203.0.113.9",
        ),
    ] {
        let aip2 = format!(
            "[aip2]\nkernels = {{ 84532 = \"{KERNEL}\" }}\ntrusted_proxies = [\"127.0.0.1\"]\n\
             trusted_proxy_header = \"{mode}\"\nrate_limit = 3\n"
        );
        let p = sidecar(&up, &aip2);
        // The sidecar's peer (127.0.0.1) is the trusted proxy. A client that writes the
        // header the proxy does not set, another value each time, is still one client.
        let answers: Vec<Answer> = (1..=4)
            .map(|i| {
                let mine = chosen_by_client.replace("{i}", &i.to_string());
                post(&p, &format!("{mine}\r\n{set_by_proxy}"))
            })
            .collect();
        let statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
        assert_eq!(statuses, [400, 400, 400, 429], "{mode}");
        // The first refusal of the window carries its receipt (docs/decisions.md).
        assert_refusal(&answers[3], 429, "ERR_RATE_LIMITED", mode);
        assert!(!answers[3].header("retry-after").is_empty());
        let a = post(&p, set_by_proxy);
        assert_eq!(a.status, 429, "{mode}");
        assert_eq!(a.json()["code"], "ERR_RATE_LIMITED");
        // Another client behind the same proxy has its own window.
        let other = set_by_proxy.replace("203.0.113.9", "203.0.113.10");
        assert_eq!(post(&p, &other).status, 400, "{mode}");
        let events = drift_events(&p);
        assert!(
            events.iter().any(|e| e["code"] == "ERR_RATE_LIMITED"),
            "{mode}"
        );
    }
    assert!(up.requests().is_empty(), "upstream saw {:?}", up.requests());
}

#[test]
fn with_admission_on_a_query_access_token_is_refused_and_never_forwarded() {
    let up = RawUpstream::start();
    let jwks_dir = tempfile::tempdir().unwrap();
    let jwks = jwks_dir.path().join("jwks.json");
    let x = URL_SAFE_NO_PAD.encode(agent().public().to_bytes());
    std::fs::write(
        &jwks,
        format!(r#"{{"keys":[{{"kty":"OKP","crv":"Ed25519","x":"{x}","kid":"k1"}}]}}"#),
    )
    .unwrap();
    // Admission decides against a bundle: the sample SoR's.
    palisade::cli::sample_bundle::write(jwks_dir.path()).unwrap();
    let d = jwks_dir.path().display();
    let admission = format!(
        "[rich]\nlockfile = \"{d}/lock.json\"\ncontracts = \"{d}/contracts\"\n\
         unbound_writes = \"allow\"\n\
         [admission]\nmode = \"required\"\nresource = \"{BASE}\"\njwks = [\"{}\"]\n\
         issuers = [\"https://as.example.com\"]\n",
        jwks.display()
    );
    let p = sidecar(&up, &admission);
    const SECRET: &str = "s3cr3t-t0ken-value";
    for q in [
        format!("access_token={SECRET}"),
        format!("a=1&access%5Ftoken={SECRET}"),
        format!("%61ccess_token={SECRET}"),
        format!("{}access_token={SECRET}", filler(2000)),
    ] {
        let a = raw(&p, &format!("GET /api/v2/items/1?{q} HTTP/1.1"), "");
        assert_refusal(&a, 400, "ERR_TOKEN_IN_QUERY", &q[..q.len().min(40)]);
        let a = raw(
            &p,
            &format!(
                "PUT /api/v2/items/1?{q} HTTP/1.1\r\nAuthorization: Bearer x\r\n{}",
                lease_headers(&format!("/api/v2/items/1?{q}"), 1)
            ),
            BODY,
        );
        assert_refusal(&a, 400, "ERR_TOKEN_IN_QUERY", "a write");
    }
    assert!(up.requests().is_empty(), "upstream saw {:?}", up.requests());
    // The name as a value, or another name, is not a token (an unbound read: admission does
    // not apply to it, so it passes without one).
    let a = raw(
        &p,
        "GET /status?q=access_token&access_tokens=1 HTTP/1.1",
        "",
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    assert!(up.requests()[0].starts_with("GET /status?q=access_token&access_tokens=1 HTTP/1.1\r\n"));
    let events = drift_events(&p);
    let refused = events
        .iter()
        .filter(|e| e["code"] == "ERR_TOKEN_IN_QUERY")
        .count();
    assert_eq!(refused, 8, "{events:?}");
    assert!(!serde_json::to_string(&events).unwrap().contains(SECRET));
    assert!(!p.logs().contains(SECRET), "the token reached the logs");
    drop(p);
    // Without [admission] the sidecar takes no tokens, and the query is the SoR's business.
    let p = sidecar(&up, "");
    let a = raw(
        &p,
        &format!("GET /status?access_token={SECRET} HTTP/1.1"),
        "",
    );
    assert_eq!(a.status, 200);
}
