//! Every `$ref` form followed, and what cannot be named.

use super::*;

/// Issue 37: a document using every `$ref` form (`tests/openapi/refs.yaml`) imports with no
/// operation unchecked because of a `$ref` it could follow; the two it cannot follow (another
/// document, a dangling ref) are listed with their reason; the summary line says so; and an
/// operation whose body, parameters and responses all come by `$ref` is checked end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ref_form_is_followed_and_what_cannot_be_is_named() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/openapi/refs.yaml");
    let dir = tempfile::tempdir().unwrap();
    let run = Command::new(bin())
        .args(["lock", "import-openapi"])
        .arg(&doc)
        .arg("--out")
        .arg(dir.path())
        .args(["--reversibility", "putStock=compensable"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    let line = summary["summary"].as_str().unwrap();
    assert!(
        line.starts_with("imported 5 operations: 3 checked fully, 0 checked partly, 2 unchecked"),
        "{line}"
    );
    assert!(
        stderr.trim_end().ends_with(line),
        "the summary is printed last: {stderr}"
    );
    assert!(line.contains("postElsewhere: its request body: `$ref` other.yaml#/components/requestBodies/Thing names another document"), "{line}");
    assert!(line.contains("postDangling: its request body: `$ref` #/components/requestBodies/Nothing names nothing in the document"), "{line}");
    let untranslated = summary["untranslated"].to_string();
    assert!(
        !untranslated.contains("putStock") && !untranslated.contains("/stock"),
        "{untranslated}"
    );

    let b = BundleFiles::in_dir(dir.path());
    let put = b.contract("putStock");
    // The body came through a chain of two request-body refs, its schema through a schema ref.
    let input = &put["structural"]["input"];
    assert_eq!(input["$ref"], "#/$defs/Stock");
    assert_eq!(
        input["$defs"]["Stock"]["required"],
        json!(["qty", "warehouse"])
    );
    assert_eq!(
        put["structural"]["parameters"]["query"]["warehouse"]["schema"]["$ref"],
        "#/$defs/Warehouse"
    );
    assert_eq!(
        put["structural"]["parameters"]["path"]["sku"]["required"],
        true
    );
    assert_eq!(put["structural"]["output"]["$ref"], "#/$defs/Stock");
    assert!(
        put["error"]["responses"]["422"].is_object(),
        "{}",
        put["error"]
    );
    // The recursive schema and the percent-encoded one.
    assert_eq!(
        b.contract("postTree")["structural"]["input"]["$defs"]["Node"]["properties"]["children"]
            ["items"]["$ref"],
        "#/$defs/Node"
    );
    assert_eq!(
        b.contract("postItems")["structural"]["input"]["$ref"],
        "#/$defs/Stock%20Line"
    );

    // Through a running sidecar: valid forwarded, each one-property mutation refused 422 with
    // its location, and nothing of them forwarded.
    let s = enforcing(&b).await;
    let client = http1_client();
    let mut epoch = 0;
    let mut put_stock = |pq: &str, body: &str| {
        epoch += 1;
        let path = format!("/api/v2{pq}");
        leased(&s.p, "PUT", &path, epoch)
            .body(full(body.to_owned()))
            .unwrap()
    };
    let valid = r#"{"qty":5,"warehouse":"BER-1"}"#;
    // A valid write is forwarded as sent; the test upstream's fixed answer is not a `Stock`,
    // and the output contract (a `$ref`'d response's `$ref`'d schema) catches it.
    let (parts, answer) = send(&client, put_stock("/stock/BOLT-9?warehouse=HAM-2", valid)).await;
    let doc: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(parts.status, StatusCode::BAD_GATEWAY, "{doc}");
    assert_eq!(doc["code"], "ERR_CONTRACT_OUTPUT", "{doc}");
    let puts = || -> Vec<String> {
        s.upstream
            .requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .map(|r| r.path_and_query)
            .collect()
    };
    assert_eq!(puts(), ["/api/v2/stock/BOLT-9?warehouse=HAM-2"]);
    for (pq, body, location) in [
        ("/stock/BOLT-9", r#"{"qty":-1,"warehouse":"BER-1"}"#, "/qty"),
        (
            "/stock/BOLT-9",
            r#"{"qty":5,"warehouse":"PAR-3"}"#,
            "/warehouse",
        ),
        ("/stock/BOLT-9", r#"{"qty":5}"#, ""),
        (
            "/stock/BOLT-9",
            r#"{"qty":5,"warehouse":"BER-1","extra":1}"#,
            "",
        ),
        ("/stock/bolt_9", valid, "/path/sku"),
        ("/stock/BOLT-9?warehouse=PAR-3", valid, "/query/warehouse"),
    ] {
        let (parts, answer) = send(&client, put_stock(pq, body)).await;
        let doc: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            parts.status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{pq} {body}: {doc}"
        );
        assert_eq!(doc["code"], "ERR_CONTRACT_INPUT", "{doc}");
        assert_eq!(doc["violationLocation"], location, "{pq} {body}: {doc}");
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }
    assert_eq!(puts().len(), 1, "a refused write reached the upstream");
    let events = drift_events(&s.p);
    assert!(
        events
            .iter()
            .any(|e| e["violationLocation"] == "/query/warehouse"),
        "{events:?}"
    );
}
