//! The request Palisade checks is the request the SoR receives (issue: close the bypasses).
//!
//! Every test here speaks raw bytes on both sides: the client writes its request line by hand
//! (no HTTP library that would normalise anything) and the upstream is a TCP listener that
//! records the bytes it receives, so each assertion is about what actually crossed the wire.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use palisade_policy::keys::KeyPair;
use serde_json::Value;
use support::writes::*;
use support::*;

/// A raw HTTP/1.1 upstream: records every request's bytes (head and body) and answers
/// `{"ok":true}` (the pre-image the test leases name) with forged PTCL headers of its own.
struct RawUpstream {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

fn content_length(head: &[u8]) -> usize {
    String::from_utf8_lossy(head)
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0)
}

impl RawUpstream {
    fn start() -> RawUpstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
        let rec = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                let rec = rec.clone();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        // One request: its head, then Content-Length bytes of body.
                        let end = loop {
                            if let Some(e) = head_end(&buf) {
                                break e;
                            }
                            match conn.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        };
                        let want = end + content_length(&buf[..end]);
                        while buf.len() < want {
                            match conn.read(&mut chunk) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            }
                        }
                        rec.lock().unwrap().push(buf[..want].to_vec());
                        buf.drain(..want);
                        let answer =
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n\
                            agent-commit-receipt: forged-by-upstream\r\nagent-fence-token: 777\r\n\
                            content-length: 11\r\n\r\n{\"ok\":true}";
                        if conn.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        RawUpstream { addr, seen }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every request received so far, as text (the test bodies are ASCII).
    fn requests(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect()
    }

    /// Requests other than the sidecar's own pre-image GETs.
    fn writes(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| !r.starts_with("GET "))
            .collect()
    }
}

/// A sidecar in front of a raw upstream; `extra` is added to its config.
fn sidecar(up: &RawUpstream, extra: &str) -> Palisade {
    let dir = tempfile::tempdir().unwrap();
    let text = write_config_for(&up.url(), dir.path(), "", extra);
    Palisade::start_in(dir, &text)
}

struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    fn header(&self, name: &str) -> Vec<String> {
        self.head
            .lines()
            .filter_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case(name)
                    .then(|| v.trim().to_owned())
            })
            .collect()
    }
}

/// Sends `head` (request line and headers, without the blank line) and `body` as written,
/// with `Content-Length` and `Connection: close` added, and reads the answer.
fn raw(p: &Palisade, head: &str, body: &str) -> Answer {
    let mut s = TcpStream::connect(p.data).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let connection = if head.to_ascii_lowercase().contains("\r\nconnection:") {
        ""
    } else {
        "Connection: close\r\n"
    };
    write!(
        s,
        "{head}\r\nHost: erp.example.com\r\n{connection}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        if let Some(end) = head_end(&buf) {
            if buf.len() >= end + content_length(&buf[..end]) {
                break;
            }
        }
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let end = head_end(&buf).unwrap_or(buf.len());
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Answer {
        status,
        head,
        body: buf[end..].to_vec(),
    }
}

fn agent() -> KeyPair {
    KeyPair::from_seed(AGENT_SEED)
}

fn lease_headers(path: &str, epoch: u64) -> String {
    format!(
        "Agent-Compensation-Lease: {}\r\nAgent-Compensation-Inverse: {}",
        lease_for(&agent(), path, epoch, |_| {}),
        URL_SAFE_NO_PAD.encode(inverse_for(path))
    )
}

const BODY: &str = r#"{"qty":1150}"#;

#[test]
fn dot_segments_and_encodings_are_forwarded_as_checked() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    let spellings = [
        "/api/v2/allocations/zz/../X",
        "/api/v2/allocations/zz/%2e%2e/X",
        "/api/v2/allocations/zz/%2E%2E/X",
        "/api/v2/allocations/./X",
        "/api/v2/%61llocations/X",
        "/api/v2/allocations/%58",
        "//api/v2/allocations/X",
        "/api//v2/allocations//X",
    ];
    for (n, spelling) in spellings.iter().enumerate() {
        let epoch = n as u64 + 1;
        let a = raw(
            &p,
            &format!(
                "PUT {spelling} HTTP/1.1\r\n{}",
                lease_headers("/api/v2/allocations/X", epoch)
            ),
            BODY,
        );
        assert_eq!(
            a.status,
            200,
            "{spelling}: {}",
            String::from_utf8_lossy(&a.body)
        );
        let writes = up.writes();
        let last = writes.last().expect("the write reached the upstream");
        assert!(
            last.starts_with("PUT /api/v2/allocations/X HTTP/1.1\r\n"),
            "{spelling} was forwarded as {:?}",
            last.lines().next()
        );
        assert!(last.ends_with(BODY), "{spelling}: body changed");
    }
    assert_eq!(up.writes().len(), spellings.len());
    // Each spelling advanced the one fence of X.
    let (status, body) = futures_block(admin_get(
        p.admin,
        "/admin/v1/fences/%2Fapi%2Fv2%2Fallocations%2FX",
    ));
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains(&format!("\"epoch\":{}", spellings.len())),
        "{body}"
    );
}

