//! A throw-away PostgreSQL cluster (Debian's `postgresql`: `initdb` + `pg_ctl`) in a temp
//! dir, one per test: a Unix socket (trust), and TLS on 127.0.0.1 and 127.0.0.2 (password),
//! with a server certificate for `localhost`/127.0.0.1 from a test CA. Stopped on drop.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// The role the sidecars use; its password is what must never be shown.
pub const ROLE: &str = "palisade_app";
/// The AIP-2.1 relay's configuration (the kernel of the SDK-signed test messages).
pub const RELAY: &str =
    "[aip2]\nkernels = { 84532 = \"0x9d25A874f046185d9237Cd4954C88D2B74B0021b\" }\n\
                     trusted_proxies = [\"127.0.0.1\"]\n";
pub const PASSWORD: &str = "Pw-7c1e9b44d2-never-shown";

/// A PostgreSQL cluster in a temp dir: a Unix socket (trust), and TLS on 127.0.0.1 and
/// 127.0.0.2 (password), with a server certificate for `localhost`/127.0.0.1 from a test CA.
pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub bin: PathBuf,
    pub port: u16,
    /// The CA that signed the server's certificate, and one that did not.
    pub ca: PathBuf,
    pub other_ca: PathBuf,
}

pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

pub fn as_postgres(bin: &Path, tool: &str) -> Command {
    // The server refuses to run as root; CI and this machine are root.
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(tool));
        c
    } else {
        Command::new(bin.join(tool))
    }
}

/// Runs `cmd` to its end; panics with its stderr if it fails. Its stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Cluster {
    pub fn start() -> Cluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("postgresql is installed (scripts/test.sh installs it)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .find(|b| b.join("initdb").exists())
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(dir.path());
        let server = pki.issue("localhost", true);
        std::fs::create_dir(dir.path().join("other")).unwrap();
        Pki::new(&dir.path().join("other")); // a CA that signed nothing here
        if is_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path()));
        }
        let data = dir.path().join("data");
        run(as_postgres(&bin, "initdb")
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(&data));
        let port = free_port();
        std::fs::write(data.join("server.crt"), &server.cert_pem).unwrap();
        std::fs::write(data.join("server.key"), &server.key_pem).unwrap();
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\nhost all all 127.0.0.0/8 scram-sha-256\n",
        )
        .unwrap();
        let mut conf = std::fs::read_to_string(data.join("postgresql.conf")).unwrap();
        conf.push_str(&format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1,127.0.0.2'\n\
             unix_socket_directories = '{}'\nssl = on\nssl_cert_file = 'server.crt'\n\
             ssl_key_file = 'server.key'\n",
            dir.path().display()
        ));
        std::fs::write(data.join("postgresql.conf"), conf).unwrap();
        if is_root() {
            run(Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&data));
        }
        run(Command::new("chmod")
            .arg("600")
            .arg(data.join("server.key")));
        let c = Cluster {
            bin,
            port,
            ca: dir.path().join("ca.pem"),
            other_ca: dir.path().join("other/ca.pem"),
            dir,
        };
        c.pg_start();
        run(c.psql("postgres").args([
            "-c",
            &format!("CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'"),
            "-c",
            &format!("CREATE DATABASE palisade OWNER {ROLE}"),
        ]));
        c
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn pg_start(&self) {
        run(as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "start"]));
    }

    /// As a crash: no checkpoint, every session cut.
    pub fn stop_immediate(&self) {
        run(as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"]));
    }

    /// `psql` as the superuser on the socket, connected to `db`.
    pub fn psql(&self, db: &str) -> Command {
        let mut c = Command::new("psql");
        c.arg("-h")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", db, "-q", "-v", "ON_ERROR_STOP=1"]);
        c
    }

    pub fn query(&self, sql: &str) -> String {
        run(self.psql("palisade").arg("-tAc").arg(sql))
            .trim()
            .to_owned()
    }

    /// The Unix-socket URL form SPEC §10 names (trust: no password).
    pub fn socket_url(&self) -> String {
        format!(
            "postgresql://{ROLE}@/palisade?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// A TLS URL to `host` with `sslmode` and, if given, `sslrootcert`.
    pub fn tls_url(&self, host: &str, password: &str, mode: &str, root: Option<&Path>) -> String {
        let mut url = format!(
            "postgresql://{ROLE}:{password}@{host}:{}/palisade?sslmode={mode}",
            self.port
        );
        if let Some(r) = root {
            url.push_str(&format!("&sslrootcert={}", r.display()));
        }
        url
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "stop"])
            .output();
    }
}
