//! The `postgres` store (SPEC §10, issue 16) against a real PostgreSQL: a throw-away cluster
//! (Debian's `postgresql`: `initdb` + `pg_ctl`, a Unix socket and TLS on loopback, in a temp
//! dir) started by this test and stopped at its end, three sidecars in front of one upstream
//! sharing it (two on the socket, one over TLS `verify-full` with a password). One test
//! function, so the cluster starts once and the slow scenarios (a replica killed, the
//! database restarted, both under load) run in one process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "it/support/mod.rs"]
mod support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bytes::Bytes;
use http::StatusCode;
use http_body_util::BodyExt as _;
use palisade::store::postgres::{Connect, PostgresStore};
use palisade::store::{Store as _, StoreError, WriteIntent};
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

/// The role the sidecars use; its password is what must never be shown.
const ROLE: &str = "palisade_app";
/// The AIP-2.1 relay's configuration (the kernel of the SDK-signed test messages).
const RELAY: &str =
    "[aip2]\nkernels = { 84532 = \"0x9d25A874f046185d9237Cd4954C88D2B74B0021b\" }\n\
                     trusted_proxies = [\"127.0.0.1\"]\n";
const PASSWORD: &str = "Pw-7c1e9b44d2-never-shown";

/// A PostgreSQL cluster in a temp dir: a Unix socket (trust), and TLS on 127.0.0.1 and
/// 127.0.0.2 (password), with a server certificate for `localhost`/127.0.0.1 from a test CA.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    port: u16,
    /// The CA that signed the server's certificate, and one that did not.
    ca: PathBuf,
    other_ca: PathBuf,
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn as_postgres(bin: &Path, tool: &str) -> Command {
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
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl Cluster {
    fn start() -> Cluster {
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

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn pg_start(&self) {
        run(as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.path().join("log"))
            .args(["-w", "start"]));
    }

    /// As a crash: no checkpoint, every session cut.
    fn stop_immediate(&self) {
        run(as_postgres(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "immediate", "-w", "stop"]));
    }

    /// `psql` as the superuser on the socket, connected to `db`.
    fn psql(&self, db: &str) -> Command {
        let mut c = Command::new("psql");
        c.arg("-h")
            .arg(self.dir.path())
            .arg("-p")
            .arg(self.port.to_string())
            .args(["-U", "postgres", "-d", db, "-q", "-v", "ON_ERROR_STOP=1"]);
        c
    }

    fn query(&self, sql: &str) -> String {
        run(self.psql("palisade").arg("-tAc").arg(sql))
            .trim()
            .to_owned()
    }

    /// The Unix-socket URL form SPEC §10 names (trust: no password).
    fn socket_url(&self) -> String {
        format!(
            "postgresql://{ROLE}@/palisade?host={}&port={}",
            self.dir.path().display(),
            self.port
        )
    }

    /// A TLS URL to `host` with `sslmode` and, if given, `sslrootcert`.
    fn tls_url(&self, host: &str, password: &str, mode: &str, root: Option<&Path>) -> String {
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

fn connect(url: &str) -> Connect<'_> {
    Connect {
        url,
        pool_size: 4,
        statement_timeout: Duration::from_secs(2),
        retention: Default::default(),
        clock: Arc::new(palisade::clock::AnchoredClock::new()),
    }
}

fn relay_replicas(replicas: &[&Palisade; 3]) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(python.exists(), "run scripts/test.sh: it makes the venv");
    let out = Command::new(python)
        .current_dir(repo.join("tests/aip2"))
        .arg("relay_replicas.py")
        .args(replicas.iter().map(|p| p.url("")))
        .output()
        .unwrap();
    if !out.status.success() {
        let logs: Vec<String> = replicas
            .iter()
            .flat_map(|p| p.logs().lines().map(str::to_owned).collect::<Vec<_>>())
            .filter(|l| l.contains("relay") || l.contains("ERROR") || l.contains("WARN"))
            .take(40)
            .collect();
        panic!(
            "relay_replicas.py failed:\n{}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            logs.join("\n")
        );
    }
}

