//! The palisade binary, started as a child process with a config, and stopped; or the same
//! server run in the test's own process on a clock the test moves.

use super::*;

// ---- the palisade process ----------------------------------------------------------------

/// A sidecar running on a config written to a temp dir: the real binary running `palisade
/// run`, or (`Palisade::in_process`) the same `Server` in this process.
pub struct Palisade {
    runs: Runs,
    pub data: SocketAddr,
    pub admin: SocketAddr,
    pub logs: Arc<Mutex<Vec<String>>>,
    pub dir: tempfile::TempDir,
}

enum Runs {
    Child(Child),
    /// Stopped by dropping `stop` (the server drains), or with the test's runtime.
    InProcess {
        clock: Arc<palisade::clock::SetClock>,
        _stop: tokio::sync::oneshot::Sender<()>,
    },
}

impl Drop for Palisade {
    fn drop(&mut self) {
        if let Runs::Child(child) = &mut self.runs {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `dir/palisade.toml`: `config_body`, with the listen and admin addresses on port 0 unless it
/// names them.
fn write_config_file(dir: &Path, config_body: &str) -> PathBuf {
    let mut text = String::new();
    if !config_body.contains("[listen]") {
        text.push_str("[listen]\naddr = \"127.0.0.1:0\"\n");
    }
    if !config_body.contains("[admin]") {
        text.push_str("[admin]\naddr = \"127.0.0.1:0\"\n");
    }
    text.push_str(config_body);
    let path = dir.join("palisade.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_palisade")
}

impl Palisade {
    /// Starts `palisade run` with `config` (listen and admin addresses are set to port 0 here
    /// unless the config names them) and waits until it listens.
    pub fn start(config_body: &str) -> Palisade {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, config_body)
    }

    pub fn start_in(dir: tempfile::TempDir, config_body: &str) -> Palisade {
        Self::start_wrapped(dir, config_body, &[])
    }

    /// As [`Palisade::start_in`], run through `wrapper` (a command that ends by exec'ing its
    /// arguments, e.g. `unshare -m sh -c '…; exec "$0" "$@"'`): the binary and its arguments
    /// are appended to it. The process keeps its pid when the wrapper execs.
    pub fn start_wrapped(dir: tempfile::TempDir, config_body: &str, wrapper: &[&str]) -> Palisade {
        let path = write_config_file(dir.path(), config_body);
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin());
                c
            }
            None => Command::new(bin()),
        };
        let mut child = cmd
            .args(["run", "--config"])
            .arg(&path)
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let logs: Arc<Mutex<Vec<String>>> = Arc::default();
        let (tx, rx) = std::sync::mpsc::channel();
        for stream in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let logs = logs.clone();
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { break };
                    if line.contains("palisade listening") {
                        let _ = tx.send(line.clone());
                    }
                    logs.lock().unwrap().push(line);
                }
            });
        }
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "palisade did not start; logs:\n{}",
                    logs.lock().unwrap().join("\n")
                );
            }
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        Palisade {
            data: v["data"].as_str().unwrap().parse().unwrap(),
            admin: v["admin"].as_str().unwrap().parse().unwrap(),
            runs: Runs::Child(child),
            logs,
            dir,
        }
    }

    /// The same server `palisade run` starts, in this process on the test's runtime, reading
    /// time from a `SetClock` that starts at the wall clock's now: a test lets a lease, a hold
    /// or a window run out by moving it (`advance`), not by sleeping (docs/decisions.md). It
    /// has no logs, pid or signals; metrics are the process's, shared with other tests.
    pub async fn in_process(dir: tempfile::TempDir, config_body: &str) -> Palisade {
        let path = write_config_file(dir.path(), config_body);
        let config = palisade::config::Config::load(&path).unwrap_or_else(|e| panic!("{e:?}"));
        let clock = palisade::clock::SetClock::at(palisade::clock::WallClock::now_ms());
        let server = palisade::server::Server::bind_on(config, clock.clone())
            .await
            .unwrap_or_else(|e| panic!("palisade did not start: {e:#}"));
        let (data, admin) = (server.data_addr(), server.admin_addr());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(server.run(async move {
            let _ = stopped.await;
        }));
        Palisade {
            data,
            admin,
            runs: Runs::InProcess { clock, _stop: stop },
            logs: Arc::default(),
            dir,
        }
    }

    /// Moves an in-process sidecar's clock on.
    pub fn advance(&self, by: Duration) {
        match &self.runs {
            Runs::InProcess { clock, .. } => clock.advance(by),
            Runs::Child(_) => panic!("only an in-process sidecar's clock can be moved"),
        }
    }

    /// The child process of a sidecar started as one.
    pub fn child(&mut self) -> &mut Child {
        match &mut self.runs {
            Runs::Child(child) => child,
            Runs::InProcess { .. } => panic!("an in-process sidecar has no process"),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.data)
    }

    pub fn pid(&self) -> u32 {
        match &self.runs {
            Runs::Child(child) => child.id(),
            Runs::InProcess { .. } => panic!("an in-process sidecar has no process"),
        }
    }

    /// What the process wrote. An in-process sidecar's logs go to the test's own output, so
    /// this says so rather than reading as empty: a test must not judge an absence by it.
    pub fn logs(&self) -> String {
        match &self.runs {
            Runs::Child(_) => self.logs.lock().unwrap().join("\n"),
            Runs::InProcess { .. } => "(an in-process sidecar: no logs of its own)".to_owned(),
        }
    }

    /// Peak resident set size of the process so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kb * 1024
    }

    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Stops the sidecar (SIGTERM, then waits for it) and runs `palisade audit verify` on its
    /// configuration: whether the audit passed, and what it printed (stdout, stderr).
    pub fn stop_and_audit(mut self) -> (bool, String, String) {
        let config = self.dir.path().join("palisade.toml");
        self.sigterm();
        self.child().wait().unwrap();
        let out = Command::new(bin())
            .args(["audit", "verify", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}
