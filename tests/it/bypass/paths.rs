//! The first-generation bypasses: dot segments and encodings, spellings with no canonical
//! form, doubled slashes, the fence token upstream, methods, bound operations by canonical path.

use super::*;

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
