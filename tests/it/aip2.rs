//! The AIP-2.1 quote-channel guard (SPEC §13, seed 001 §8) and negotiation relay (§6.3) end to
//! end: palisade between the agirails SDK's client and an agent endpoint built on the SDK's
//! receive-side handler (`tests/aip2/agent.py`), and the SDK's `RelayChannel` posting to and
//! polling the relay; every message signed by the SDK (`tests/aip2/sdk_messages.py`). The
//! expectations are in `tests/aip2/scenario.py` and `tests/aip2/relay_scenario.py`; this file
//! starts the parts, restarts the sidecar between the phases (the second keeping relay
//! messages for 2 s, the third holding at most 5), and checks the receipt chain at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use support::writes::write_config_for;
use support::*;

const KERNEL: &str = "0x9d25A874f046185d9237Cd4954C88D2B74B0021b";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn python() -> PathBuf {
    let p = repo().join("target/pyenv/bin/python");
    assert!(
        p.exists(),
        "{} is missing: run scripts/test.sh, which makes the venv with the agirails SDK",
        p.display()
    );
    p
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_agent(port: u16) -> Agent {
    let child = Command::new(python())
        .arg(repo().join("tests/aip2/agent.py"))
        .arg(port.to_string())
        .arg(KERNEL)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("the agent must start");
    // The SDK imports web3: a cold start takes a few seconds.
    wait::until_blocking("the agent listens", Duration::from_secs(60), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    Agent(child)
}

fn scenario(phase: &str, p: &Palisade, agent: &str, state: &std::path::Path) {
    run_python(
        "scenario.py",
        phase,
        p,
        &[
            &p.url(""),
            agent,
            &format!("http://{}", p.admin),
            &state.display().to_string(),
        ],
    );
}

fn relay_scenario(phase: &str, p: &Palisade, state: &std::path::Path) {
    run_python(
        "relay_scenario.py",
        phase,
        p,
        &[
            &p.url(""),
            &format!("http://{}", p.admin),
            &state.display().to_string(),
        ],
    );
}

fn run_python(script: &str, phase: &str, p: &Palisade, args: &[&str]) {
    let out = Command::new(python())
        .current_dir(repo().join("tests/aip2"))
        .arg(script)
        .arg(phase)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script} {phase} failed:\n{}\n{}\npalisade logs:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        p.logs()
    );
}

fn config(dir: &std::path::Path, agent: &str) -> String {
    let aip2 = format!(
        "[aip2]\nkernels = {{ 84532 = \"{KERNEL}\" }}\ntrusted_proxies = [\"127.0.0.1\"]\nrelay = true\n"
    );
    write_config_for(agent, dir, "", &aip2)
}

#[test]
fn quote_channel_guard_and_relay_with_the_agirails_sdk() {
    let port = free_port();
    let agent_url = format!("http://127.0.0.1:{port}");
    let _agent = start_agent(port);
    let dir = tempfile::tempdir().unwrap();
    let text = config(dir.path(), &agent_url);
    let state = tempfile::NamedTempFile::new().unwrap();
    let relay_state = tempfile::NamedTempFile::new().unwrap();
    let keep = tempfile::tempdir().unwrap();
    // The store outlives the first sidecar: the second opens the same file.
    let store_dir = keep.path().to_owned();
    let text = text.replace(
        &dir.path().display().to_string(),
        &store_dir.display().to_string(),
    );
    for f in ["signing.pem", "issuers.json"] {
        std::fs::copy(dir.path().join(f), store_dir.join(f)).unwrap();
    }

    let mut p = Palisade::start(&text);
    scenario("main", &p, &agent_url, state.path());
    relay_scenario("main", &p, relay_state.path());
    p.sigterm();
    p.child().wait().unwrap();
    drop(p);

    let short_relay = text.replace("relay = true\n", "relay = true\nrelay_ttl = \"2s\"\n");
    assert_ne!(short_relay, text);
    let p = Palisade::start(&short_relay);
    scenario("restart", &p, &agent_url, state.path());
    relay_scenario("restart", &p, relay_state.path());
    drop(p);

    let small = text.replace("relay = true\n", "relay = true\nrelay_max_messages = 5\n");
    let p = Palisade::start(&small);
    relay_scenario("full", &p, relay_state.path());
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok, "audit verify failed:\n{out}\n{err}");
}

/// `[aip2]` on its own (issue 37): `ptcl.writes = []` and the quote channel guarded as with
/// PTCL (the SDK's messages delivered with receipts, every refusal with its code, receipt and
/// an agent that saw nothing), the relay served from the store, every other request proxied
/// as it is; the log verifies.
#[test]
fn the_quote_channel_guard_stands_alone_without_ptcl() {
    let port = free_port();
    let agent_url = format!("http://127.0.0.1:{port}");
    let _agent = start_agent(port);
    let dir = tempfile::tempdir().unwrap();
    let text = config(dir.path(), &agent_url) + "[ptcl]\nwrites = []\n";
    let p = Palisade::start(&text);
    let state = tempfile::NamedTempFile::new().unwrap();
    let relay_state = tempfile::NamedTempFile::new().unwrap();
    scenario("standalone", &p, &agent_url, state.path());
    relay_scenario("main", &p, relay_state.path());
    let (ok, out, err) = p.stop_and_audit();
    assert!(ok, "audit verify failed:\n{out}\n{err}");
}
