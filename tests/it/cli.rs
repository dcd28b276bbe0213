//! The command line as SPEC §1 describes it, run as the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use palisade::store::Receipts;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn palisade(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(support::bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command refused on its arguments exits without reading its input: a broken pipe
    // here is that, not a failure of the test.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn testdata(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(rel)
}

#[test]
fn jcs_prints_the_canonical_form_without_a_newline() {
    for name in [
        "arrays",
        "french",
        "structures",
        "unicode",
        "values",
        "weird",
    ] {
        let input = std::fs::read(testdata(&format!("jcs/input/{name}.json"))).unwrap();
        let want = std::fs::read(testdata(&format!("jcs/output/{name}.json"))).unwrap();
        let o = palisade(&["jcs"], &input);
        assert_eq!(o.status.code(), Some(0), "{name}: {}", stderr(&o));
        assert_eq!(o.stdout, want, "{name}");
    }
}

#[test]
fn jcs_refuses_non_i_json_with_exit_1_and_one_line() {
    for (input, needle) in [
        (&br#"{"a":1,"a":2}"#[..], "duplicate member"),
        (br#"["\ud800"]"#, "lone surrogate"),
        (b"9007199254740993", "2^53"),
        (b"{", "syntax error"),
    ] {
        let o = palisade(&["jcs"], input);
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(err.contains(needle), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(o.stdout.is_empty());
    }
}

#[test]
fn digest_hashes_the_canonical_form() {
    // {"b":1,"a":2} canonicalises to {"a":2,"b":1}.
    let want = support::sha256_hex(br#"{"a":2,"b":1}"#);
    let o = palisade(&["digest"], br#" { "b" : 1, "a" : 2 } "#);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(stdout(&o).trim(), format!("sha-256:{want}"));
    let o = palisade(&["digest", "--prefix", "sha256"], br#"{"a":2,"b":1}"#);
    assert_eq!(stdout(&o).trim(), format!("sha256:{want}"));
    let o = palisade(&["digest", "--prefix", "md5"], b"{}");
    assert_eq!(o.status.code(), Some(2), "unknown prefix is a usage error");
}

#[test]
fn keygen_then_sign_then_verify_and_tampering_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("agent.pem");
    let o = palisade(&["keygen", "--out", key.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let entry: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert!(entry["kid"].as_str().unwrap().starts_with("sha256:"));
    assert_eq!(
        entry["public_key"].as_str().unwrap().len(),
        43,
        "32 bytes of base64url"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    let trust = dir.path().join("issuers.json");
    std::fs::write(
        &trust,
        serde_json::to_vec(&serde_json::json!([entry])).unwrap(),
    )
    .unwrap();
    let inverse = dir.path().join("inverse.json");
    std::fs::write(
        &inverse,
        br#"{"method":"PUT","path":"/api/v2/items/1","body":{"qty":1200}}"#,
    )
    .unwrap();

    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "7",
            "--pre-image",
            &format!("sha256:{}", "ab".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
            "--mode",
            "SNAPSHOT_RESTORE",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lease: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(lease["cas_fence_epoch"], 7);
    assert_eq!(lease["recovery_mode"], "SNAPSHOT_RESTORE");
    assert_eq!(lease["signature"]["kid"], entry["kid"]);
    // The inverse digest is the JCS SHA-256 of the file's JSON.
    let jcs = palisade(
        &["digest", "--prefix", "sha256"],
        &std::fs::read(&inverse).unwrap(),
    );
    assert_eq!(
        lease["inverse_payload_jcs_hash"].as_str().unwrap(),
        stdout(&jcs).trim()
    );

    let raw = serde_json::to_vec(&lease).unwrap();
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &raw,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The header form (base64url) verifies too.
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&raw);
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        b64.as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let mut tampered = lease.clone();
    tampered["cas_fence_epoch"] = serde_json::json!(8);
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &serde_json::to_vec(&tampered).unwrap(),
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_SIGNATURE");

    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        b"{}",
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_MALFORMED");

    // A key that is not in the trust file.
    let other = dir.path().join("other.pem");
    palisade(&["keygen", "--out", other.to_str().unwrap()], b"");
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            other.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "1",
            "--pre-image",
            &format!("sha256:{}", "00".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
        ],
        b"",
    );
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &o.stdout,
    );
    assert_eq!(stdout(&o).trim(), "ERR_LEASE_UNTRUSTED_KEY");

    // A window that cannot be honoured.
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            key.to_str().unwrap(),
            "--target",
            "https://erp.example.com/api/v2/items/1",
            "--epoch",
            "1",
            "--pre-image",
            &format!("sha256:{}", "00".repeat(32)),
            "--inverse",
            inverse.to_str().unwrap(),
            "--t-req",
            "5000",
            "--t-granted",
            "1000",
        ],
        b"",
    );
    let o = palisade(
        &["lease", "verify", "--trust", trust.to_str().unwrap()],
        &o.stdout,
    );
    assert_eq!(stdout(&o).trim(), "ERR_RECOVERY_WINDOW");
}

#[test]
fn lease_sign_reports_bad_arguments_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            dir.path().join("missing.pem").to_str().unwrap(),
            "--target",
            "https://x/y",
            "--epoch",
            "1",
            "--pre-image",
            "sha256:00",
            "--inverse",
            "/nonexistent",
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.pem"), "{}", stderr(&o));
    let o = palisade(&["lease", "sign"], b"");
    assert_eq!(
        o.status.code(),
        Some(2),
        "missing arguments are a usage error"
    );
}

#[test]
fn an_unknown_config_key_fails_check_and_run_with_exit_2_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(
        &cfg,
        "[upstream]\nurl = \"http://127.0.0.1:9\"\n[limits]\nmax_bdy = \"1MiB\"\n[ptcl]\npre_image = \"sometimes\"\n",
    )
    .unwrap();
    for args in [["config", "check", "--config"], ["run", "--config", "--"]] {
        let mut a: Vec<&str> = args.iter().copied().filter(|s| *s != "--").collect();
        a.push(cfg.to_str().unwrap());
        let o = palisade(&a, b"");
        assert_eq!(o.status.code(), Some(2), "{a:?}");
        let err = stderr(&o);
        assert!(err.contains("limits.max_bdy: unknown key"), "{a:?}: {err}");
        assert!(
            err.contains("ptcl.pre_image"),
            "every problem at once: {err}"
        );
        assert!(err.contains("bad.toml"), "names the file: {err}");
    }
    // PALISADE_CONFIG stands in for --config.
    let o = Command::new(support::bin())
        .args(["config", "check"])
        .env("PALISADE_CONFIG", &cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("limits.max_bdy"));

    let good = dir.path().join("good.toml");
    std::fs::write(&good, "[upstream]\nurl = \"http://127.0.0.1:9\"\n").unwrap();
    let o = palisade(
        &["config", "check", "--config", good.to_str().unwrap()],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn config_check_loads_the_files_the_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\ntls = {{ cert = \"{0}/nope.crt\", key = \"{0}/nope.key\" }}\n\
             [admin]\ntls = {{ cert = \"{0}/noadmin.crt\", key = \"{0}/noadmin.key\", client_ca = \"{0}/noca.pem\" }}\n\
             [upstream]\nurl = \"http://127.0.0.1:9\"\n[signing]\nkey = \"{0}/nokey.pem\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let o = palisade(&["config", "check", "--config", cfg.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("listen.tls") && err.contains("nope.crt"),
        "{err}"
    );
    assert!(
        err.contains("signing.key") && err.contains("nokey.pem"),
        "{err}"
    );
    assert!(
        err.contains("admin.tls:") && err.contains("noadmin.crt"),
        "{err}"
    );
    assert!(
        err.contains("admin.tls.client_ca") && err.contains("noca.pem"),
        "{err}"
    );
}

#[test]
fn a_certificate_with_another_certificates_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let pki = support::Pki::new(dir.path());
    let (a, b) = (pki.issue("a", true), pki.issue("b", true));
    std::fs::write(dir.path().join("a.crt"), &a.cert_pem).unwrap();
    std::fs::write(dir.path().join("b.key"), &b.key_pem).unwrap();
    let cfg = dir.path().join("c.toml");
    std::fs::write(
        &cfg,
        format!(
            "[listen]\ntls = {{ cert = \"{0}/a.crt\", key = \"{0}/b.key\" }}\n\
             [upstream]\nurl = \"http://127.0.0.1:9\"\n",
            dir.path().display()
        ),
    )
    .unwrap();
    for cmd in [
        &["config", "check", "--config"][..],
        &["run", "--config"][..],
    ] {
        let mut args = cmd.to_vec();
        args.push(cfg.to_str().unwrap());
        let o = palisade(&args, b"");
        assert_eq!(o.status.code(), Some(2), "{cmd:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert!(
            err.contains("b.key") && err.contains("does not match the certificate"),
            "{cmd:?}: {err}"
        );
    }
}

/// Rewrites one row of the embedded store's `table` (a stopped sidecar's file, changed offline).
fn tamper(store: &Path, table: &str, key: u64, change: impl FnOnce(Vec<u8>) -> Vec<u8>) -> Vec<u8> {
    use redb::ReadableTable as _;
    let db = redb::Database::open(store).unwrap();
    let def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new(table);
    let wtx = db.begin_write().unwrap();
    let before = {
        let mut t = wtx.open_table(def).unwrap();
        let before = t.get(key).unwrap().unwrap().value().to_vec();
        t.insert(key, change(before.clone()).as_slice()).unwrap();
        before
    };
    wtx.commit().unwrap();
    before
}

#[tokio::test]
async fn audit_verify_checks_the_log_and_names_what_was_changed_offline() {
    use palisade::store::embedded::EmbeddedStore;
    use palisade_policy::keys::KeyPair;
    use palisade_policy::log::Signer;
    use palisade_policy::receipt::{ReceiptBody, ReceiptKind};

    let dir = tempfile::tempdir().unwrap();
    let key_a = dir.path().join("a.pem");
    let key_b = dir.path().join("b.pem");
    palisade(&["keygen", "--out", key_a.to_str().unwrap()], b"");
    palisade(&["keygen", "--out", key_b.to_str().unwrap()], b"");
    let store_path = dir.path().join("state.redb");
    {
        let key = KeyPair::from_pkcs8_pem(&std::fs::read_to_string(&key_a).unwrap()).unwrap();
        // No public base in the configuration below: the log's origin is `palisade`.
        let signer = Signer::new("palisade", std::sync::Arc::new(key)).unwrap();
        let store = EmbeddedStore::open(&store_path, std::sync::Arc::new(signer)).unwrap();
        for i in 0..5 {
            let body = ReceiptBody::new(
                format!("urn:uuid:r{i}"),
                ReceiptKind::Rejection,
                "2026-12-02T12:00:00.000Z".into(),
            );
            store.append_receipt(body).await.unwrap();
        }
    }
    let config = |key: &Path| {
        let p = dir.path().join(format!(
            "{}.toml",
            key.file_stem().unwrap().to_str().unwrap()
        ));
        std::fs::write(
            &p,
            format!(
                "[upstream]\nurl = \"http://127.0.0.1:9\"\n[signing]\nkey = \"{}\"\n[store]\npath = \"{}\"\n",
                key.display(),
                store_path.display()
            ),
        )
        .unwrap();
        p
    };
    let verify = |key: &Path, json: bool| {
        let c = config(key);
        let mut args = vec!["audit", "verify", "--config", c.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        palisade(&args, b"")
    };
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("receipt log of 5 entries"),
        "{}",
        stdout(&o)
    );
    let o = verify(&key_a, true);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (
            doc["ok"].as_bool(),
            doc["size"].as_u64(),
            doc["retained"].as_u64()
        ),
        (Some(true), Some(5), Some(5)),
        "{doc}"
    );

    // Another key: the newest checkpoint is not the log's.
    let o = verify(&key_b, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("the newest checkpoint"),
        "{}",
        stderr(&o)
    );

    // An entry changed offline is named by its index.
    let before = tamper(&store_path, "log_entries", 2, |e| {
        String::from_utf8(e)
            .unwrap()
            .replace("rejection", "commit")
            .into_bytes()
    });
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("entry 2"), "{}", stderr(&o));
    tamper(&store_path, "log_entries", 2, |_| before);
    assert_eq!(verify(&key_a, false).status.code(), Some(0));

    // A stored hash changed offline (the node over entries 0 and 1, stored hash 2).
    tamper(&store_path, "log_hashes", 2, |mut h| {
        h[0] ^= 1;
        h
    });
    let o = verify(&key_a, false);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("stored hash 2"), "{}", stderr(&o));

    std::fs::remove_file(&store_path).unwrap();
    assert_eq!(
        verify(&key_a, false).status.code(),
        Some(2),
        "a missing store is a configuration error"
    );
}

