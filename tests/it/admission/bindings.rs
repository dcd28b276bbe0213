//! Bindings that require admission, `lock bound`, and what `config check` refuses.

use super::*;

/// With `mode = "off"`, a binding whose runtime says `admission: "required"` still needs a
/// token; the others do not; and a bundle that requires admission where no `[admission]` is
/// configured does not load.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_may_require_admission_where_the_mode_is_off() {
    let bundle_dir = tempfile::tempdir().unwrap();
    let (b, put, get) = bundle_with(bundle_dir.path(), None, Some("required"));
    let keys_dir = tempfile::tempdir().unwrap();
    let digests = json!({PUT_OP: digest_of(&put), GET_OP: digest_of(&get)});
    let tokens = mint(keys_dir.path(), &b.binding_id, &digests);
    let admission = admission_toml("off", keys_dir.path());
    let s = start_configured(
        Upstream::start().await,
        tempfile::tempdir().unwrap(),
        "",
        &format!("{}{admission}", b.rich_toml("")),
    );
    let a = call(&s.p, "GET", "/items/1", &[], None, "").await;
    assert_refused(
        &a,
        StatusCode::UNAUTHORIZED,
        "ERR_TOKEN_INVALID",
        "a binding that requires it",
    );
    let a = call(
        &s.p,
        "GET",
        "/items/1",
        &[&bearer(&tokens["read_only"])],
        None,
        "",
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let l = lease_for(&agent, "/items/1", 1, |_| {});
    let a = call(&s.p, "PUT", "/items/1", &[], Some(&l), r#"{"qty":1}"#).await;
    assert_eq!(a.status, StatusCode::OK, "mode off: {}", a.doc);
    // Even so, a token never reaches the upstream.
    let l = lease_for(&agent, "/items/1", 2, |_| {});
    let a = call(
        &s.p,
        "PUT",
        "/items/1",
        &[&bearer(&tokens["eddsa"])],
        Some(&l),
        r#"{"qty":2}"#,
    )
    .await;
    assert_eq!(a.status, StatusCode::OK);
    // Not required here, but the token verified: its subject is named as the caller.
    assert!(receipt_of(&a.headers)["caller"]
        .as_str()
        .is_some_and(|c| c.starts_with("sub:sha256:")));
    assert!(s
        .upstream
        .requests()
        .iter()
        .all(|r| !r.headers.contains_key("authorization")));

    // Without [admission], the same bundle is refused: its binding could never be called.
    let dir = tempfile::tempdir().unwrap();
    let text = write_config(&s.upstream, dir.path(), "", &b.rich_toml(""));
    std::fs::write(dir.path().join("p.toml"), text).unwrap();
    let out = Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(dir.path().join("p.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("runtime/admission"));
}

#[test]
fn lock_bound_prints_each_bindings_worst_case_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut schema = qty_schema();
    schema["properties"]["sku"] = json!({"type": "string", "pattern": "^SKU-", "maxLength": 16});
    let refs = contract(
        json!({"$schema": DIALECT, "$defs": {"q": {"type": "integer"}},
               "properties": {"qty": {"$ref": "#/$defs/q"}}}),
        "write",
        "compensable",
        "optional",
    );
    let b = write_bundle(
        dir.path(),
        "urn:palisade:test:bounds/1",
        &[
            (
                "items",
                PUT_OP,
                contract(schema, "write", "compensable", "optional"),
                None,
            ),
            ("refs", "POST /refs", refs, None),
        ],
    );
    let run = |extra: &[&str]| {
        let out = Command::new(bin())
            .args(["lock", "bound", "--lockfile"])
            .arg(&b.lockfile)
            .arg("--contracts")
            .arg(&b.contracts)
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, out, _) = run(&["--binding", "items"]);
    assert_eq!(code, Some(0));
    let doc: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["lockfileDigest"], b.digest);
    let items = &doc["bindings"][0];
    // The pattern is outside the fragment: dropped, so the bound holds every input the
    // contract does; the length limit stays.
    assert_eq!(
        items["worstCaseBound"]["properties"]["sku"],
        json!({"type": "string", "maxLength": 16})
    );
    assert_eq!(
        items["worstCaseBoundDigest"],
        format!(
            "sha-256:{}",
            Sha256Digest::of_json(&items["worstCaseBound"]).to_hex()
        )
    );
    let (code, out, _) = run(&[]);
    assert_eq!(code, Some(0));
    let doc: Value = serde_json::from_str(&out).unwrap();
    let refs = doc["bindings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "refs")
        .unwrap()
        .clone();
    assert_eq!(refs["worstCaseBound"], Value::Null);
    assert!(refs["notComputable"].as_str().unwrap().contains("$ref"));
    let (code, _, err) = run(&["--binding", "nope"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn config_check_refuses_what_admission_cannot_enforce() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(
        &jwks,
        r#"{"keys":[{"kty":"oct","k":"c2VjcmV0","kid":"h"}]}"#,
    )
    .unwrap();
    let text = format!(
        "[upstream]\nurl = \"http://127.0.0.1:9\"\n[admission]\nmode = \"required\"\n\
         resource = \"erp\"\njwks = [\"{}\"]\nissuers = []\nalgorithms = [\"HS256\", \"none\"]\n\
         [mcp]\n",
        jwks.display()
    );
    let config = dir.path().join("palisade.toml");
    std::fs::write(&config, text).unwrap();
    let out = Command::new(bin())
        .args(["config", "check", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    for needle in [
        "admission.resource",
        "admission.issuers",
        "\"HS256\" is not accepted",
        "\"none\" is not accepted",
        "rich.lockfile",
    ] {
        assert!(err.contains(needle), "{needle} not reported:\n{err}");
    }
}