/// An expired relay message is listed nowhere, and the same message posted again is kept
/// anew under a newer cursor (the expired row goes in the same transaction).
async fn relay_expiry(url: &str) {
    use palisade::store::{RelayLimits, RelayMessage, RelayPosted, RelayQuery};
    let (one, two) = (open(url).await.unwrap(), open(url).await.unwrap());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let message = |expires_ms| RelayMessage {
        tx_id: format!("0x{}", "e1".repeat(32)),
        signature: format!("0x{}", "5a".repeat(65)),
        parties: [(84532, [7; 20]), (84532, [8; 20])],
        envelope: br#"{"type":"t","message":{}}"#.to_vec(),
        received_at_s: 1,
        expires_ms,
    };
    let limits = RelayLimits {
        per_tx: 50,
        total: 100_000,
    };
    let first = one.relay_post(message(now_ms + 300), limits).await.unwrap();
    let RelayPosted::Stored { cursor } = first else {
        panic!("{first:?}")
    };
    let q = RelayQuery::Tx(format!("0x{}", "e1".repeat(32)));
    assert_eq!(two.relay_page(&q, 0, 50).await.unwrap().len(), 1);
    assert_eq!(
        two.relay_post(message(now_ms + 300), limits).await.unwrap(),
        RelayPosted::Duplicate { cursor }
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(two.relay_page(&q, 0, 50).await.unwrap().is_empty());
    let inbox = RelayQuery::Party {
        address: [8; 20],
        chain: Some(84532),
    };
    assert!(one.relay_page(&inbox, 0, 100).await.unwrap().is_empty());
    match two
        .relay_post(message(now_ms + 60_000), limits)
        .await
        .unwrap()
    {
        RelayPosted::Stored { cursor: again } => assert!(again > cursor),
        other => panic!("{other:?}"),
    }
    assert_eq!(one.relay_page(&inbox, 0, 100).await.unwrap().len(), 1);
}

/// RCNS records (issue 21) on two stores sharing the database, as two replicas: a contract
/// made through one is found, refused as a duplicate, revoked and listed through the other;
/// the per-agent cap counts both; an expired record is gone and its key free again.
async fn rcns_shared(url: &str) {
    use palisade::store::{RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord};
    let (one, two) = (open(url).await.unwrap(), open(url).await.unwrap());
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let record = |key: &str, owner: &str, expires_ms| RcnsRecord {
        kind: RcnsKind::Contract,
        key: key.into(),
        owner: owner.into(),
        body: json!({"synthesis_id": key, "revoked": false}),
        expires_ms,
    };
    let create = RcnsPutMode::Create {
        per_owner: 2,
        total: 100,
    };
    let later = now_ms + 60_000;
    assert_eq!(
        one.rcns_put(record("syn_1", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    match two
        .rcns_put(record("syn_1", "a", later), create)
        .await
        .unwrap()
    {
        RcnsPut::Exists(old) => assert_eq!(old.owner, "a"),
        other => panic!("{other:?}"),
    }
    let got = two
        .rcns_get(RcnsKind::Contract, "syn_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.body["synthesis_id"], "syn_1");
    assert_eq!(
        two.rcns_put(record("syn_2", "a", now_ms + 300), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    assert_eq!(
        one.rcns_put(record("syn_3", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::OwnerFull
    );
    assert_eq!(
        one.rcns_put(record("syn_4", "b", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
    let mut revoked = got.clone();
    revoked.body["revoked"] = json!(true);
    assert_eq!(
        two.rcns_put(revoked, RcnsPutMode::Replace).await.unwrap(),
        RcnsPut::Stored
    );
    let seen = one
        .rcns_get(RcnsKind::Contract, "syn_1")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.body["revoked"], true);
    let mine = one
        .rcns_list(RcnsKind::Contract, Some("a"), 10)
        .await
        .unwrap();
    assert_eq!(
        mine.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["syn_1", "syn_2"]
    );
    assert_eq!(
        two.rcns_list(RcnsKind::Contract, None, 10)
            .await
            .unwrap()
            .len(),
        3
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(two
        .rcns_get(RcnsKind::Contract, "syn_2")
        .await
        .unwrap()
        .is_none());
    // The expired one no longer counts: agent a may hold another.
    assert_eq!(
        two.rcns_put(record("syn_3", "a", later), create)
            .await
            .unwrap(),
        RcnsPut::Stored
    );
}

/// Two sidecars with the example bundle and `[rcns]` on the shared database: a contract
/// PROPOSEd through one is listed and inspected through the other, revoked on the other's
/// admin API, and seen revoked by the first.
/// Two RCNS replicas on the database, and the id of a persistent contract left in force, for
/// the store-down phase ([`rcns_store_down`]).
async fn rcns_replicas(upstream: &Upstream, url: &str) -> (Palisade, Palisade, String) {
    use http::Method;
    let bundle = tempfile::tempdir().unwrap();
    palisade::cli::sample_bundle::write(bundle.path()).unwrap();
    let b = support::bundles::BundleFiles::in_dir(bundle.path());
    let token = "Bearer tok-shared";
    let identity = palisade_policy::digest::Sha256Digest::of(token.as_bytes()).to_hex();
    let scopes = "rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write";
    let replica = || {
        let dir = tempfile::tempdir().unwrap();
        let callers = dir.path().join("callers.json");
        let doc = json!({"callers": [{"identity": format!("authz:sha256:{identity}"),
            "agent_id": "agent-shared", "scopes": scopes.split(' ').collect::<Vec<_>>(),
            "trust_tier": 1}]});
        std::fs::write(&callers, doc.to_string()).unwrap();
        let extra = format!(
            "kind = \"postgres\"\nurl = \"{url}\"\n{}[rcns]\ncallers = \"{}\"\n",
            b.rich_toml(""),
            callers.display()
        );
        let text = write_config(upstream, dir.path(), "", &extra);
        Palisade::start_in(dir, &text)
    };
    let (one, two) = (replica(), replica());
    let call = |p: &Palisade, method: &str, path: &str, body: Option<Value>| {
        let req = http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(p.url(path))
            .header("authorization", token)
            .header("allow-rcns", "true")
            .header("authority-scope", scopes)
            .body(full(body.map(|b| b.to_string()).unwrap_or_default()))
            .unwrap();
        async move {
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve"}}, "persistent": true}});
    let (status, made) = call(&one, "PROPOSE", "/", Some(proposal)).await;
    assert_eq!(status.as_u16(), 263, "{made}");
    let id = made["synthesis_id"].as_str().unwrap().to_owned();
    let (status, list) = call(&two, "DISCOVER", "/contracts", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list[0]["synthesis_id"], id.as_str(), "{list}");
    let (status, _) = admin_post(two.admin, &format!("/admin/v1/rcns/contracts/{id}/revoke")).await;
    assert_eq!(status, StatusCode::OK);
    let (_, view) = call(&one, "INSPECT", &format!("/contracts/{id}"), None).await;
    assert_eq!(view["revoked"], true, "{view}");
    assert_eq!(view["contract_hash"], made["contract_hash"]);
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve again"}},
        "persistent": true}});
    let (status, kept) = call(&two, "PROPOSE", "/", Some(proposal)).await;
    assert_eq!(status.as_u16(), 263, "{kept}");
    let kept = kept["synthesis_id"].as_str().unwrap().to_owned();
    (one, two, kept)
}

/// RCNS while the database is down (issue 21's refusal path): a PROPOSE and an invocation of
/// a contract in force are both 503 `ERR_STORE_UNAVAILABLE`, and the upstream sees nothing.
async fn rcns_store_down(replicas: &(Palisade, Palisade, String), upstream: &Upstream) {
    use http::Method;
    let (one, two, id) = replicas;
    let scopes = "rcns:negotiate erp:stock:reserve erp:items:write erp:allocations:write";
    // The load running beside this phase sends `/items/load-*`; anything else is ours.
    let ours = || {
        upstream
            .requests()
            .iter()
            .filter(|r| !r.path_and_query.starts_with("/items/load-"))
            .count()
    };
    let before = ours();
    let call = |p: &Palisade, method: &str, headers: Vec<(&str, String)>, body: Value| {
        let mut req = http::Request::builder()
            .method(Method::from_bytes(method.as_bytes()).unwrap())
            .uri(p.url(if method == "PROPOSE" {
                "/"
            } else {
                "/stock-reservations"
            }))
            .header("authorization", "Bearer tok-shared")
            .header("allow-rcns", "true")
            .header("authority-scope", scopes);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        let req = req.body(full(body.to_string())).unwrap();
        async move {
            let (parts, bytes) = send(&http1_client(), req).await;
            (
                parts.status,
                serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
            )
        }
    };
    let proposal = json!({"method": "PROPOSE", "parameters": {"endpoint": {"method": "RESERVE",
        "path": "/stock-reservations", "semantic": {"intent": "reserve while down"}}}});
    let (status, body) = call(one, "PROPOSE", vec![], proposal).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "PROPOSE: {body}");
    assert_eq!(body["code"], "ERR_STORE_UNAVAILABLE", "{body}");
    let input = json!({"sku": "BOLT-9", "qty": 4, "warehouse": "BER-1", "order": "SO-1234"});
    let headers = vec![("contract-synthesized", id.clone())];
    let (status, body) = call(two, "RESERVE", headers, input).await;
    assert_eq!(
        status,
        StatusCode::SERVICE_UNAVAILABLE,
        "invocation: {body}"
    );
    assert_eq!(body["code"], "ERR_STORE_UNAVAILABLE", "{body}");
    assert_eq!(
        ours(),
        before,
        "no RCNS step reached the upstream while the store was down"
    );
    for p in [one, two] {
        assert!(
            drift_events(p)
                .iter()
                .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"),
            "no drift event for an RCNS request refused while the store was down"
        );
    }
}

async fn open(url: &str) -> Result<PostgresStore, StoreError> {
    PostgresStore::open(connect(url), Arc::new(KeyPair::from_seed(SIDECAR_SEED))).await
}

/// One request's answer, or `None` if the connection failed or it took over 15 s.
async fn try_send(req: http::Request<BoxBody>) -> Option<(StatusCode, http::HeaderMap, Bytes)> {
    let client = http1_client();
    let resp = tokio::time::timeout(Duration::from_secs(15), client.request(req))
        .await
        .ok()?
        .ok()?;
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.ok()?.to_bytes();
    Some((parts.status, parts.headers, bytes))
}

fn leased_put(
    base: &str,
    path: &str,
    lease: &str,
    key: Option<&str>,
    body: &str,
) -> http::Request<BoxBody> {
    let mut b = http::Request::put(format!("{base}{path}"))
        .header("content-type", "application/json")
        .header("agent-compensation-lease", lease)
        .header(
            "agent-compensation-inverse",
            URL_SAFE_NO_PAD.encode(inverse()),
        );
    if let Some(k) = key {
        b = b.header("idempotency-key", k);
    }
    b.body(full(body.to_owned())).unwrap()
}

/// What a client got for one write.
#[derive(Debug, Clone)]
struct Got {
    status: Option<StatusCode>,
    code: Option<String>,
    /// The receipt the client was given (header or problem body), by id.
    receipt: Option<String>,
}

fn got(answer: Option<(StatusCode, http::HeaderMap, Bytes)>) -> Got {
    let Some((status, headers, body)) = answer else {
        return Got {
            status: None,
            code: None,
            receipt: None,
        };
    };
    let doc: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let receipt = headers
        .get("agent-commit-receipt")
        .and_then(|v| URL_SAFE_NO_PAD.decode(v.as_bytes()).ok())
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .or_else(|| doc.get("receipt").cloned())
        .and_then(|r| r["receipt_id"].as_str().map(str::to_owned));
    Got {
        status: Some(status),
        code: doc["code"].as_str().map(str::to_owned),
        receipt,
    }
}

/// Leased writes to `/items/load-{0..8}` with ever-growing epochs, from `tasks` concurrent
/// clients spread over `targets`, until `stop`.
async fn load(
    targets: Vec<String>,
    tasks: usize,
    next: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) -> Vec<Got> {
    let agent = Arc::new(KeyPair::from_seed(AGENT_SEED));
    let mut handles = Vec::new();
    for t in 0..tasks {
        let (targets, next, stop, agent) =
            (targets.clone(), next.clone(), stop.clone(), agent.clone());
        handles.push(tokio::spawn(async move {
            let mut out = Vec::new();
            let mut i = t;
            while !stop.load(Ordering::Relaxed) {
                let base = &targets[i % targets.len()];
                i += 1;
                let epoch = next.fetch_add(1, Ordering::Relaxed);
                let path = format!("/items/load-{}", epoch % 8);
                let lease = lease_for(&agent, &path, epoch, |_| {});
                let g = got(try_send(leased_put(base, &path, &lease, None, r#"{"qty":1}"#)).await);
                if g.status.is_none() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                out.push(g);
            }
            out
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        all.extend(h.await.unwrap());
    }
    all
}

/// Per path, the fence tokens of the PUTs the upstream saw, in arrival order, must rise.
fn assert_epochs_rise(upstream: &Upstream, prefix: &str) {
    let mut last: HashMap<String, u64> = HashMap::new();
    for r in upstream.requests() {
        if r.method != "PUT" || !r.path_and_query.starts_with(prefix) {
            continue;
        }
        let epoch: u64 = r.headers["agent-fence-token"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        if let Some(prev) = last.insert(r.path_and_query.clone(), epoch) {
            assert!(
                epoch > prev,
                "{}: epoch {epoch} after {prev}",
                r.path_and_query
            );
        }
    }
}

/// The chain in the database verifies, and holds every receipt in `given`.
async fn assert_chain_holds(url: &str, given: &[Got]) -> usize {
    let store = open(url).await.unwrap();
    let log = store.receipt_log().await.unwrap();
    let head = palisade_policy::receipt::verify_chain(
        log.receipts.iter().map(Vec::as_slice),
        &sidecar_trust(),
    )
    .unwrap();
    let ids: HashSet<String> = log
        .receipts
        .iter()
        .map(|r| {
            serde_json::from_slice::<Value>(r).unwrap()["receipt_id"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    for g in given {
        if let Some(id) = &g.receipt {
            assert!(
                ids.contains(id),
                "a receipt a client got is not in the chain: {id}"
            );
        }
    }
    head.count
}

/// `palisade audit verify --json` with the store URL in `TEST_PALISADE_STORE_URL` (as
/// `store.url_env` names it), while the sidecars run; its JSON line.
fn audit_verify(config: &Path, url: &str) -> Value {
    let out = Command::new(bin())
        .args(["audit", "verify", "--json", "--config"])
        .arg(config)
        .env("TEST_PALISADE_STORE_URL", url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

async fn readyz(p: &Palisade) -> Option<StatusCode> {
    let req = http::Request::get(format!("http://{}/readyz", p.admin))
        .body(full(""))
        .unwrap();
    try_send(req).await.map(|a| a.0)
}

/// Polls `/readyz` until it answers `want`; how long that took.
async fn until_ready_is(p: &Palisade, want: StatusCode, within: Duration) -> Duration {
    let started = tokio::time::Instant::now();
    while started.elapsed() < within {
        if readyz(p).await == Some(want) {
            return started.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("/readyz did not answer {want} within {within:?}");
}

/// A TCP relay to the database that, once armed, passes on the next `COMMIT` a client sends
/// and then cuts that connection before the server's answer can come back: the commit happens,
/// the client cannot know it did.
struct CommitCutter {
    addr: std::net::SocketAddr,
    armed: Arc<AtomicBool>,
    cut: Arc<AtomicU64>,
}

impl CommitCutter {
    async fn start(to: std::net::SocketAddr) -> CommitCutter {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let armed = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicU64::new(0));
        let (armed2, cut2) = (armed.clone(), cut.clone());
        tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                let Ok(server) = tokio::net::TcpStream::connect(to).await else {
                    continue;
                };
                let (armed, cut) = (armed2.clone(), cut2.clone());
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let back = tokio::spawn(async move {
                        let _ = tokio::io::copy(&mut sr, &mut cw).await;
                    });
                    let mut buf = vec![0u8; 64 * 1024];
                    loop {
                        let n = match cr.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => n,
                        };
                        if sw.write_all(&buf[..n]).await.is_err() {
                            break;
                        }
                        let commit = buf[..n].windows(7).any(|w| w == b"COMMIT\0");
                        if commit && armed.swap(false, Ordering::SeqCst) {
                            // The server has the COMMIT; the client never hears back.
                            back.abort();
                            cut.fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(200)).await;
                            return;
                        }
                    }
                    back.abort();
                });
            }
        });
        CommitCutter { addr, armed, cut }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_sidecars_on_one_database_behave_as_one() {
    let cluster = Cluster::start();
    let socket = cluster.socket_url();
    let tls = cluster.tls_url("localhost", PASSWORD, "verify-full", Some(&cluster.ca));
    let upstream = Upstream::start().await;
    let replica_with = |url: &str, pre_image: &str| {
        let dir = tempfile::tempdir().unwrap();
        // Every replica serves the AIP-2.1 relay too, from the shared database.
        let store = format!(
            "kind = \"postgres\"\nurl = \"{url}\"\n[ptcl]\npre_image = \"{pre_image}\"\n{RELAY}"
        );
        let text = write_config(&upstream, dir.path(), "", &store);
        Palisade::start_in(dir, &text)
    };
    let replica = |url: &str| replica_with(url, "off");
    let a = replica(&socket);
    let b = replica(&socket);
    let c = replica(&tls);
    let agent = KeyPair::from_seed(AGENT_SEED);
    let mut given: Vec<Got> = Vec::new();

    // Replica c's sessions are TLS, as `verify-full` asked.
    let tls_sessions = cluster.query(&format!(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE a.usename = '{ROLE}' AND s.ssl"
    ));
    assert_ne!(tls_sessions, "0", "replica c is not on TLS");

    // 64 writes with one epoch to one resource, spread over the three at once: one goes.
    let path = "/items/race";
    let mut tasks = Vec::new();
    for i in 0..64 {
        let base = [&a, &b, &c][i % 3].url("");
        let lease = lease_for(&agent, path, 1, |_| {});
        tasks.push(tokio::spawn(async move {
            got(try_send(leased_put(&base, path, &lease, None, r#"{"qty":1}"#)).await)
        }));
    }
    let mut ok = 0;
    for t in tasks {
        let g = t.await.unwrap();
        match g.status {
            Some(StatusCode::OK) => ok += 1,
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            other => panic!("{other:?} {g:?}"),
        }
        assert!(g.receipt.is_some(), "{g:?}");
        given.push(g);
    }
    assert_eq!(ok, 1, "writes forwarded for one epoch");
    let seen = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == path)
        .count();
    assert_eq!(seen, 1, "the upstream saw {seen} writes");

    // 1,000 mixed writes from all three: fresh epochs racing each other, and stale ones.
    let next = Arc::new(AtomicU64::new(1));
    let mut tasks = Vec::new();
    for t in 0..16 {
        let bases: Vec<String> = [&a, &b, &c].iter().map(|p| p.url("")).collect();
        let next = next.clone();
        let agent = KeyPair::from_seed(AGENT_SEED);
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            for i in 0..(1000 / 16 + usize::from(t < 1000 % 16)) {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let path = format!("/items/mix-{}", n % 10);
                // One in five is deliberately stale (an epoch long spent, or never beaten).
                let epoch = if i % 5 == 4 { 1 } else { n + 1 };
                let lease = lease_for(&agent, &path, epoch, |_| {});
                let base = &bases[(t + i) % 3];
                let answer = got(try_send(leased_put(base, &path, &lease, None, "{}")).await);
                out.push((path, epoch, answer));
            }
            out
        }));
    }
    let mut accepted: HashMap<String, u64> = HashMap::new();
    let mut total = 0;
    for t in tasks {
        for (path, epoch, g) in t.await.unwrap() {
            total += 1;
            match g.status {
                Some(StatusCode::OK) => {
                    let e = accepted.entry(path).or_default();
                    *e = (*e).max(epoch);
                }
                Some(StatusCode::CONFLICT) => {
                    assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
                }
                other => panic!("{other:?} {g:?}"),
            }
            given.push(g);
        }
    }
    assert_eq!(total, 1000);
    assert_epochs_rise(&upstream, "/items/mix-");
    let store = open(&socket).await.unwrap();
    for (path, max) in &accepted {
        assert_eq!(
            store.epoch(&format!("{BASE}{path}")).await.unwrap(),
            *max,
            "{path}"
        );
    }

    // An idempotency key retried at another replica is replayed, not run; with another body
    // it is refused; the same key at two replicas at once runs once.
    let lease = lease_for(&agent, "/items/idem", 1, |_| {});
    let first = try_send(leased_put(
        &a.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":7}"#,
    ))
    .await
    .unwrap();
    assert_eq!(first.0, StatusCode::OK);
    let again = try_send(leased_put(
        &b.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":7}"#,
    ))
    .await
    .unwrap();
    assert_eq!(again.0, StatusCode::OK);
    assert_eq!(again.1["idempotent-replayed"], "true");
    assert_eq!(
        again.1["agent-commit-receipt"],
        first.1["agent-commit-receipt"]
    );
    let other = try_send(leased_put(
        &c.url(""),
        "/items/idem",
        &lease,
        Some("k-1"),
        r#"{"qty":8}"#,
    ))
    .await
    .unwrap();
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY);
    for round in 0..10 {
        let path = format!("/items/idem-{round}");
        let key = format!("k-race-{round}");
        let lease = lease_for(&agent, &path, 1, |_| {});
        let (x, y) = tokio::join!(
            try_send(leased_put(&a.url(""), &path, &lease, Some(&key), "{}")),
            try_send(leased_put(&c.url(""), &path, &lease, Some(&key), "{}")),
        );
        let (x, y) = (got(x), got(y));
        let codes = [x.code.as_deref(), y.code.as_deref()];
        assert!(
            x.status == Some(StatusCode::OK) || y.status == Some(StatusCode::OK),
            "{x:?} {y:?}"
        );
        assert!(
            codes
                .iter()
                .all(|c| c.is_none() || *c == Some("ERR_IDEMPOTENCY_IN_FLIGHT")),
            "{x:?} {y:?}"
        );
        let runs = upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count();
        assert_eq!(runs, 1, "round {round}: the key ran {runs} times");
    }
    // A key refused before forwarding stays usable, at any replica.
    let stale = lease_for(&agent, "/items/idem", 1, |_| {});
    let refused = try_send(leased_put(
        &a.url(""),
        "/items/idem",
        &stale,
        Some("k-2"),
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(refused.0, StatusCode::CONFLICT);
    let fresh = lease_for(&agent, "/items/idem", 2, |_| {});
    // The refused request released its reservation before it was answered.
    let status = try_send(leased_put(
        &b.url(""),
        "/items/idem",
        &fresh,
        Some("k-2"),
        "{}",
    ))
    .await
    .map(|a| a.0);
    assert_eq!(status, Some(StatusCode::OK));

    // An escrow held on one replica is approved through another's admin API, once.
    let lease = lease_for(&agent, "/items/escrowed", 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
    });
    let held = try_send(leased_put(
        &a.url(""),
        "/items/escrowed",
        &lease,
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(
        held.0,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&held.2)
    );
    let id = serde_json::from_slice::<Value>(&held.2).unwrap()["escrow_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let escrowed = || {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == "/items/escrowed")
            .count()
    };
    assert_eq!(escrowed(), 0);
    let (status, doc) = admin_post(b.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::OK, "{doc}");
    assert_eq!(escrowed(), 1);
    let (status, _) = admin_post(c.admin, &format!("/admin/v1/escrow/{id}/approve")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(escrowed(), 1, "approved twice");
    // No replica lists it as open any more.
    let (_, list) = admin_get(a.admin, "/admin/v1/escrow").await;
    assert_eq!(list, r#"{"escrows":[]}"#);

    // A write committed through one replica is compensated through another, once.
    let lease = lease_for(&agent, "/items/undo", 1, |_| {});
    let lease_id = serde_json::from_slice::<Value>(&URL_SAFE_NO_PAD.decode(&lease).unwrap())
        .unwrap()["lease_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        try_send(leased_put(&a.url(""), "/items/undo", &lease, None, "{}"))
            .await
            .unwrap()
            .0,
        StatusCode::OK
    );
    let compensate = |p: &Palisade| {
        http::Request::post(p.url(&format!(
            "/.well-known/ptcl/v1/leases/{lease_id}/compensate"
        )))
        .body(full(""))
        .unwrap()
    };
    let done = got(try_send(compensate(&c)).await);
    assert_eq!(done.status, Some(StatusCode::OK), "{done:?}");
    let inverse_sent = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == "/items/1")
        .count();
    assert_eq!(inverse_sent, 1);
    let twice = got(try_send(compensate(&b)).await);
    assert_eq!(
        twice.code.as_deref(),
        Some("ERR_ALREADY_COMPENSATED"),
        "{twice:?}"
    );
    given.extend([done, twice]);

    // The AIP-2.1 negotiation relay is one relay across the replicas: a message posted on one
    // is delivered (verified by the agirails SDK) from another and is a duplicate at the
    // third, the per-transaction cap holds for posts racing on all three, and a poller paging
    // an inbox misses nothing while posts commit on other replicas.
    relay_replicas(&[&a, &b, &c]);
    relay_expiry(&socket).await;
    rcns_shared(&socket).await;
    let rcns = rcns_replicas(&upstream, &socket).await;

    // A replica killed (SIGKILL) under load, holding locks: the others carry on.
    let next = Arc::new(AtomicU64::new(1_000_000));
    let stop = Arc::new(AtomicBool::new(false));
    let loader = tokio::spawn(load(
        vec![a.url(""), b.url(""), c.url("")],
        12,
        next.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed_at = next.load(Ordering::Relaxed);
    let mut c = c;
    c.child.kill().unwrap();
    c.child.wait().unwrap();
    let c_logs = c.logs();
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let under_kill = loader.await.unwrap();
    let after = next.load(Ordering::Relaxed);
    assert!(
        after > killed_at + 50,
        "the others stalled after the kill: {killed_at} → {after}"
    );
    for g in &under_kill {
        match g.status {
            None | Some(StatusCode::OK) => {}
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            other => panic!("{other:?} {g:?}"),
        }
    }
    let ok_after: usize = under_kill
        .iter()
        .filter(|g| g.status == Some(StatusCode::OK))
        .count();
    assert!(ok_after > 0);
    given.extend(under_kill);
    assert_epochs_rise(&upstream, "/items/load-");

    // The database stopped as by a crash, under load, then back: writes get 503 and reach no
    // one while it is down, reads flow, /readyz follows within 5 s, no sidecar restarts.
    let stop = Arc::new(AtomicBool::new(false));
    let loader = tokio::spawn(load(
        vec![a.url(""), b.url("")],
        8,
        next.clone(),
        stop.clone(),
    ));
    tokio::time::sleep(Duration::from_secs(1)).await;
    cluster.stop_immediate();
    let went = until_ready_is(&a, StatusCode::SERVICE_UNAVAILABLE, Duration::from_secs(5)).await;
    // Writes in flight when it went may have been forwarded; none after.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let puts = || {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .count()
    };
    let puts_down = puts();
    let read = try_send(
        http::Request::get(a.url("/items/load-1"))
            .body(full(""))
            .unwrap(),
    )
    .await
    .unwrap();
    assert_eq!(read.0, StatusCode::OK, "reads flow while the store is down");
    let down = got(try_send(leased_put(
        &b.url(""),
        "/items/down",
        &lease_for(&agent, "/items/down", 1, |_| {}),
        None,
        "{}",
    ))
    .await);
    assert_eq!(
        down.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{down:?}"
    );
    assert_eq!(down.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    assert!(
        down.receipt.is_none(),
        "a receipt with nowhere durable to keep it"
    );
    assert!(
        drift_events(&b)
            .iter()
            .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"),
        "no drift event for a write refused while the store was down"
    );
    rcns_store_down(&rcns, &upstream).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        puts(),
        puts_down,
        "a write reached the upstream while the store was down"
    );
    cluster.pg_start();
    let came = until_ready_is(&a, StatusCode::OK, Duration::from_secs(5)).await;
    until_ready_is(&b, StatusCode::OK, Duration::from_secs(5)).await;
    let recovered_from = next.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let under_restart = loader.await.unwrap();
    eprintln!(
        "database down: /readyz 503 after {went:?}, 200 after {came:?} of its return; {} writes, {} × 503",
        under_restart.len(),
        under_restart.iter().filter(|g| g.status == Some(StatusCode::SERVICE_UNAVAILABLE)).count()
    );
    let mut unavailable = 0;
    for g in &under_restart {
        match g.status {
            Some(StatusCode::OK) => {}
            Some(StatusCode::CONFLICT) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STALE_FENCE_EPOCH"))
            }
            Some(StatusCode::SERVICE_UNAVAILABLE) => {
                assert_eq!(g.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
                unavailable += 1;
            }
            other => panic!("{other:?} {g:?}"),
        }
    }
    assert!(
        unavailable > 0,
        "no write was refused while the database was down"
    );
    let ok_since = try_send(leased_put(
        &a.url(""),
        "/items/after",
        &lease_for(&agent, "/items/after", 1, |_| {}),
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(
        ok_since.0,
        StatusCode::OK,
        "writes resume without a restart"
    );
    assert!(next.load(Ordering::Relaxed) > recovered_from);
    given.extend(under_restart);
    assert_epochs_rise(&upstream, "/items/load-");

    // Every receipt any client got is in the one chain, which verifies, also by `audit
    // verify` while the sidecars run (the URL from store.url_env).
    let count = assert_chain_holds(&socket, &given).await;
    let config = std::fs::read_to_string(a.dir.path().join("palisade.toml"))
        .unwrap()
        .replace(
            &format!("url = \"{socket}\""),
            "url_env = \"TEST_PALISADE_STORE_URL\"",
        );
    let audit_config = a.dir.path().join("audit.toml");
    std::fs::write(&audit_config, config).unwrap();
    let v = audit_verify(&audit_config, &socket);
    assert_eq!(v["ok"], true, "{v}");
    assert!(v["receipts"].as_u64().unwrap() >= count as u64, "{v}");

    // A commit whose answer was lost (the connection cut after COMMIT went out): the write is
    // refused as uncertain and reaches no one, its fence did advance, and a retry under the
    // same lease is refused as stale, never run.
    let cutter = CommitCutter::start(format!("127.0.0.1:{}", cluster.port).parse().unwrap()).await;
    let through_cutter = format!(
        "postgresql://{ROLE}:{PASSWORD}@{}/palisade?sslmode=disable",
        cutter.addr
    );
    let d = replica(&through_cutter);
    let lease = lease_for(&agent, "/items/uncertain", 3, |_| {});
    let writes_to = |path: &str| {
        upstream
            .requests()
            .iter()
            .filter(|r| r.method == "PUT" && r.path_and_query == path)
            .count()
    };
    cutter.armed.store(true, Ordering::SeqCst);
    let lost = got(try_send(leased_put(
        &d.url(""),
        "/items/uncertain",
        &lease,
        None,
        "{}",
    ))
    .await);
    assert_eq!(cutter.cut.load(Ordering::SeqCst), 1, "no commit was cut");
    assert_eq!(
        lost.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{lost:?}"
    );
    assert_eq!(lost.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    // The store answers again (a new connection), so this refusal has its receipt.
    assert!(lost.receipt.is_some(), "{lost:?}");
    assert!(drift_events(&d)
        .iter()
        .any(|e| e["code"] == "ERR_STORE_UNAVAILABLE"));
    assert_eq!(writes_to("/items/uncertain"), 0);
    assert_eq!(
        store
            .epoch(&format!("{BASE}/items/uncertain"))
            .await
            .unwrap(),
        3,
        "the commit happened"
    );
    let retry = got(try_send(leased_put(
        &d.url(""),
        "/items/uncertain",
        &lease,
        None,
        "{}",
    ))
    .await);
    assert_eq!(
        retry.code.as_deref(),
        Some("ERR_STALE_FENCE_EPOCH"),
        "{retry:?}"
    );
    assert_eq!(
        writes_to("/items/uncertain"),
        0,
        "the uncertain write was run on a retry"
    );
    assert!(d.logs().contains("commit outcome unknown"), "{}", d.logs());
    given.push(retry);
    drop(d);

    // A write whose resource lock is lost while it is checked (the lock's session ended, as
    // by a database restart): refused, nothing sent. The lock is taken before the pre-image
    // GET, which the upstream answers slowly here; the session is ended during that wait.
    let e = replica_with(&socket, "fetch");
    let path = "/slow/1500";
    let pre = palisade_policy::digest::Sha256Digest::of(b"slow done").to_string();
    let lease = lease_for(&agent, path, 1, |f| {
        f.insert("pre_image_state_hash".into(), json!(pre));
    });
    let sending = tokio::spawn(try_send(leased_put(&e.url(""), path, &lease, None, "{}")));
    let mut ended = String::from("0");
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        ended = cluster.query(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted",
        );
        if ended != "0" {
            break;
        }
    }
    assert_eq!(ended, "1", "the write never took its lock");
    let refused = got(sending.await.unwrap());
    assert_eq!(
        refused.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{refused:?}"
    );
    assert_eq!(refused.code.as_deref(), Some("ERR_STORE_UNAVAILABLE"));
    assert!(
        refused.receipt.is_some(),
        "the store still answers: the refusal has its receipt"
    );
    assert!(drift_events(&e)
        .iter()
        .any(|ev| ev["code"] == "ERR_STORE_UNAVAILABLE"));
    assert!(e.logs().contains("write lock was lost"), "{}", e.logs());
    let sent = upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && r.path_and_query == path)
        .count();
    assert_eq!(sent, 0, "a write went out under a lost lock");
    drop(e);

    // The password is nowhere a sidecar, its metrics or an operator command shows.
    let (_, metrics) = admin_get(a.admin, "/metrics").await;
    for (what, text) in [
        ("c's logs", c_logs.as_str()),
        ("a's logs", &a.logs()),
        ("metrics", &metrics),
    ] {
        assert!(!text.contains(PASSWORD), "{what} show the password");
    }
    let wrong = "Wrong-pw-5d1f-not-shown";
    let dir = tempfile::tempdir().unwrap();
    let cfg = |name: &str, url: &str| {
        let text = write_config(
            &upstream,
            dir.path(),
            "",
            &format!("kind = \"postgres\"\nurl = \"{url}\"\n"),
        );
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, text).unwrap();
        path
    };
    let good = cfg("good", &tls);
    let out = Command::new(bin())
        .args(["store", "check", "--config"])
        .arg(&good)
        .output()
        .unwrap();
    let printed =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}");
    assert!(printed.contains("schema version 5"), "{printed}");
    assert!(!printed.contains(PASSWORD));
    let bad = cfg(
        "bad",
        &cluster.tls_url("localhost", wrong, "verify-full", Some(&cluster.ca)),
    );
    for cmd in [
        vec!["store", "check"],
        vec!["audit", "verify"],
        vec!["store", "migrate"],
        vec!["run"],
    ] {
        let out = tokio::time::timeout(
            Duration::from_secs(30),
            tokio::process::Command::new(bin())
                .args(&cmd)
                .arg("--config")
                .arg(&bad)
                .output(),
        )
        .await
        .expect("refused promptly")
        .unwrap();
        let printed = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{cmd:?}: {printed}");
        assert!(
            printed.contains("password authentication failed"),
            "{cmd:?}: {printed}"
        );
        assert!(
            !printed.contains(wrong),
            "{cmd:?} shows the password: {printed}"
        );
    }

    // TLS as libpq means it: verify-full checks the name, verify-ca only the chain, a chain
    // from another CA is refused, require encrypts without checking.
    let no_name = cluster.tls_url("127.0.0.2", PASSWORD, "verify-full", Some(&cluster.ca));
    let e = open(&no_name)
        .await
        .err()
        .expect("verify-full to a name the certificate lacks")
        .to_string();
    assert!(
        e.contains("certificate") || e.contains("NotValidForName"),
        "{e}"
    );
    assert!(!e.contains(PASSWORD));
    open(&cluster.tls_url("127.0.0.2", PASSWORD, "verify-ca", Some(&cluster.ca)))
        .await
        .unwrap();
    let e = open(&cluster.tls_url(
        "localhost",
        PASSWORD,
        "verify-full",
        Some(&cluster.other_ca),
    ))
    .await
    .err()
    .expect("a chain from another CA")
    .to_string();
    assert!(
        e.contains("certificate") || e.contains("UnknownIssuer"),
        "{e}"
    );
    open(&cluster.tls_url("127.0.0.2", PASSWORD, "require", None))
        .await
        .unwrap();
    let e = open(&cluster.tls_url("localhost", PASSWORD, "verify-full", None))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("need sslrootcert"), "{e}");

    // The write lock is the database's: another replica waits for it, gets it when the holder
    // lets go, or when the holder's session ends; a lock whose session ended (a database
    // restart, a cut connection) is not confirmed, so no write is sent under it.
    let other = open(&socket).await.unwrap();
    let held = store.lock("r").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(300), other.lock("r")).await;
    assert!(waiting.is_err(), "two replicas held one resource's lock");
    assert!(store.confirm(&held).await.is_ok());
    // Only `held`'s session has the advisory lock granted (the other waits).
    let ended = cluster.query(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' AND granted",
    );
    assert_eq!(ended, "1");
    let started = tokio::time::Instant::now();
    let got_it = tokio::time::timeout(Duration::from_secs(10), other.lock("r")).await;
    assert!(
        got_it.is_ok(),
        "a dead session's lock was not released within 10 s"
    );
    eprintln!(
        "lock of an ended session released after {:?}",
        started.elapsed()
    );
    let lost = store.confirm(&held).await;
    assert!(
        matches!(&lost, Err(e) if e.to_string().contains("write lock was lost")),
        "{lost:?}"
    );
    drop((held, got_it, other));

    // Retention: a store that keeps nothing sweeps (in bounded rounds) every receipt and an
    // expired lease's data; the chain keeps an anchor, and `audit verify` starts from it.
    let before: u64 = cluster
        .query("SELECT count(*) FROM receipts")
        .parse()
        .unwrap();
    let keeping_nothing = PostgresStore::open(
        Connect {
            retention: palisade::store::Retention {
                leases: Duration::ZERO,
                receipts: Some(Duration::ZERO),
            },
            ..connect(&socket)
        },
        Arc::new(KeyPair::from_seed(SIDECAR_SEED)),
    )
    .await
    .unwrap();
    keeping_nothing
        .advance(WriteIntent {
            resource: "swept".into(),
            epoch: 1,
            lease_id: "urn:uuid:expired-long-ago".into(),
            expires_at_ms: 1,
            lease_record: b"{}".to_vec(),
            inverse: Some(b"{}".to_vec()),
            snapshot: None,
        })
        .await
        .unwrap();
    // Escrows go with their lease's data, whatever their state.
    for (id, expires_at_ms) in [("escrow-swept", 1), ("escrow-kept", i64::MAX / 2)] {
        let held = palisade::store::EscrowUpdate {
            id: id.into(),
            expect: None,
            record: json!({"escrow_id": id, "state": "held"}),
            expires_at_ms: Some(expires_at_ms),
        };
        assert!(keeping_nothing.escrow_put(held).await.unwrap());
    }
    let mut left = before;
    for _ in 0..100 {
        left = cluster
            .query("SELECT count(*) FROM receipts")
            .parse()
            .unwrap();
        let lease_rows = cluster
            .query("SELECT count(*) FROM lease_data WHERE lease_id = 'urn:uuid:expired-long-ago'");
        let escrow_rows = cluster.query("SELECT count(*) FROM escrows WHERE id = 'escrow-swept'");
        if left == 0 && lease_rows == "0" && escrow_rows == "0" {
            break;
        }
        // The sweeper's first round runs at once; the next one after its pause or a full round.
        let _ = keeping_nothing.ready().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "receipts were not swept ({before} before)");
    assert_eq!(keeping_nothing.escrow("escrow-swept").await.unwrap(), None);
    assert!(keeping_nothing
        .escrow("escrow-kept")
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        keeping_nothing
            .inverse("urn:uuid:expired-long-ago")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        keeping_nothing.epoch("swept").await.unwrap(),
        1,
        "a fence is never swept"
    );
    drop(keeping_nothing);
    let write = try_send(leased_put(
        &a.url(""),
        "/items/after-sweep",
        &lease_for(&agent, "/items/after-sweep", 1, |_| {}),
        None,
        "{}",
    ))
    .await
    .unwrap();
    assert_eq!(write.0, StatusCode::OK);
    let v = audit_verify(&audit_config, &socket);
    assert_eq!(
        (
            v["ok"].as_bool(),
            v["receipts"].as_u64(),
            v["pruned"].as_u64()
        ),
        (Some(true), Some(1), Some(before)),
        "{v}"
    );

    // A database whose schema is newer than this build is refused, not written to, by a
    // sidecar, `store check` and `store migrate`; a fresh database is migrated by `migrate`.
    run(cluster
        .psql("palisade")
        .args(["-c", "INSERT INTO palisade_schema VALUES (999)"]));
    let refused = open(&socket).await;
    assert!(
        matches!(&refused, Err(e) if e.to_string().contains("newer than this build")),
        "{:?}",
        refused.err()
    );
    let newer = cfg("newer", &socket);
    for cmd in [["store", "check"], ["store", "migrate"]] {
        let out = Command::new(bin())
            .args(cmd)
            .arg("--config")
            .arg(&newer)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{cmd:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("newer than this build"),
            "{cmd:?}"
        );
    }
    run(cluster
        .psql("postgres")
        .args(["-c", &format!("CREATE DATABASE fresh OWNER {ROLE}")]));
    let fresh = cfg("fresh", &socket.replace("/palisade?", "/fresh?"));
    let out = Command::new(bin())
        .args(["store", "check", "--config"])
        .arg(&fresh)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("palisade store migrate"));
    let out = run(Command::new(bin())
        .args(["store", "migrate", "--config"])
        .arg(&fresh));
    assert_eq!(out.trim(), "ok: postgres schema version 5");
    drop((a, b, c));
}
