//! One data-plane runtime per CPU (issue 41): `runtime.threads` runtimes, each on its own
//! thread with its own `SO_REUSEPORT` listener; every one of them serves connections, sees
//! a bundle swapped at the admin listener, and drains its in-flight requests on SIGTERM.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use http::{Request, StatusCode};

use crate::support::*;

/// The data-plane threads of `pid` (named `palisade-data-N`) and their voluntary context
/// switches so far: a thread that accepted and served connections has woken up for them.
fn data_threads(pid: u32) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if !name.starts_with("palisade-data-") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let switches = status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        out.push((name.trim().to_owned(), switches));
    }
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_runtime_serves_and_drains() {
    if std::env::var("PALISADE_RUNTIME").is_ok() {
        return; // the single-runtime shapes have no data-plane threads
    }
    let upstream = Upstream::start().await;
    let mut p = Palisade::start(&format!(
        "[listen]\naddr = \"127.0.0.1:0\"\ndrain_timeout = \"10s\"\n\
         [upstream]\nurl = \"{}\"\ntimeout = \"10s\"\n[ptcl]\nwrites = []\n\
         [runtime]\nthreads = 3\n",
        upstream.url()
    ));
    // A thread takes its name once it runs: wait for both.
    let pid = p.pid();
    wait::until(
        "both data runtimes are named",
        Duration::from_secs(5),
        || data_threads(pid).len() == 2,
    )
    .await;
    let before = data_threads(pid);
    let names: Vec<&str> = before.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        ["palisade-data-1", "palisade-data-2"],
        "three runtimes: main + two"
    );

    // 48 connections at once, each with a request in flight: the kernel spreads them over
    // the three listeners.
    const N: usize = 48;
    let slow: Vec<_> = (0..N)
        .map(|_| {
            let url = p.url("/slow/1500");
            tokio::spawn(async move {
                // A client of its own: a connection of its own.
                send(&http1_client(), Request::get(url).body(full("")).unwrap()).await
            })
        })
        .collect();
    wait::until(
        "every slow request reaches the upstream",
        Duration::from_secs(10),
        || upstream.requests().len() >= N,
    )
    .await;
    let after = data_threads(p.pid());
    for ((name, was), (_, now)) in before.iter().zip(&after) {
        assert!(now > was, "{name} served nothing ({was} → {now} wake-ups)");
    }

    // SIGTERM with all of them in flight: every runtime drains its own, and the process
    // exits 0 once they are done.
    p.sigterm();
    for task in slow {
        let (parts, body) = task.await.unwrap();
        assert_eq!(parts.status, StatusCode::OK);
        assert_eq!(&body[..], b"slow done");
    }
    let status = tokio::task::spawn_blocking(move || p.child().wait().unwrap())
        .await
        .unwrap();
    assert_eq!(status.code(), Some(0), "exit code 0 after draining");
}

#[test]
fn runtime_threads_is_checked() {
    let out = std::process::Command::new(bin())
        .args(["config", "check", "--config", "/dev/stdin"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write as _;
            c.stdin
                .take()
                .unwrap()
                .write_all(b"[upstream]\nurl = \"http://127.0.0.1:9\"\n[ptcl]\nwrites = []\n[runtime]\nthreads = 0\n")?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("runtime.threads"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
