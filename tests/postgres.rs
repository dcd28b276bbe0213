//! The `postgres` store (SPEC §10, issue 16) against a real PostgreSQL: a throw-away cluster
//! (Debian's `postgresql`, `initdb` + `pg_ctl` on a Unix socket in a temp dir) started by this
//! test and stopped at its end, two sidecars in front of one upstream sharing it. One test
//! function, so the cluster starts once (SPEC's slow scenarios run in one process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use palisade::store::postgres::{Connect, PostgresStore};
use palisade::store::Store as _;
use palisade_policy::keys::KeyPair;
use support::writes::*;
use support::*;

/// A PostgreSQL cluster in a temp dir, listening only on a Unix socket; stopped on drop.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
}

fn as_postgres(bin: &Path, tool: &str) -> Command {
    // The server refuses to run as root; CI and this machine are root.
    if unsafe_is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    }
}

/// Runs `cmd` to its end; panics with its stderr if it fails. Its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn unsafe_is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl Cluster {
    fn start() -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("postgresql is installed (scripts/test.sh installs it)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|b| b.join("initdb").exists())
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        if unsafe_is_root() {
            assert!(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success());
        }
        let data = dir.path().join("data");
        run(as_postgres(&bin, "initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data));
        run(as_postgres(&bin, "pg_ctl")
            .arg("-D")
            .arg(&data)
            .arg("-o")
            .arg(format!(
                "-k {} -c listen_addresses=''",
                dir.path().display()
            ))
            .arg("-l")
            .arg(dir.path().join("log"))
            .args(["-w", "start"]));
        let c = Cluster { dir, bin };
        run(c.psql("postgres").args(["-c", "CREATE DATABASE palisade"]));
        c
    }

    /// `psql` on this cluster's socket, connected to `db`.
    fn psql(&self, db: &str) -> Command {
        let mut c = Command::new("psql");
        c.arg("-h")
            .arg(self.dir.path())
            .args(["-U", "postgres", "-d", db, "-q"]);
        c
    }

    /// The URL in the Unix-socket form SPEC §10 names.
    fn url(&self) -> String {
        format!(
            "postgresql://postgres@/palisade?host={}",
            self.dir.path().display()
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.dir.path().join("data"))
            .args(["-m", "immediate", "stop"])
            .output();
    }
}

async fn open(url: &str) -> PostgresStore {
    PostgresStore::open(
        Connect {
            url,
            pool_size: 4,
            statement_timeout: Duration::from_secs(2),
            retention: Default::default(),
        },
        Arc::new(KeyPair::from_seed(SIDECAR_SEED)),
    )
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sidecars_on_one_database_behave_as_one() {
    let cluster = Cluster::start();
    let url = cluster.url();
    let upstream = Upstream::start().await;
    let store_toml = format!("kind = \"postgres\"\nurl = \"{url}\"\n[ptcl]\npre_image = \"off\"\n");
    let replica = |upstream: &Upstream| {
        let dir = tempfile::tempdir().unwrap();
        let text = write_config(upstream, dir.path(), "", &store_toml);
        Palisade::start_in(dir, &text)
    };
    let a = replica(&upstream);
    let b = replica(&upstream);
    let agent = KeyPair::from_seed(AGENT_SEED);

    // The same epoch of one resource through both replicas at once: exactly one goes through.
    for round in 0..5 {
        let path = format!("/items/race-{round}");
        let la = lease_for(&agent, &path, 1, |_| {});
        let lb = lease_for(&agent, &path, 1, |_| {});
        let (ca, cb) = (http1_client(), http1_client());
        let (inv_a, inv_b) = (inverse(), inverse());
        let (ra, rb) = tokio::join!(
            send(&ca, put(&a, &path, Some(&la), Some(&inv_a))),
            send(&cb, put(&b, &path, Some(&lb), Some(&inv_b))),
        );
        let mut statuses = [ra.0.status, rb.0.status];
        statuses.sort();
        assert_eq!(
            statuses,
            [StatusCode::OK, StatusCode::CONFLICT],
            "round {round}: {}, {}",
            String::from_utf8_lossy(&ra.1),
            String::from_utf8_lossy(&rb.1)
        );
        let seen = upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count();
        assert_eq!(seen, 1, "round {round}: the upstream saw {seen} writes");
    }
    // An epoch accepted by one replica is stale on the other: epochs never go back.
    let path = "/items/moved";
    let lease = lease_for(&agent, path, 5, |_| {});
    let (parts, _) = send(
        &http1_client(),
        put(&a, path, Some(&lease), Some(&inverse())),
    )
    .await;
    assert_eq!(parts.status, StatusCode::OK);
    for epoch in [5, 3] {
        let lease = lease_for(&agent, path, epoch, |_| {});
        let (parts, body) = send(
            &http1_client(),
            put(&b, path, Some(&lease), Some(&inverse())),
        )
        .await;
        assert_eq!(
            parts.status,
            StatusCode::CONFLICT,
            "{}",
            String::from_utf8_lossy(&body)
        );
        let doc: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(doc["code"], "ERR_STALE_FENCE_EPOCH");
        assert_eq!(doc["current_epoch"], 5);
        assert_receipt_verifies(&doc["receipt"], "rejection");
    }

    // Writes from both replicas at once: one receipt chain, whole, in the database.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let p = if i % 2 == 0 { a.url("") } else { b.url("") };
        let lease = lease_for(&agent, &format!("/items/many-{i}"), 1, |_| {});
        tasks.push(tokio::spawn(async move {
            let req = http::Request::put(format!("{p}/items/many-{i}"))
                .header("content-type", "application/json")
                .header("agent-compensation-lease", lease)
                .header(
                    "agent-compensation-inverse",
                    base64::Engine::encode(
                        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                        inverse(),
                    ),
                )
                .body(full(r#"{"qty":1}"#))
                .unwrap();
            send(&http1_client(), req).await.0.status
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap(), StatusCode::OK);
    }
    let store = open(&url).await;
    let log = store.receipt_log().await.unwrap();
    // 5 commits + 5 rejections from the races, 1 + 2 for the stale epochs, 20 more commits.
    assert_eq!(log.receipts.len(), 33);
    let head = palisade_policy::receipt::verify_chain(
        log.receipts.iter().map(Vec::as_slice),
        &sidecar_trust(),
    )
    .unwrap();
    assert_eq!(head.count, 33);
    assert_eq!(store.epoch(&format!("{BASE}{path}")).await.unwrap(), 5);
    // `audit verify` walks the same chain while both sidecars run, the URL from url_env.
    let config = std::fs::read_to_string(a.dir.path().join("palisade.toml"))
        .unwrap()
        .replace(
            &format!("url = \"{url}\""),
            "url_env = \"TEST_PALISADE_STORE_URL\"",
        );
    let audit_config = a.dir.path().join("audit.toml");
    std::fs::write(&audit_config, config).unwrap();
    let out = Command::new(bin())
        .args(["audit", "verify", "--json", "--config"])
        .arg(&audit_config)
        .env("TEST_PALISADE_STORE_URL", &url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["receipts"].as_u64()),
        (Some(true), Some(33)),
        "{v}"
    );
    assert_eq!(v["head"], head.head.to_string());

    // The write lock is the database's: a second store (another replica) waits for it, and
    // gets it when the holder lets go, or when the holder's sessions end.
    let other = open(&url).await;
    let held = store.lock("r").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(300), other.lock("r")).await;
    assert!(waiting.is_err(), "two replicas held one resource's lock");
    drop(held);
    let got = tokio::time::timeout(Duration::from_secs(5), other.lock("r")).await;
    assert!(got.is_ok(), "the lock was not released");
    drop(got);
    drop(other);
    // A replica that dies holding a lock: another session (psql) takes the same advisory
    // lock our key derivation gives "s", then is killed with SIGKILL while idle, as a crashed
    // sidecar's lock connection is; the server ends the session and the lock with it.
    let mut holder = cluster
        .psql("palisade")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write as _;
        let stdin = holder.stdin.as_mut().unwrap();
        stdin
            .write_all(b"SELECT pg_advisory_lock(hashtextextended('s', 0));\n")
            .unwrap();
        stdin.flush().unwrap();
    }
    let mut taken = false;
    for _ in 0..100 {
        let granted = run(cluster
            .psql("palisade")
            .arg("-tAc")
            .arg("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"));
        if granted.trim() == "1" {
            taken = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(taken, "psql did not take the lock");
    let waiting = tokio::time::timeout(Duration::from_millis(300), store.lock("s")).await;
    assert!(
        waiting.is_err(),
        "the lock psql holds was granted to the store too"
    );
    holder.kill().unwrap(); // SIGKILL
    holder.wait().unwrap();
    let started = tokio::time::Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(10), store.lock("s")).await;
    assert!(
        got.is_ok(),
        "a dead session's lock was not released within 10 s"
    );
    eprintln!(
        "lock of a killed session released after {:?}",
        started.elapsed()
    );
    drop(got);

    // A database whose schema is newer than this build is refused, not written to.
    run(cluster
        .psql("palisade")
        .args(["-c", "INSERT INTO palisade_schema VALUES (999)"]));
    let refused = PostgresStore::open(
        Connect {
            url: &url,
            pool_size: 2,
            statement_timeout: Duration::from_secs(2),
            retention: Default::default(),
        },
        Arc::new(KeyPair::from_seed(SIDECAR_SEED)),
    )
    .await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("newer than this build")),
        "{:?}",
        refused.err()
    );
}
