//! The demo, the example bundle, keys that OpenSSL and pyca load.

use super::*;

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
