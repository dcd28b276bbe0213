//! Imported contracts enforced by a running sidecar: the document's examples, asserted
//! formats, parameters on reads and writes.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn examples_meet_the_imported_contracts_through_a_running_sidecar() {
    let mut all = Tally::default();
    for (doc, _) in DOCS {
        all.add(examples_through_a_sidecar(&testdata(doc)).await);
    }
    // The documents' examples include both kinds; the test must have seen both.
    assert!(
        all.forwarded >= 4 && all.refused >= 4 && all.mutations >= 20,
        "{all:?}"
    );
    eprintln!("Xero examples: {all:?}");
}

/// `--assert-formats` reaches the data plane: a malformed uuid in a body is refused only when
/// the contract asserts formats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asserted_formats_are_checked_by_the_sidecar() {
    let client = http1_client();
    // The document's own example for createAssetType, with one account id malformed.
    let body = serde_json::json!({
        "assetTypeName": "Machinery11004",
        "fixedAssetAccountId": "not-a-uuid",
        "depreciationExpenseAccountId": "d1602f69-f900-4616-8d34-90af393fa368",
        "accumulatedDepreciationAccountId": "9195cadd-8645-41e6-9f67-7bcd421defe8",
        "bookDepreciationSetting": {"depreciationMethod": "DiminishingValue100",
            "averagingMethod": "ActualDays", "depreciationRate": 0.05,
            "depreciationCalculationMethod": "None"}
    });
    let bytes = serde_json::to_vec(&body).unwrap();
    for (assert_formats, want) in [
        (false, StatusCode::OK),
        (true, StatusCode::UNPROCESSABLE_ENTITY),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let mut args = vec![
            "--reversibility",
            "createAssetType=compensable",
            "--operations",
            "createAssetType",
        ];
        if assert_formats {
            args.push("--assert-formats");
        }
        import(&testdata("xero_assets.yaml"), dir.path(), &args);
        let s = enforcing(&BundleFiles::in_dir(dir.path())).await;
        let path = "/assets.xro/1.0/AssetTypes";
        let req = leased(&s.p, "POST", path, 1)
            .header("xero-tenant-id", TENANT)
            .body(full(bytes.clone()))
            .unwrap();
        let (parts, answer) = send(&client, req).await;
        let writes = s
            .upstream
            .requests()
            .iter()
            .filter(|r| r.method == "POST")
            .count();
        if assert_formats {
            assert_eq!(parts.status, want, "{}", String::from_utf8_lossy(&answer));
            let problem: Value = serde_json::from_slice(&answer).unwrap();
            assert_eq!(problem["code"], "ERR_CONTRACT_INPUT");
            assert_eq!(problem["violationLocation"], "/fixedAssetAccountId");
            assert_eq!(writes, 0, "nothing forwarded");
        } else {
            assert_ne!(
                parts.status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{}",
                String::from_utf8_lossy(&answer)
            );
            assert_eq!(writes, 1, "a format is an annotation by default: forwarded");
        }
    }
}

/// The imported path and query parameters (`structural.parameters`) are checked on the data
/// plane: a read with a query value its schema refuses, or a write whose path parameter is not
/// a uuid when formats are asserted, is 422 with the parameter's location, and reaches no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_parameters_are_checked_on_reads_and_writes() {
    let dir = tempfile::tempdir().unwrap();
    import(
        &testdata("xero-projects.yaml"),
        dir.path(),
        &[
            "--assert-formats",
            "--reversibility",
            "patchProject=compensable",
        ],
    );
    let s = enforcing(&BundleFiles::in_dir(dir.path())).await;
    let client = http1_client();
    let get = |pq: &str| {
        Request::get(s.p.url(&format!("/projects.xro/2.0/Projects{pq}")))
            .header("xero-tenant-id", TENANT)
            .body(full(""))
            .unwrap()
    };
    // Within the schemas: forwarded as sent, query and all.
    let ok = "?pageSize=50&page=2&states=INPROGRESS&contactID=00000000-0000-0000-0000-000000000001";
    let (parts, _) = send(&client, get(ok)).await;
    assert_eq!(parts.status, StatusCode::OK);
    let seen = s.upstream.requests();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].path_and_query,
        format!("/projects.xro/2.0/Projects{ok}")
    );
    for (pq, location) in [
        ("?pageSize=abc", "/query/pageSize"),
        ("?pageSize=501", "/query/pageSize"),
        ("?pageSize=0", "/query/pageSize"),
        ("?page=1&page=2", "/query/page"),
        ("?contactID=not-a-uuid", "/query/contactID"),
    ] {
        let (parts, answer) = send(&client, get(pq)).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            parts.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{pq}: {doc}"
        );
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{pq}");
        assert_eq!(doc["violationLocation"], location, "{pq}");
        assert!(
            !doc.to_string().contains("not-a-uuid"),
            "no value echoed: {doc}"
        );
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    // The required header parameter: missing, or given twice (a scalar), refused with its
    // lower-case location, whatever spelling the request used.
    let url = s.p.url(&format!("/projects.xro/2.0/Projects{ok}"));
    let missing = Request::get(&url).body(full("")).unwrap();
    let twice = Request::get(&url)
        .header("Xero-Tenant-Id", TENANT)
        .header("XERO-TENANT-ID", "another")
        .body(full(""))
        .unwrap();
    // Bytes that are not text (obs-text, which HTTP/1.1 still carries): refused, not read lossily.
    let opaque = Request::get(&url)
        .header(
            "xero-tenant-id",
            http::HeaderValue::from_bytes(b"t\xfa\xfb").unwrap(),
        )
        .body(full(""))
        .unwrap();
    for req in [missing, twice, opaque] {
        let (parts, answer) = send(&client, req).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT");
        assert_eq!(doc["violationLocation"], "/header/xero-tenant-id", "{doc}");
        assert!(!doc.to_string().contains(TENANT) && !doc.to_string().contains("another"));
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "refused reads reached no one"
    );

    // A write: the path parameter is a uuid (formats asserted), the body is fine.
    let path = "/projects.xro/2.0/Projects/not-a-uuid";
    let req = leased(&s.p, "PATCH", path, 1)
        .header("xero-tenant-id", TENANT)
        .body(full(r#"{"status":"INPROGRESS"}"#))
        .unwrap();
    let (parts, answer) = send(&client, req).await;
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(parts.status, StatusCode::UNPROCESSABLE_ENTITY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{doc}");
    assert_eq!(doc["violationLocation"], "/path/projectId", "{doc}");
    assert!(
        !doc.to_string().contains("not-a-uuid"),
        "no value echoed: {doc}"
    );
    assert_receipt_verifies(&doc["receipt"], "rejection");
    assert_eq!(
        s.upstream.requests().len(),
        1,
        "the refused write reached no one"
    );
    let events = drift_events(&s.p);
    for location in [
        "/query/pageSize",
        "/path/projectId",
        "/header/xero-tenant-id",
    ] {
        assert!(
            events.iter().any(|e| e["violationLocation"] == location),
            "{location}: {events:?}"
        );
    }
}
