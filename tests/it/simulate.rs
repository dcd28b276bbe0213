//! `palisade simulate` (SPEC §15, issue 56) against a live sidecar: the recorded ERP traffic
//! (`benches/traffic/erp.har`) through the `examples/erp` bundle and a rules file, offline, and
//! the same traffic replayed with leases through a sidecar with that bundle and those rules in
//! front of the sample SoR. The outcomes agree: what simulate holds the sidecar answers 202,
//! what it refuses by rule the sidecar refuses with `ERR_POLICY_DENIED`, the rest goes through.
//! Then the live sidecar's own log, read out with `palisade audit export`, simulated again:
//! the same counts wherever a receipt holds what the rules read.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use palisade_policy::keys::KeyPair;
use serde_json::Value;

use crate::support;
use support::writes::*;
use support::*;

/// Each rule is scoped to one operation, so a total per outcome is a count per operation.
const RULES: &str = r#"
[[rule]]
name = "big-stock-changes"
on = ["PUT /api/v2/items/{id}"]
when = 'has(body.qty) && body.qty > 400'
action = "hold"

[[rule]]
name = "no-deletes"
on = ["DELETE /api/v2/items/{id}"]
action = "deny"
"#;

fn repo() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simulate_decides_the_recorded_traffic_as_a_live_sidecar_does() {
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, RULES).unwrap();
    let har = repo().join("benches/traffic/erp.har");
    let bundle = repo().join("examples/erp");

    // Offline.
    let out = Command::new(bin())
        .args(["simulate", "--format", "json", "--bundle"])
        .arg(&bundle)
        .arg("--rules")
        .arg(&rules)
        .arg("--traffic")
        .arg(&har)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sim: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ops = &sim["operations"];
    let put = &ops["PUT /api/v2/items/{id}"];
    let held = put["held"]["big-stock-changes"].as_u64().unwrap();
    let denied = ops["DELETE /api/v2/items/{id}"]["refused"]["rule:no-deletes"]
        .as_u64()
        .unwrap();
    assert!(held > 0 && denied > 0, "{sim}");
    let allowed: u64 = ops
        .as_object()
        .unwrap()
        .values()
        .map(|o| o["allowed"].as_u64().unwrap())
        .sum();
    // Nothing else refused offline (the recording keeps to the bundle's contracts).
    for (op, o) in ops.as_object().unwrap() {
        for (why, _) in o["refused"].as_object().unwrap() {
            assert_eq!(why, "rule:no-deletes", "{op}: {sim}");
        }
    }

    // Live: the same bundle and rules in front of a fresh sample SoR, every write leased.
    let (addr, _sor, _sor_dir) = sample_sor().await;
    let extra = format!(
        "[rich]\nlockfile = \"{}\"\ncontracts = \"{}\"\n[rules]\nfile = \"{}\"\n",
        bundle.join("lock.json").display(),
        bundle.join("contracts").display(),
        rules.display()
    );
    let side = tempfile::tempdir().unwrap();
    let text = write_config_for(&format!("http://{addr}"), side.path(), "", &extra);
    let p = Palisade::start_in(side, &text);
    let key = dir.path().join("agent.pem");
    std::fs::write(&key, KeyPair::from_seed(AGENT_SEED).to_pkcs8_pem()).unwrap();
    let report = dir.path().join("report.json");
    let recorded: Value = serde_json::from_slice(&std::fs::read(&har).unwrap()).unwrap();
    let entries = recorded["log"]["entries"].as_array().unwrap();
    let total = entries.len().to_string();
    let reads = entries
        .iter()
        .filter(|e| e["request"]["method"] == "GET")
        .count() as u64;
    let target = format!("http://{}", p.data);
    let (har_s, key_s, report_s) = (
        har.display().to_string(),
        key.display().to_string(),
        report.display().to_string(),
    );
    let run = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(["replay", "--quiet", "--concurrency", "1", "--speed", "50"])
            .args(["--har", &har_s, "--target", &target, "--requests", &total])
            .args([
                "--lease-key",
                &key_s,
                "--public-base",
                BASE,
                "--report",
                &report_s,
            ])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let live: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(
        live["refusals"],
        serde_json::json!({"ERR_POLICY_DENIED": denied}),
        "{live}"
    );
    assert_eq!(live["statuses"]["202"], held, "{live}");
    let statuses = live["statuses"].as_object().unwrap();
    let writes_through: u64 = ["200", "201", "204"]
        .iter()
        .filter_map(|s| statuses.get(*s)?.as_u64())
        .sum();
    // Reads are 2xx too: the writes that went through are the 2xx answers less the reads.
    assert_eq!(writes_through - reads, allowed, "{live}\n{sim}");

    // The same traffic read back from the live sidecar's log (`palisade audit export`) and
    // simulated from its receipts: each write counted once (a held write is not counted again
    // by its later receipts), decided alike wherever a receipt holds what the rule reads, and
    // `unjudged` where the rule reads a body, which no receipt holds.
    let exported = dir.path().join("export.jsonl");
    let url = format!("http://{}", p.admin);
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(["audit", "export", "--url", &url])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&exported, &out.stdout).unwrap();
    let out = Command::new(bin())
        .args(["simulate", "--format", "json", "--bundle"])
        .arg(&bundle)
        .arg("--rules")
        .arg(&rules)
        .arg("--traffic")
        .arg(&exported)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let from_log: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        from_log["not_judged"],
        serde_json::json!(["input contracts", "parameters"])
    );
    let logged = &from_log["operations"];
    let put_writes = put["allowed"].as_u64().unwrap() + held;
    assert_eq!(
        logged["PUT /api/v2/items/{id}"]["unjudged"]["big-stock-changes"], put_writes,
        "{from_log}\n{sim}"
    );
    for (op, o) in ops.as_object().unwrap() {
        if op == "PUT /api/v2/items/{id}" {
            continue;
        }
        for k in ["allowed", "refused", "held"] {
            assert_eq!(logged[op][k], o[k], "{op} {k}: {from_log}\n{sim}");
        }
    }
    assert_eq!(
        logged.as_object().unwrap().len(),
        ops.as_object().unwrap().len(),
        "{from_log}"
    );
}
