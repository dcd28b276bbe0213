use super::*;
use proptest::prelude::*;

use crate::net::conn::ConnInfo;
use crate::net::rewrite::build_upstream_request;
use crate::net::upstream::Upstream;

fn config() -> Config {
    Config::parse("[upstream]\nurl = \"http://127.0.0.1:9\"\n", "t.toml").expect("config")
}

fn parts(method: &str, target: &str) -> http::request::Parts {
    http::Request::builder()
        .method(method)
        .uri(target)
        .body(())
        .expect("request")
        .into_parts()
        .0
}

fn bundle() -> palisade_rich::Bundle {
    let dir = tempfile::tempdir().expect("tempdir");
    crate::cli::sample_bundle::write(dir.path()).expect("bundle written");
    crate::control::bundle::load(
        &dir.path().join("lock.json"),
        &dir.path().join("contracts"),
        None,
    )
    .expect("bundle compiles")
}

#[test]
fn the_rewritten_target_keeps_the_query_as_sent() {
    let c = config();
    let mut p = parts("PUT", "/api/v2/allocations/zz/%2e%2e/X?a=%2f&b=..");
    assert_eq!(
        prepare(&c, &mut p, true).expect("prepared"),
        MethodClass::Write
    );
    assert_eq!(
        p.uri.path_and_query().map(|pq| pq.as_str()),
        Some("/api/v2/allocations/X?a=%2f&b=..")
    );
}

#[test]
fn refusals_name_their_code() {
    let c = config();
    let rows = [
        ("PUT", "/a/%2F/b", ErrorCode::PathNotCanonical),
        ("GET", "/../etc/passwd", ErrorCode::PathNotCanonical),
        ("put", "/a", ErrorCode::MethodNotCanonical),
        ("CONNECT", "/a", ErrorCode::MethodNotAllowed),
        ("TRACE", "/a", ErrorCode::MethodNotAllowed),
    ];
    for (m, t, code) in rows {
        let mut p = parts(m, t);
        assert_eq!(
            prepare(&c, &mut p, true).map_err(|r| r.code),
            Err(code),
            "{m} {t}"
        );
    }
    let mut p = parts("OPTIONS", "*");
    assert_eq!(
        prepare(&c, &mut p, true).expect("asterisk form"),
        MethodClass::Read
    );
}

#[test]
fn overrides_are_refused_on_writes_and_removed_from_reads() {
    let c = config();
    let mut w = parts("POST", "/a");
    w.headers
        .insert("x-http-method-override", "DELETE".parse().expect("value"));
    assert_eq!(
        prepare(&c, &mut w, true).map_err(|r| r.code),
        Err(ErrorCode::MethodOverride)
    );
    let mut r = parts("GET", "/a");
    r.headers
        .insert("X-Method-Override", "DELETE".parse().expect("value"));
    r.headers
        .insert("agent-fence-token", "99".parse().expect("value"));
    r.headers
        .insert("agent-commit-receipt", "forged".parse().expect("value"));
    assert_eq!(prepare(&c, &mut r, true).expect("read"), MethodClass::Read);
    assert!(r.headers.is_empty(), "{:?}", r.headers);
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just(".".to_owned()),
        Just("..".to_owned()),
        Just("%2e%2E".to_owned()),
        Just("api".to_owned()),
        Just("v2".to_owned()),
        Just("items".to_owned()),
        Just("%69tems".to_owned()),
        Just("allocations".to_owned()),
        "[A-Za-z0-9-]{1,4}",
        "(%[0-9a-fA-F]{2}){1,2}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Whatever the client's spelling, the binding a write is routed to, the resource its fence
    /// is kept under and the path the upstream receives come from the same value.
    #[test]
    fn routing_fence_and_forwarded_path_agree(segs in proptest::collection::vec(segment(), 1..7)) {
        let c = config();
        let b = bundle();
        let raw = format!("/{}", segs.join("/"));
        let Ok(uri) = raw.parse::<Uri>() else { return Ok(()) };
        let mut p = parts("PUT", "/");
        p.uri = uri;
        if prepare(&c, &mut p, true).is_err() {
            return Ok(());
        }
        let routed_on = p.uri.path().to_owned();
        let pq = p.uri.path_and_query().map_or("/", |x| x.as_str()).to_owned();
        let fence = palisade_policy::target::resource_key(
            &palisade_policy::target::request_target("https://erp.example.com", &pq).expect("target"),
        ).to_owned();
        let up = Upstream::with_base("http://127.0.0.1:9".parse().expect("uri"), c.upstream.connect_timeout, c.upstream.timeout, None).expect("upstream");
        let conn = ConnInfo::new("127.0.0.1:1".parse().expect("addr"), false, None, None);
        let sent = build_upstream_request(&up, p, crate::net::body::empty(), &conn, None).expect("forwardable");
        let forwarded = sent.uri().path().to_owned();
        prop_assert_eq!(&forwarded, &routed_on);
        prop_assert_eq!(fence, format!("https://erp.example.com{forwarded}"));
        // Routing the forwarded path again binds the same capability.
        let a = b.route("PUT", &routed_on).map(|cap| cap.name.clone());
        let z = b.route("PUT", &forwarded).map(|cap| cap.name.clone());
        prop_assert_eq!(a, z);
        // And the canonical value is a fixed point.
        let again = palisade_policy::path::canonical_path(&forwarded);
        prop_assert_eq!(again.as_deref(), Ok(forwarded.as_str()));
    }
}

#[test]
fn host_and_authority_are_one_host_or_refused() {
    let c = config();
    let with_host = |target: &str, host: &str| {
        let mut p = parts("GET", target);
        p.headers
            .insert(http::header::HOST, host.parse().expect("host"));
        prepare(&c, &mut p, true).map_err(|r| r.code)
    };
    let mismatch = Err(ErrorCode::AuthorityMismatch);
    assert_eq!(with_host("http://a.example/x", "b.example"), mismatch);
    assert_eq!(with_host("http://a.example/x", "a.example.evil"), mismatch);
    assert_eq!(with_host("http://a.example:8080/x", "a.example"), mismatch);
    assert_eq!(with_host("https://a.example/x", "a.example:80"), mismatch);
    assert_eq!(with_host("http://u@a.example/x", "a.example"), mismatch);
    for (target, host) in [
        ("http://a.example/x", "a.example"),
        ("http://A.Example/x", "a.example"),
        ("http://a.example:80/x", "a.example"),
        ("http://a.example/x", "a.example:80"),
        ("https://a.example:443/x", "a.example"),
        ("http://[::1]:80/x", "[::1]"),
        ("/x", "anything.example"),
    ] {
        assert_eq!(
            with_host(target, host),
            Ok(MethodClass::Read),
            "{target} {host}"
        );
    }
}

#[test]
fn cookie_lines_are_joined_into_one() {
    let c = config();
    let mut p = parts("GET", "/x");
    for v in ["a=1", "b=2", "c=3"] {
        p.headers
            .append(http::header::COOKIE, v.parse().expect("cookie"));
    }
    prepare(&c, &mut p, true).expect("prepared");
    let all: Vec<_> = p.headers.get_all(http::header::COOKIE).iter().collect();
    assert_eq!(all, ["a=1; b=2; c=3"]);
    // One line is left as it is.
    let mut p = parts("GET", "/x");
    p.headers
        .insert(http::header::COOKIE, "a=1;b=2".parse().expect("cookie"));
    prepare(&c, &mut p, true).expect("prepared");
    assert_eq!(p.headers[http::header::COOKIE], "a=1;b=2");
}