#[test]
fn spellings_without_a_canonical_form_are_refused_and_reach_nothing() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    let spellings = [
        "/api/v2/allocations/a%2FX",
        "/api/v2/allocations/a%2fX",
        "/api/v2/allocations/a%5CX",
        "/api/v2/allocations/zz/..;/X",
        "/api/v2/allocations/zz/%2e%2e;/X",
        "/../api/v2/allocations/X",
        "/api/v2/allocations/X%00",
        "/api/v2/allocations/%C3X",
    ];
    for spelling in spellings {
        let a = raw(
            &p,
            &format!(
                "PUT {spelling} HTTP/1.1\r\n{}",
                lease_headers("/api/v2/allocations/X", 1)
            ),
            BODY,
        );
        assert_eq!(a.status, 400, "{spelling}");
        let doc = a.json();
        assert_eq!(doc["code"], "ERR_PATH_NOT_CANONICAL", "{spelling}: {doc}");
        assert_eq!(
            doc["receipt"]["receipt"]["kind"], "rejection",
            "{spelling}: {doc}"
        );
        assert_receipt_verifies(&doc["receipt"], "rejection");
        // The same spelling on a read is refused too: it would be no safer forwarded.
        let a = raw(&p, &format!("GET {spelling} HTTP/1.1"), "");
        assert_eq!(a.status, 400, "GET {spelling}");
    }
    // A raw backslash: refused by the sidecar (or by the HTTP parser before it), never passed.
    let a = raw(&p, "PUT /api/v2/allocations/zz\\..\\X HTTP/1.1", BODY);
    assert_eq!(a.status, 400);
    assert!(up.requests().is_empty(), "upstream saw {:?}", up.requests());
    let events = drift_events(&p);
    let refused = events
        .iter()
        .filter(|e| e["code"] == "ERR_PATH_NOT_CANONICAL")
        .count();
    assert!(refused >= spellings.len(), "{events:?}");
    // Events name no payload: not the path as sent.
    assert!(!serde_json::to_string(&events).unwrap().contains("%2e%2e;"));
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok, "{out}{err}");
}

#[test]
fn a_doubled_slash_does_not_split_the_fence() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    let a = raw(
        &p,
        &format!(
            "PUT /api/v2/allocations/X HTTP/1.1\r\n{}",
            lease_headers("/api/v2/allocations/X", 5)
        ),
        BODY,
    );
    assert_eq!(a.status, 200);
    // A lease for the doubled-slash spelling at an older epoch is stale for the same resource,
    // whether the request is spelled the same way or not.
    for path in ["//api/v2/allocations/X", "/api/v2/allocations/X"] {
        let a = raw(
            &p,
            &format!(
                "PUT {path} HTTP/1.1\r\n{}",
                lease_headers("//api/v2/allocations/X", 1)
            ),
            BODY,
        );
        assert_eq!(a.status, 409, "{path}");
        assert_eq!(a.json()["code"], "ERR_STALE_FENCE_EPOCH");
        assert_eq!(a.json()["current_epoch"], 5);
    }
    assert_eq!(up.writes().len(), 1);
}

#[test]
fn the_fence_token_upstream_is_the_sidecars_alone() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    // The client names the token as hop-by-hop and sends one of its own.
    let a = raw(
        &p,
        &format!(
            "PUT /api/v2/items/1 HTTP/1.1\r\nConnection: keep-alive, Agent-Fence-Token\r\n\
             Agent-Fence-Token: 999\r\n{}",
            lease_headers("/api/v2/items/1", 3)
        ),
        BODY,
    );
    assert_eq!(a.status, 200, "{}", String::from_utf8_lossy(&a.body));
    let write = up.writes().pop().unwrap();
    let tokens: Vec<&str> = write
        .lines()
        .filter(|l| l.to_ascii_lowercase().starts_with("agent-fence-token:"))
        .collect();
    assert_eq!(tokens, ["agent-fence-token: 3"], "{write}");
    assert!(!write.to_ascii_lowercase().contains("agent-compensation-"));
    // The upstream's forged receipt and token never reach the client: the receipt is ours.
    assert_eq!(a.header("agent-fence-token"), ["3"]);
    let receipts = a.header("agent-commit-receipt");
    assert_eq!(receipts.len(), 1);
    assert_ne!(receipts[0], "forged-by-upstream");

    // A client's token on a read never travels on, and the read's answer carries the real one.
    let a = raw(
        &p,
        "GET /api/v2/items/1 HTTP/1.1\r\nAgent-Fence-Token: 999",
        "",
    );
    assert_eq!(a.status, 200);
    let read = up.requests().pop().unwrap();
    assert!(
        !read.to_ascii_lowercase().contains("agent-fence-token"),
        "{read}"
    );
    assert_eq!(a.header("agent-fence-token"), ["3"]);
    assert!(a.header("agent-commit-receipt").is_empty());
}

