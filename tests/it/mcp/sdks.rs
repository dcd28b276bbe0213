//! The TypeScript SDK's `server-everything` through the proxy.

use super::*;

/// The TypeScript SDK's example server, `@modelcontextprotocol/server-everything` (npm), behind
/// the proxy. It listens on every interface, so it runs in a network namespace of its own
/// (loopback only) together with the sidecar and the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_everything_server_works_through_the_proxy() {
    let everything = repo()
        .join("target/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        everything.exists(),
        "{} is missing: run scripts/test.sh, which installs it",
        everything.display()
    );
    let bundle_dir = tempfile::tempdir().unwrap();
    let echo = contract(
        json!({"$schema": DIALECT, "type": "object", "required": ["message"],
               "properties": {"message": {"type": "string", "maxLength": 64}}}),
        "read",
        "reversible",
        "none",
    );
    let b = write_mcp_bundle(
        bundle_dir.path(),
        "urn:palisade:test:everything/1",
        &[("echo", "echo", echo)],
    );
    let dir = tempfile::tempdir().unwrap();
    let sidecar = KeyPair::from_seed(SIDECAR_SEED);
    std::fs::write(dir.path().join("signing.pem"), sidecar.to_pkcs8_pem()).unwrap();
    let d = dir.path().display();
    let text = format!(
        "[listen]\naddr = \"127.0.0.1:0\"\npublic_base = \"{BASE}\"\n\
         [upstream]\nurl = \"http://127.0.0.1:3001\"\n\
         [signing]\nkey = \"{d}/signing.pem\"\n[store]\npath = \"{d}/state.redb\"\n\
         [mcp]\npath = \"/mcp\"\n{}",
        b.rich_toml("")
    );
    // A new network namespace with only loopback, up.
    let wrapper = [
        "unshare",
        "-n",
        "--",
        "sh",
        "-c",
        "ip link set lo up && exec \"$@\"",
        "sh",
    ];
    let p = Palisade::start_wrapped(dir, &text, &wrapper);
    let ns = vec![
        "nsenter".to_owned(),
        "-t".to_owned(),
        p.pid().to_string(),
        "-n".to_owned(),
    ];
    let mut server = Command::new("nsenter")
        .args(["-t", &p.pid().to_string(), "-n", "env", "PORT=3001", "node"])
        .arg(&everything)
        .arg("streamableHttp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("node must start server-everything");
    // Wait for it to listen, asking from inside the namespace.
    let pid = p.pid().to_string();
    let listens = || {
        let probe = Command::new("nsenter")
            .args([
                "-t",
                &pid,
                "-n",
                "bash",
                "-c",
                "exec 3<>/dev/tcp/127.0.0.1/3001",
            ])
            .status();
        std::future::ready(probe.is_ok_and(|s| s.success()))
    };
    let stderr = server.stderr.take();
    let explain = || {
        let _ = server.kill();
        let mut err = String::new();
        if let Some(mut e) = stderr {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        format!("server-everything's stderr: {err}")
    };
    let within = Duration::from_secs(30);
    wait::until_async_or("server-everything listens", within, listens, explain).await;
    // Its tools pinned as they are (issue 59): the TypeScript SDK declares draft-07 in every
    // tool schema, and the bundle `pin-mcp` writes loads as written, no edit.
    let pinned = tempfile::tempdir().unwrap();
    let lockfile = pinned.path().join("lock.json");
    let pin = Command::new("nsenter")
        .args(["-t", &pid, "-n"])
        .arg(bin())
        .args([
            "lock",
            "pin-mcp",
            "--url",
            "http://127.0.0.1:3001/mcp",
            "--out",
        ])
        .arg(&lockfile)
        .output()
        .unwrap();
    assert!(
        pin.status.success(),
        "{}",
        String::from_utf8_lossy(&pin.stderr)
    );
    let contracts = pinned.path().join("contracts");
    let drafted = std::fs::read_dir(&contracts)
        .unwrap()
        .filter(|e| {
            std::fs::read_to_string(e.as_ref().unwrap().path())
                .unwrap()
                .contains("draft-07/schema")
        })
        .count();
    assert!(
        drafted > 0,
        "the SDK's schemas declare draft-07, and the pin keeps them"
    );
    let check = lock_check(&lockfile, &contracts);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    // A pin that declares no client capabilities sees fewer tools: some are listed only to
    // clients that declare roots, sampling or elicitation (which the pin does by default).
    let bare = tempfile::tempdir().unwrap();
    let pin_bare = Command::new("nsenter")
        .args(["-t", &pid, "-n"])
        .arg(bin())
        .args(["lock", "pin-mcp", "--url", "http://127.0.0.1:3001/mcp"])
        .args(["--client-capabilities", "none", "--out"])
        .arg(bare.path().join("lock.json"))
        .output()
        .unwrap();
    assert!(
        pin_bare.status.success(),
        "{}",
        String::from_utf8_lossy(&pin_bare.stderr)
    );
    let tools = |lock: &std::path::Path| -> usize {
        let doc: Value = serde_json::from_slice(&std::fs::read(lock).unwrap()).unwrap();
        doc["capabilities"].as_object().unwrap().len()
    };
    let (all, none) = (tools(&lockfile), tools(&bare.path().join("lock.json")));
    assert!(
        all > none,
        "pinned {all} tools declaring every capability, {none} declaring none"
    );
    let out = client_in(
        ns,
        format!("http://{}/mcp", p.data),
        "legacy",
        json!([
            {"op": "list"},
            {"op": "call", "name": "echo", "args": {"message": "hello through palisade"}},
            {"op": "call", "name": "echo", "args": {"message": 42}},
            {"op": "call", "name": "get-sum", "args": {"a": 1, "b": 2}},
        ]),
    )
    .await;
    let _ = server.kill();
    let _ = server.wait();
    // Under unbound_writes = "deny" only the bound tool is listed.
    assert_eq!(out[0]["tools"], json!(["echo"]), "{out:?}");
    let echoed = out[1]["result"].to_string();
    assert!(echoed.contains("hello through palisade"), "{out:?}");
    assert_eq!(
        out[2]["error"]["data"]["code"], "ERR_CONTRACT_INPUT",
        "{out:?}"
    );
    assert_eq!(
        out[3]["error"]["data"]["code"], "ERR_UNBOUND_OPERATION",
        "{out:?}"
    );
}