/// `palisade demo` as a newcomer meets it: its printed shell lines, run as printed, show a
/// refusal, a granted lease used once, a stale-fence 409 and a compensation; then the receipt
/// chain it points at verifies.
#[test]
fn the_demo_does_what_it_prints() {
    use std::io::BufRead as _;
    let mut demo = Command::new(support::bin())
        .args(["demo", "--port", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(demo.stdout.take().unwrap()).lines();
    let mut script = String::new();
    let mut audit = String::new();
    let mut inside = false;
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.starts_with("Try, in another shell:") {
            inside = true;
        } else if let Some(cmd) = line.strip_prefix("Stop with Ctrl-C, then check the receipt log:")
        {
            audit = cmd.trim().to_owned();
            break;
        } else if inside {
            script.push_str(&line);
            script.push('\n');
        }
    }
    // Keep draining the demo's output so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    // `python3` is the venv's (scripts/test.sh), with the agent library from the tree, as a
    // newcomer has it after `pip install ./clients/python`.
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let path = format!(
        "{}:{}",
        repo.join("target/pyenv/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .env("PATH", path)
        .env("PYTHONPATH", repo.join("clients/python/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    // The Python flow: written, refused, compensated, with its receipts verified.
    for said in [
        "python: written 200 epoch 3 commit receipt verified",
        "python: refused err_contract_input at /qty",
        "python: compensated compensation qty 1200",
    ] {
        assert!(
            text.contains(said),
            "{said}: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let statuses: Vec<&str> = text
        .lines()
        // `curl -s` output has no trailing newline: a status line may follow it on one line.
        .filter_map(|l| l.find("http/1.1 ").map(|i| &l[i..]))
        .map(|l| l.split_whitespace().nth(1).unwrap_or(""))
        .collect();
    assert_eq!(
        statuses,
        ["428", "200", "422", "409", "200", "201", "422", "263", "200", "409"],
        "{text}"
    );
    // The v2 allocation, mapped: the answer in v2 names, the SoR's record in v1 names.
    assert!(
        text.contains(
            r#"{"id":"7","order":"so-1042","qty":40,"sku":"bolt-m8","warehouse":"ber-1"}"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"{"allocationid":"7","itemcode":"bolt-m8","location":"ber-1","quantity":40,"salesorder":"so-1042"}"#),
        "{text}"
    );
    assert!(text.contains(r#""violationlocation":"/order""#), "{text}");
    // RCNS: the composed endpoint ran, then a failing composition left the item at 25.
    assert!(text.contains("err_rcns_step_failed"), "{text}");
    assert!(text.contains(r#""all_or_nothing":true"#), "{text}");
    assert!(
        text.contains(r#"{"id":"bolt-m8","qty":25,"sku":"bolt-m8","warehouse":"ber-1"}"#),
        "{text}"
    );
    assert!(text.contains("err_contract_input"), "{text}");
    assert!(text.contains(r#""violationlocation":"/qty""#), "{text}");
    assert!(text.contains("err_lease_required"), "{text}");
    assert!(text.contains("agent-fence-token: 1"), "{text}");
    assert!(text.contains("err_stale_fence_epoch"), "{text}");
    assert!(text.contains("\"kind\":\"compensation\""), "{text}");
    assert!(text.contains("agent-fence-token: 2"), "{text}");
    assert!(
        text.trim_end()
            .ends_with(r#""qty":1200,"sku":"bolt-m8","warehouse":"ber-1"}"#)
            || text.contains(r#""qty":1200"#),
        "the record is back: {text}"
    );
    Command::new("kill")
        .args(["-TERM", &demo.id().to_string()])
        .status()
        .unwrap();
    demo.wait().unwrap();
    let args: Vec<&str> = audit.split_whitespace().collect();
    let o = Command::new(args[0]).args(&args[1..]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok: "), "{}", stdout(&o));
    if let Some(dir) = audit
        .split_whitespace()
        .last()
        .and_then(|c| Path::new(c).parent())
    {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `examples/erp` is exactly what `palisade::cli::sample_bundle` writes (the demo's bundle), and it
/// passes `palisade lock check`.
#[test]
fn the_example_bundle_is_current_and_checks() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/erp");
    let fresh = tempfile::tempdir().unwrap();
    let digest = palisade::cli::sample_bundle::write(fresh.path()).unwrap();
    let list = |d: &Path| {
        let mut v: Vec<(String, Vec<u8>)> = Vec::new();
        for sub in ["", "contracts"] {
            for e in std::fs::read_dir(d.join(sub)).unwrap() {
                let e = e.unwrap();
                if e.path().is_file() {
                    v.push((
                        format!("{sub}/{}", e.file_name().to_string_lossy()),
                        std::fs::read(e.path()).unwrap(),
                    ));
                }
            }
        }
        v.sort();
        v
    };
    assert!(
        list(&examples) == list(fresh.path()),
        "examples/erp is stale: cargo run -p palisade --example write_erp_bundle -- examples/erp"
    );
    let o = palisade(
        &[
            "lock",
            "check",
            "--lockfile",
            &examples.join("lock.json").display().to_string(),
            "--contracts",
            &examples.join("contracts").display().to_string(),
            "--expected-digest",
            &digest,
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let summary: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(summary["digest"], digest);
    assert_eq!(summary["capabilities"].as_array().unwrap().len(), 8);
    let connection = &summary["connections"][0];
    assert_eq!(connection["source"], "allocations.put");
    assert_eq!(connection["target"], "legacy.allocations.put");
    assert_eq!(connection["class"], "T1");
}

/// The venv `scripts/test.sh` makes (pyca/cryptography is in it).
fn venv_python() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/pyenv/bin/python")
}

#[test]
fn keygen_writes_a_key_openssl_and_pyca_load() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("agent.pem");
    let o = palisade(&["keygen", "--out", key.to_str().unwrap()], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let entry: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let public = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(entry["public_key"].as_str().unwrap())
        .unwrap();

    // OpenSSL 3 reads it and derives the same public key (SPKI DER: 12-byte prefix + key).
    let out = Command::new("openssl")
        .args([
            "pkey",
            "-in",
            key.to_str().unwrap(),
            "-pubout",
            "-outform",
            "DER",
        ])
        .output()
        .expect("openssl is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(&out.stdout[out.stdout.len() - 32..], public.as_slice());

    // pyca/cryptography reads it too.
    let script = "import sys\n\
        from cryptography.hazmat.primitives import serialization as s\n\
        k = s.load_pem_private_key(open(sys.argv[1], 'rb').read(), password=None)\n\
        sys.stdout.write(k.public_key().public_bytes(s.Encoding.Raw, s.PublicFormat.Raw).hex())\n";
    let out = Command::new(venv_python())
        .args(["-c", script, key.to_str().unwrap()])
        .output()
        .expect("the test venv exists (scripts/test.sh makes it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), hex::encode(&public));

    // And the other way: a key OpenSSL made signs leases here.
    let theirs = dir.path().join("openssl.pem");
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "ed25519",
            "-out",
            theirs.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let inverse = dir.path().join("inverse.json");
    std::fs::write(&inverse, br#"{"method":"DELETE","path":"/items/1"}"#).unwrap();
    let o = palisade(
        &[
            "lease",
            "sign",
            "--key",
            theirs.to_str().unwrap(),
            "--target",
            "https://erp.example.com/items/1",
            "--epoch",
            "1",
            "--pre-image",
            "sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "--inverse",
            inverse.to_str().unwrap(),
        ],
        b"",
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