#[test]
fn methods_fail_closed() {
    let up = RawUpstream::start();
    let p = sidecar(&up, "");
    // Case variants of a known method: refused, not forwarded unenforced.
    for m in ["put", "Put", "delete", "get"] {
        let a = raw(&p, &format!("{m} /api/v2/items/1 HTTP/1.1"), BODY);
        assert_eq!(a.status, 400, "{m}");
        assert_eq!(a.json()["code"], "ERR_METHOD_NOT_CANONICAL", "{m}");
        assert_eq!(a.json()["receipt"]["receipt"]["kind"], "rejection", "{m}");
    }
    // Unknown and WebDAV methods are writes: they need a lease like any other.
    for m in [
        "MERGE",
        "PROPPATCH",
        "MKCOL",
        "MOVE",
        "COPY",
        "LOCK",
        "PURGE",
        "FROB",
    ] {
        let a = raw(&p, &format!("{m} /api/v2/items/1 HTTP/1.1"), BODY);
        assert_eq!(a.status, 428, "{m}");
        assert_eq!(a.json()["code"], "ERR_LEASE_REQUIRED", "{m}");
    }
    // CONNECT and TRACE are never forwarded.
    let a = raw(&p, "CONNECT erp.internal:443 HTTP/1.1", "");
    assert_eq!(a.status, 405);
    assert_eq!(a.json()["code"], "ERR_METHOD_NOT_ALLOWED");
    let a = raw(&p, "TRACE /api/v2/items/1 HTTP/1.1", "");
    assert_eq!(a.status, 405);
    // A write asking for another method is refused; a read loses the header.
    let a = raw(
        &p,
        &format!(
            "POST /api/v2/items HTTP/1.1\r\nX-HTTP-Method-Override: DELETE\r\n{}",
            lease_headers("/api/v2/items", 1)
        ),
        BODY,
    );
    assert_eq!(a.status, 400);
    assert_eq!(a.json()["code"], "ERR_METHOD_OVERRIDE");
    assert!(up.requests().is_empty(), "upstream saw {:?}", up.requests());
    let a = raw(
        &p,
        "GET /api/v2/items/1 HTTP/1.1\r\nX-HTTP-Method-Override: DELETE\r\nX-HTTP-Method: PUT",
        "",
    );
    assert_eq!(a.status, 200);
    let read = up.requests().pop().unwrap();
    assert!(
        read.starts_with("GET /api/v2/items/1 HTTP/1.1\r\n"),
        "{read}"
    );
    assert!(!read.to_ascii_lowercase().contains("method"), "{read}");
    // A configured safe method is a read; anything else, however spelled, is not.
    drop(p);
    let p = sidecar(
        &up,
        "[ptcl]\nreads = [\"GET\", \"HEAD\", \"OPTIONS\", \"PROPFIND\"]\n",
    );
    let a = raw(&p, "PROPFIND /api/v2/items/1 HTTP/1.1", "");
    assert_eq!(a.status, 200);
    let a = raw(&p, "propfind /api/v2/items/1 HTTP/1.1", "");
    assert_eq!(a.status, 400);
}

/// Runs a future to completion on a small runtime (the admin helpers are async).
fn futures_block<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn a_bound_operation_is_routed_by_its_canonical_path() {
    let up = RawUpstream::start();
    let dir = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(dir.path()).unwrap();
    let d = dir.path().display();
    let rich = format!(
        "[rich]\nlockfile = \"{d}/lock.json\"\ncontracts = \"{d}/contracts\"\nunbound_writes = \"allow\"\n"
    );
    let text = write_config_for(&up.url(), dir.path(), "", &rich);
    let p = Palisade::start_in(dir, &text);
    // Another spelling of a bound path meets the same input contract: a body it refuses is
    // refused, not forwarded as an unbound write.
    for spelling in [
        "/api/v2/items/1",
        "/api/v2/%69tems/1",
        "/api/v2/x/../items/1",
        "//api/v2/items/1",
    ] {
        let a = raw(
            &p,
            &format!(
                "PUT {spelling} HTTP/1.1\r\n{}",
                lease_headers("/api/v2/items/1", 1)
            ),
            r#"{"qty":"not a number"}"#,
        );
        assert_eq!(
            a.status,
            422,
            "{spelling}: {}",
            String::from_utf8_lossy(&a.body)
        );
        assert_eq!(a.json()["code"], "ERR_CONTRACT_INPUT", "{spelling}");
    }
    assert!(up.writes().is_empty(), "upstream saw {:?}", up.writes());
}

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
