//! Tool lists pinned against silent changes: `lock pin-mcp`, rug pulls, paginated listings.

use super::*;

/// `palisade lock pin-mcp` against the running server: the digest it pins for each tool.
fn pinned_digests(server: &McpServer) -> serde_json::Map<String, Value> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("lock.json");
    let run = Command::new(bin())
        .args(["lock", "pin-mcp", "--url"])
        .arg(format!("http://127.0.0.1:{}/mcp", server.port))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    // What it wrote compiles as it is.
    let check = lock_check(&out, &dir.path().join("contracts"));
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let lock: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    lock["capabilities"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["toolDigest"].clone()))
        .collect()
}

/// Runs `palisade lock pin-mcp` against `server` with `args`, writing into `dir`.
pub(super) fn pin_mcp(
    server: &McpServer,
    dir: &std::path::Path,
    args: &[&str],
) -> std::process::Output {
    Command::new(bin())
        .args(["lock", "pin-mcp", "--url"])
        .arg(format!("http://127.0.0.1:{}/mcp", server.port))
        .arg("--out")
        .arg(dir.join("lock.json"))
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_mcp_takes_side_effects_from_tool_annotations() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let run = pin_mcp(&server, dir.path(), &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    // `add` is annotated read-only, `set_stock` idempotent; the rest say nothing.
    let effects = &summary["sideEffects"];
    assert_eq!(effects["add"], "read", "{summary}");
    assert_eq!(effects["set_stock"], "idempotent", "{summary}");
    for tool in ["count_slowly", "rug_pull", "confirm_stock", "log_note"] {
        assert_eq!(effects[tool], "unknown", "{tool}: {summary}");
    }
    // Recorded as declared evidence from the listing, not qualified, with the annotations.
    let add = BundleFiles::in_dir(dir.path()).contract("add");
    let prov = &add["provenance"];
    assert_eq!(prov["evidence"], "declared");
    assert_eq!(prov["qualified"], false);
    assert_eq!(prov["annotations"]["readOnlyHint"], true, "{prov}");
    assert_eq!(
        prov["assertions"]["/operational/sideEffect"],
        "generated-from-typed-source"
    );
    let slow = BundleFiles::in_dir(dir.path()).contract("count_slowly");
    assert_eq!(slow["provenance"]["annotations"], Value::Null);
    assert_eq!(
        slow["provenance"]["assertions"]["/operational/sideEffect"],
        "unresolved"
    );

    // The bundle as written runs: the read tool needs no lease, the idempotent write does,
    // and a tool with no hints is a write too.
    let b = BundleFiles::in_dir(dir.path());
    let p = sidecar(&server, &b);
    let out = client(
        p.url("/mcp"),
        "2026-07-28",
        json!([
            {"op": "call", "name": "add", "args": {"a": 2, "b": 3}},
            {"op": "call", "name": "set_stock", "args": {"sku": "SKU-A", "qty": 1}},
            {"op": "call", "name": "log_note", "args": {"text": "hi"}},
        ]),
    )
    .await;
    assert_eq!(out[0]["result"]["result"], 5, "{out:?}");
    for refused in [&out[1], &out[2]] {
        assert_eq!(
            refused["error"]["data"]["code"], "ERR_LEASE_REQUIRED",
            "{out:?}"
        );
        assert_receipt_verifies(&refused["error"]["data"]["receipt"], "rejection");
    }
    assert!(server.executions().is_empty(), "{:?}", server.executions());

    // The operator's word wins, and is recorded as such.
    let over = tempfile::tempdir().unwrap();
    let run = pin_mcp(
        &server,
        over.path(),
        &[
            "--side-effect",
            "add=write",
            "--side-effect",
            "log_note=read",
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["sideEffects"]["add"], "write");
    assert_eq!(summary["sideEffects"]["log_note"], "read");
    assert_eq!(summary["sideEffects"]["set_stock"], "idempotent");
    assert_eq!(
        BundleFiles::in_dir(over.path()).contract("add")["provenance"]["assertions"]
            ["/operational/sideEffect"],
        "manually-authored"
    );
    // Annotations ignored: nothing is read-only unless the operator says so.
    let ignored = tempfile::tempdir().unwrap();
    let run = pin_mcp(&server, ignored.path(), &["--ignore-annotations"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let summary: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(summary["sideEffects"]["add"], "unknown");
    assert_eq!(summary["sideEffects"]["set_stock"], "unknown");
    // A typo is an error, not a silent no-op; so is an effect that does not exist.
    for (args, says) in [
        (&["--side-effect", "ad=read"][..], "does not list"),
        (&["--side-effect", "add=readonly"][..], "must be one of"),
        (&["--side-effect", "add"][..], "TOOL=EFFECT"),
        (
            &["--side-effect", "add=read", "--side-effect", "add=write"][..],
            "named twice",
        ),
    ] {
        let bad = tempfile::tempdir().unwrap();
        let run = pin_mcp(&server, bad.path(), args);
        assert!(!run.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(
            !bad.path().join("lock.json").exists(),
            "{args:?} wrote a lockfile"
        );
    }
}

/// The ERP tools bundle in `dir`, each tool pinned with the digest `pin-mcp` gives `server`'s
/// listing, `rug_pull` unpinned.
pub(super) fn pinned_erp_tools(server: &McpServer, dir: &std::path::Path) -> BundleFiles {
    let mut pins = pinned_digests(server);
    pins.remove("rug_pull");
    with_tool_digests(erp_tools(dir), &pins)
}

/// Rewrites a bundle's lockfile with `toolDigest`s added.
fn with_tool_digests(b: BundleFiles, digests: &serde_json::Map<String, Value>) -> BundleFiles {
    edit_lock(b, |lock| {
        for (name, cap) in lock["capabilities"].as_object_mut().unwrap() {
            if let Some(d) = digests.get(name) {
                cap["toolDigest"] = d.clone();
            }
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rug_pull_is_filtered_from_the_listing_and_its_calls_refused() {
    for mode in ["2026-07-28", "legacy"] {
        let server = McpServer::start().await;
        let digests = pinned_digests(&server);
        assert_eq!(digests.len(), 8, "{digests:?}");
        let bundle_dir = tempfile::tempdir().unwrap();
        let mut b = erp_tools(bundle_dir.path());
        // rug_pull is bound as a read tool, unpinned; the others carry pin-mcp's digests.
        let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
        let read = contract(json!("unknown"), "read", "reversible", "none");
        let digest = palisade_policy::digest::Sha256Digest::of_json(&read);
        lock["capabilities"]["rug_pull"] = json!({"protocol": "mcp", "operation": "rug_pull",
            "contractDigest": format!("sha-256:{}", digest.to_hex())});
        std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
        let mut pins = digests.clone();
        pins.remove("rug_pull");
        b = with_tool_digests(b, &pins);
        let p = sidecar(&server, &b);
        let out = client(
            p.url("/mcp"),
            mode,
            json!([
                {"op": "list"},
                {"op": "call", "name": "rug_pull"},
                {"op": "list"},
                {"op": "call", "name": "set_stock", "args": {"sku": "SKU-9", "qty": 1},
                 "meta": meta(tool_lease("set_stock", 1))},
            ]),
        )
        .await;
        assert_eq!(
            out[0]["tools"],
            json!(["add", "set_stock", "count_slowly", "rug_pull"]),
            "{mode}: {out:?}"
        );
        assert_eq!(
            out[1]["result"],
            json!({"result": "done"}),
            "{mode}: {out:?}"
        );
        assert_eq!(
            out[2]["tools"],
            json!(["add", "count_slowly", "rug_pull"]),
            "{mode}: the changed tool is gone: {out:?}"
        );
        assert_eq!(
            out[3]["error"]["data"]["code"], "ERR_TOOL_DRIFTED",
            "{mode}: {out:?}"
        );
        assert_receipt_verifies(&out[3]["error"]["data"]["receipt"], "rejection");
        assert!(server.executions().is_empty(), "{mode}");
        let events = drift_events(&p);
        let e = events
            .iter()
            .find(|e| {
                e["category"] == "tool-definition"
                    && e["actionTaken"] == "blocked"
                    && e["observedIdentifier"] == "set_stock"
            })
            .unwrap_or_else(|| panic!("{mode}: {events:?}"));
        assert_eq!(e["expectedDigest"], digests["set_stock"]);
        assert_eq!(e["diagnostics"]["reason"], "changed-definition");
        // No word of the new description leaks into the event.
        assert!(!e.to_string().contains("id_rsa"));
    }
}

/// A paginated listing is filtered page by page with its cursors kept; a tool added at run
/// time reaches the client as `notifications/tools/list_changed`, and is then filtered out
/// as unknown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginated_listings_are_pinned_page_by_page_and_list_changed_passes() {
    let server = McpServer::start_paged(2).await;
    // pin-mcp follows the cursors too.
    let digests = pinned_digests(&server);
    assert_eq!(digests.len(), 8, "{digests:?}");
    let bundle_dir = tempfile::tempdir().unwrap();
    let mut b = erp_tools(bundle_dir.path());
    let mut lock: Value = serde_json::from_slice(&std::fs::read(&b.lockfile).unwrap()).unwrap();
    let read = contract(json!("unknown"), "read", "reversible", "none");
    let digest = format!(
        "sha-256:{}",
        palisade_policy::digest::Sha256Digest::of_json(&read).to_hex()
    );
    for tool in ["rug_pull", "add_tool"] {
        lock["capabilities"][tool] =
            json!({"protocol": "mcp", "operation": tool, "contractDigest": digest});
    }
    std::fs::write(&b.lockfile, serde_json::to_vec(&lock).unwrap()).unwrap();
    let mut pins = digests.clone();
    pins.remove("rug_pull");
    pins.remove("add_tool");
    b = with_tool_digests(b, &pins);
    let p = sidecar(&server, &b);
    let out = client(
        p.url("/mcp"),
        "legacy",
        json!([
            {"op": "list_all"},
            {"op": "call", "name": "add_tool", "args": {"name": "sneaky_extra"}},
            {"op": "notifications"},
            {"op": "list_all"},
            {"op": "call", "name": "rug_pull"},
            {"op": "list_all"},
        ]),
    )
    .await;
    let all = json!(["add", "set_stock", "count_slowly", "rug_pull", "add_tool"]);
    // Eight tools in four pages; confirm_stock, slow_set_stock and log_note are not in the
    // lockfile and are removed.
    assert_eq!(out[0]["tools"], all, "{out:?}");
    assert_eq!(out[0]["pages"], 4, "{out:?}");
    assert_eq!(out[1]["result"], json!({"result": "added"}), "{out:?}");
    assert!(
        out[2]["seen"]
            .as_array()
            .unwrap()
            .contains(&json!("notifications/tools/list_changed")),
        "{out:?}"
    );
    // Nine tools now, five pages; the new one is unknown and filtered.
    assert_eq!(out[3]["tools"], all, "{out:?}");
    assert_eq!(out[3]["pages"], 5, "{out:?}");
    // The rug pull shows on its page; the other pages and the cursors are untouched.
    assert_eq!(
        out[5]["tools"],
        json!(["add", "count_slowly", "rug_pull", "add_tool"]),
        "{out:?}"
    );
    assert_eq!(out[5]["pages"], 5, "{out:?}");
    let events = drift_events(&p);
    for (tool, reason) in [
        ("sneaky_extra", "unknown-tool"),
        ("confirm_stock", "unknown-tool"),
        ("set_stock", "changed-definition"),
    ] {
        assert!(
            events.iter().any(|e| e["category"] == "tool-definition"
                && e["observedIdentifier"] == tool
                && e["diagnostics"]["reason"] == reason),
            "{tool}: {events:?}"
        );
    }
}

/// `--reversibility TOOL=VALUE` (issue 59): MCP has no annotation for a tool's reversibility,
/// so a pin writes `unknown` unless the operator states it; what is stated is written as
/// manually authored, the bundle checks as written, and a value RICH does not have is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pin_mcp_writes_the_reversibility_an_operator_states() {
    let server = McpServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let run = pin_mcp(
        &server,
        dir.path(),
        &[
            "--reversibility",
            "set_stock=compensable",
            "--reversibility",
            "add=reversible",
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let files = BundleFiles::in_dir(dir.path());
    for (tool, want, source) in [
        ("set_stock", "compensable", "manually-authored"),
        ("add", "reversible", "manually-authored"),
        ("count_slowly", "unknown", "unresolved"),
    ] {
        let c = files.contract(tool);
        assert_eq!(c["operational"]["reversibility"], want, "{tool}");
        assert_eq!(
            c["provenance"]["assertions"]["/operational/reversibility"], source,
            "{tool}"
        );
    }
    let check = lock_check(&dir.path().join("lock.json"), &dir.path().join("contracts"));
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    let bad = tempfile::tempdir().unwrap();
    let run = pin_mcp(&server, bad.path(), &["--reversibility", "add=maybe"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&run.stderr)
            .contains("reversible, compensable, irreversible, unknown"),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        !bad.path().join("lock.json").exists(),
        "nothing is written on a refusal"
    );
}
