//! The `palisade` command line (SPEC §1).
//!
//! Exit codes: 0 ok, 1 the input was refused, 2 usage or configuration error. Errors go to
//! stderr one per line, naming the file, field and reason.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use palisade_policy::digest::{Sha256Digest, Spelling};
use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease::{self, RecoveryMode, VerifyContext};
use palisade_policy::{canon, json};
use serde_json::{json, Value};

use crate::clock::WallClock;
use crate::config::Config;

/// Bound on what the JSON tools read from stdin.
const MAX_STDIN: u64 = 64 << 20;
const MAX_DEPTH: usize = 128;

#[derive(Debug, Parser)]
#[command(
    name = "palisade",
    version,
    about = "Inline enforcement sidecar for agent writes"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the sidecar.
    Run {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
    /// Start a sample SoR with a sidecar in front of it and print curl lines to try.
    Demo {
        /// Data-plane port of the demo sidecar (0 picks a free one).
        #[arg(long, default_value_t = 8080)]
        port: u16,
    },
    /// Replay recorded traffic (HAR 1.2) against a target, open loop (SPEC §12).
    Replay(ReplayArgs),
    /// Write a new Ed25519 PKCS#8 PEM private key; print its kid and public key.
    Keygen {
        #[arg(long)]
        out: PathBuf,
    },
    /// Sign and verify compensation leases.
    #[command(subcommand)]
    Lease(LeaseCommand),
    /// Print the RFC 8785 canonical form of the JSON on stdin.
    Jcs,
    /// Print the SHA-256 of the JCS form of the JSON on stdin.
    Digest {
        #[arg(long, value_parser = ["sha256", "sha-256"], default_value = "sha-256")]
        prefix: String,
    },
    /// Configuration tools.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Audit tools.
    #[command(subcommand)]
    Audit(AuditCommand),
    /// RICH bundle tools.
    #[command(subcommand)]
    Lock(LockCommand),
}

#[derive(Debug, Subcommand)]
enum LockCommand {
    /// Verify and compile a bundle; print its digest and a binding summary.
    Check {
        #[arg(long)]
        lockfile: PathBuf,
        #[arg(long)]
        contracts: PathBuf,
        /// Refuse any other lockfile digest (as `rich.expected_digest`).
        #[arg(long = "expected-digest")]
        expected_digest: Option<String>,
    },
    /// Pin a running MCP server's tools: write a lockfile (FILE) with each tool's digest and
    /// a contract per tool in contracts/ beside it, for review.
    PinMcp {
        /// The server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp.
        #[arg(long)]
        url: String,
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Debug, clap::Args)]
struct ReplayArgs {
    /// The recording (HAR 1.2, as browsers, mitmproxy, Charles or Fiddler export it).
    #[arg(long)]
    har: PathBuf,
    /// Where to send it: the origin of every request is rewritten to this URL's.
    #[arg(long)]
    target: String,
    /// Constant arrival rate, requests per second (cycling through the recording).
    #[arg(long, conflicts_with = "speed")]
    rate: Option<f64>,
    /// The recording's own timing, X times as fast (the default is --speed 1).
    #[arg(long)]
    speed: Option<f64>,
    /// How long to send for.
    #[arg(long, default_value = "60s")]
    duration: humantime::Duration,
    /// Stop after this many requests.
    #[arg(long)]
    requests: Option<u64>,
    /// Requests in flight at most; a request due while the cap is reached waits (and counts).
    #[arg(long, default_value_t = 256)]
    concurrency: usize,
    /// Act as the agent's gateway: a fresh valid lease, signed with this key, for each write.
    #[arg(long = "lease-key", conflicts_with = "lease_from_sidecar")]
    lease_key: Option<PathBuf>,
    /// Act as the agent's gateway with leases granted by the target's lease endpoint.
    #[arg(long = "lease-from-sidecar")]
    lease_from_sidecar: bool,
    /// The origin the sidecar names its resources by (its listen.public_base); default: --target's.
    #[arg(long = "public-base")]
    public_base: Option<String>,
    /// Do not GET the pre-image before each write (for a sidecar with ptcl.pre_image = "off").
    #[arg(long = "no-pre-image")]
    no_pre_image: bool,
    /// Also write the results as JSON here.
    #[arg(long)]
    report: Option<PathBuf>,
    /// No progress line on stderr.
    #[arg(long)]
    quiet: bool,
}

#[derive(Debug, Subcommand)]
enum AuditCommand {
    /// Walk the receipt chain in the store: every `prev` link and every signature.
    Verify {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
enum LeaseCommand {
    /// Print a lease signed with KEY.
    Sign {
        #[arg(long)]
        key: PathBuf,
        #[arg(long)]
        target: String,
        #[arg(long)]
        epoch: u64,
        #[arg(long = "pre-image")]
        pre_image: String,
        /// JSON file holding the inverse payload (SPEC §5.4).
        #[arg(long)]
        inverse: PathBuf,
        #[arg(long, default_value = "COMPENSATING_ACTION")]
        mode: String,
        #[arg(long = "t-req", default_value_t = 30_000)]
        t_req: u64,
        #[arg(long = "t-granted", default_value_t = 60_000)]
        t_granted: u64,
    },
    /// Verify the lease on stdin (checks 2–6 of SPEC §5.2) against an issuers file.
    Verify {
        #[arg(long)]
        trust: PathBuf,
        /// `ptcl.max_clock_skew`.
        #[arg(long, default_value = "60s")]
        max_clock_skew: humantime::Duration,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a configuration (and the files it names) without starting.
    Check {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
}

/// A failed command: the lines to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub lines: Vec<String>,
}

impl Failure {
    fn refused(line: impl Into<String>) -> Self {
        Self {
            code: 1,
            lines: vec![line.into()],
        }
    }

    fn usage(line: impl Into<String>) -> Self {
        Self {
            code: 2,
            lines: vec![line.into()],
        }
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(f) => {
            let mut err = std::io::stderr().lock();
            for line in f.lines {
                let _ = writeln!(err, "palisade: {line}");
            }
            ExitCode::from(f.code)
        }
    }
}

fn dispatch(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Run { config } => run(&config),
        Command::Demo { port } => {
            crate::demo::run(port).map_err(|e| Failure::usage(format!("{e:#}")))
        }
        Command::Replay(args) => replay(args),
        Command::Keygen { out } => keygen(&out),
        Command::Lease(LeaseCommand::Sign {
            key,
            target,
            epoch,
            pre_image,
            inverse,
            mode,
            t_req,
            t_granted,
        }) => lease_sign(
            &key, &target, epoch, &pre_image, &inverse, &mode, t_req, t_granted,
        ),
        Command::Lease(LeaseCommand::Verify {
            trust,
            max_clock_skew,
        }) => lease_verify(&trust, (*max_clock_skew).as_millis() as i64),
        Command::Jcs => {
            let out = canonical_stdin()?;
            std::io::stdout()
                .write_all(&out)
                .map_err(|e| Failure::usage(format!("stdout: {e}")))
        }
        Command::Digest { prefix } => {
            let out = canonical_stdin()?;
            let spelling = if prefix == "sha256" {
                Spelling::Sha256
            } else {
                Spelling::ShaDash256
            };
            println!("{}", Sha256Digest::of(&out).spelled(spelling));
            Ok(())
        }
        Command::Audit(AuditCommand::Verify { config }) => audit_verify(&config),
        Command::Lock(LockCommand::Check {
            lockfile,
            contracts,
            expected_digest,
        }) => match crate::bundle::load(&lockfile, &contracts, expected_digest.as_deref()) {
            Ok(b) => {
                println!("{}", crate::bundle::summary(&b));
                Ok(())
            }
            Err(lines) => Err(Failure { code: 1, lines }),
        },
        Command::Lock(LockCommand::PinMcp { url, out }) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
            let tools = runtime
                .block_on(crate::mcp::pin::fetch_tools(&url))
                .map_err(|e| Failure {
                    code: 1,
                    lines: vec![format!("{url}: {e}")],
                })?;
            let digest =
                crate::mcp::pin::write_bundle(&tools, &url, &out).map_err(|e| Failure {
                    code: 1,
                    lines: vec![e],
                })?;
            println!(
                "{}",
                serde_json::json!({"lockfile": out.display().to_string(), "digest": digest, "tools": tools.len()})
            );
            Ok(())
        }
        Command::Config(ConfigCommand::Check { config }) => {
            let cfg = load_config(&config)?;
            for w in check_referenced_files(&cfg, &config)? {
                eprintln!("{}: warning: {w}", config.display());
            }
            println!("{}: ok", config.display());
            Ok(())
        }
    }
}

fn read_stdin() -> Result<Vec<u8>, Failure> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("stdin: {e}")))?;
    if buf.len() as u64 > MAX_STDIN {
        return Err(Failure::refused(format!(
            "stdin: input exceeds {MAX_STDIN} bytes"
        )));
    }
    Ok(buf)
}

fn canonical_stdin() -> Result<Vec<u8>, Failure> {
    let input = read_stdin()?;
    canon::canonicalize(&input, MAX_DEPTH).map_err(|e| Failure::refused(format!("stdin: {e}")))
}

fn load_config(path: &Path) -> Result<Config, Failure> {
    Config::load(path).map_err(|e| Failure {
        code: 2,
        lines: e.0.iter().map(ToString::to_string).collect(),
    })
}

/// Loads every file the config names, reporting each one that is unusable. Returns what is
/// usable but will not do what the operator may think (warnings).
fn check_referenced_files(cfg: &Config, path: &Path) -> Result<Vec<String>, Failure> {
    let file = path.display().to_string();
    let mut lines = Vec::new();
    if let Some(tls) = &cfg.listen_tls {
        if let Err(e) = crate::tls::ReloadingCert::load(&tls.cert, &tls.key) {
            lines.push(format!("{file}: listen.tls: {e}"));
        }
        if let Some(ca) = &tls.client_ca {
            if let Err(e) = crate::tls::root_store(ca) {
                lines.push(format!("{file}: listen.tls.client_ca: {e}"));
            }
        }
    }
    if let Some(ca) = &cfg.upstream_ca {
        if let Err(e) = crate::tls::root_store(ca) {
            lines.push(format!("{file}: upstream.tls.ca: {e}"));
        }
    }
    if let Some(key) = &cfg.signing_key {
        if let Err(e) = read_key(key) {
            lines.push(format!("{file}: signing.key: {}", e.lines.join("; ")));
        }
    }
    if let Some(issuers) = &cfg.trust_issuers {
        if let Err(e) = read_trust(issuers) {
            lines.push(format!("{file}: trust.issuers: {}", e.lines.join("; ")));
        }
    }
    let mut warnings = Vec::new();
    match crate::bundle::from_config(cfg) {
        Err(problems) => lines.extend(problems.into_iter().map(|p| format!("{file}: rich: {p}"))),
        Ok(bundle) => warnings = crate::peer_identity::unchecked(cfg, bundle.as_deref()),
    }
    if lines.is_empty() {
        Ok(warnings)
    } else {
        Err(Failure { code: 2, lines })
    }
}

fn replay(a: ReplayArgs) -> Result<(), Failure> {
    use crate::replay;
    let target: http::Uri = a
        .target
        .parse()
        .ok()
        .filter(|u: &http::Uri| u.scheme().is_some() && u.authority().is_some())
        .ok_or_else(|| {
            Failure::usage(format!(
                "--target {}: expected an absolute http(s) URL",
                a.target
            ))
        })?;
    let pace = match (a.rate, a.speed) {
        (Some(r), _) if r > 0.0 && r.is_finite() => replay::Pace::Rate(r),
        (Some(_), _) => return Err(Failure::usage("--rate must be a positive number")),
        (None, Some(x)) if x > 0.0 && x.is_finite() => replay::Pace::Speed(x),
        (None, Some(_)) => return Err(Failure::usage("--speed must be a positive number")),
        (None, None) => replay::Pace::Speed(1.0),
    };
    let bytes = read_limited(&a.har, replay::har::MAX_HAR)?;
    let recording = replay::har::parse(&bytes).map_err(|e| Failure {
        code: 1,
        lines: vec![format!("{}: {e}", a.har.display())],
    })?;
    let source = match (&a.lease_key, a.lease_from_sidecar) {
        (Some(path), _) => Some(replay::lease::Source::Key(Box::new(read_key(path)?))),
        (None, true) => Some(replay::lease::Source::Sidecar),
        (None, false) => None,
    };
    let minter = match source {
        None => None,
        Some(source) => {
            let base = a.public_base.clone().unwrap_or_else(|| {
                format!(
                    "{}://{}",
                    target.scheme_str().unwrap_or("http"),
                    target.authority().map_or("", |x| x.as_str())
                )
            });
            Some(replay::lease::Minter::new(
                source,
                base,
                !a.no_pre_image,
                crate::clock::WallClock::now_ms() as u64,
            ))
        }
    };
    let opts = replay::Options {
        target,
        pace,
        duration: *a.duration,
        requests: a.requests,
        concurrency: a.concurrency,
        minter,
        progress: !a.quiet,
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    let report = runtime
        .block_on(replay::run(recording, opts))
        .map_err(|e| Failure {
            code: 1,
            lines: vec![e],
        })?;
    print!("{}", report.table());
    if let Some(path) = &a.report {
        let text = serde_json::to_vec_pretty(&report.to_json()).unwrap_or_default();
        std::fs::write(path, text)
            .map_err(|e| Failure::usage(format!("--report {}: {e}", path.display())))?;
    }
    Ok(())
}

/// A file read whole, refused past `limit` bytes.
fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, Failure> {
    let f = std::fs::File::open(path)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    let mut buf = Vec::new();
    f.take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    if buf.len() as u64 > limit {
        return Err(Failure::usage(format!(
            "{}: larger than {limit} bytes",
            path.display()
        )));
    }
    Ok(buf)
}

fn run(config: &Path) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    let warnings = check_referenced_files(&cfg, config)?;
    crate::telemetry::init_logging();
    for w in warnings {
        tracing::warn!("{w}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    runtime
        .block_on(async {
            let server = crate::server::Server::bind(cfg).await?;
            server.run(crate::shutdown_signal()).await
        })
        .map_err(|e| Failure::usage(format!("{e:#}")))
}

/// `palisade audit verify`: the embedded store holds an exclusive lock on its file, so this
/// runs while the sidecar is stopped (or against a copy of the file).
fn audit_verify(config: &Path) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    let key_path = cfg
        .signing_key
        .clone()
        .unwrap_or_else(|| PathBuf::from(crate::config::DEFAULT_SIGNING_KEY));
    let key = std::sync::Arc::new(read_key(&key_path)?);
    let mut trust = TrustStore::new();
    trust
        .insert(key.trusted("sidecar"))
        .map_err(|e| Failure::usage(e.to_string()))?;
    if !cfg.store_path.exists() {
        return Err(Failure::usage(format!(
            "{}: store file does not exist",
            cfg.store_path.display()
        )));
    }
    let store = crate::store::embedded::EmbeddedStore::open(&cfg.store_path, key)
        .map_err(|e| Failure::usage(e.to_string()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    let receipts = runtime
        .block_on(crate::store::Store::receipts(&store))
        .map_err(|e| Failure::usage(e.to_string()))?;
    match palisade_policy::receipt::verify_chain(receipts.iter().map(Vec::as_slice), &trust) {
        Ok(head) => {
            println!("ok: {} receipts, head {}", head.count, head.head);
            Ok(())
        }
        Err(e) => Err(Failure::refused(format!(
            "{}: {e}",
            cfg.store_path.display()
        ))),
    }
}

/// A new Ed25519 key from the OS's randomness.
pub fn fresh_key() -> KeyPair {
    let mut seed = [0u8; 32];
    rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut seed);
    KeyPair::from_seed(seed)
}

fn keygen(out: &Path) -> Result<(), Failure> {
    let key = fresh_key();
    crate::write_private_file(out, key.to_pkcs8_pem().as_bytes())
        .map_err(|e| Failure::usage(format!("{}: {e}", out.display())))?;
    // The issuer-file entry form: paste it into `trust.issuers` of a sidecar that should
    // accept leases signed with this key.
    println!(
        "{}",
        json!({"kid": key.kid(), "public_key": key.public_b64(), "name": out.file_stem().and_then(|s| s.to_str()).unwrap_or("key")})
    );
    Ok(())
}

pub fn read_key(path: &Path) -> Result<KeyPair, Failure> {
    let pem = std::fs::read_to_string(path)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", path.display())))?;
    KeyPair::from_pkcs8_pem(&pem).map_err(|e| Failure::usage(format!("{}: {e}", path.display())))
}

fn read_trust(path: &Path) -> Result<TrustStore, Failure> {
    let bytes = std::fs::read(path)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", path.display())))?;
    let mut trust = TrustStore::new();
    trust
        .extend_from_issuers_json(&bytes)
        .map_err(|e| Failure::usage(format!("{}: {e}", path.display())))?;
    Ok(trust)
}

#[allow(clippy::too_many_arguments)]
fn lease_sign(
    key: &Path,
    target: &str,
    epoch: u64,
    pre_image: &str,
    inverse: &Path,
    mode: &str,
    t_req: u64,
    t_granted: u64,
) -> Result<(), Failure> {
    let key = read_key(key)?;
    let mode = RecoveryMode::parse(mode).ok_or_else(|| {
        Failure::usage(
            "--mode: must be COMPENSATING_ACTION, SNAPSHOT_RESTORE, DRY_RUN_SHADOW or HUMAN_ESCROW",
        )
    })?;
    let pre_image = Sha256Digest::parse_ptcl(pre_image)
        .map_err(|e| Failure::usage(format!("--pre-image: {e}")))?;
    if palisade_policy::target::normalize(target).is_err() {
        return Err(Failure::usage("--target: must be an absolute http(s) URI"));
    }
    let inverse_bytes = std::fs::read(inverse)
        .map_err(|e| Failure::usage(format!("{}: cannot read: {e}", inverse.display())))?;
    let inverse_value = json::parse(&inverse_bytes, MAX_DEPTH)
        .map_err(|e| Failure::usage(format!("{}: {e}", inverse.display())))?;
    let now = WallClock::now_ms();
    let unsigned = json!({
        "ptcl_version": "1.0",
        "lease_id": format!("urn:uuid:{}", uuid::Uuid::new_v4()),
        "sor_target_uri": target,
        "recovery_mode": mode.as_str(),
        "t_req_ms": t_req,
        "t_granted_ms": t_granted,
        "cas_fence_epoch": epoch,
        "pre_image_state_hash": pre_image.to_string(),
        "inverse_payload_jcs_hash": Sha256Digest::of_json(&inverse_value).to_string(),
        "issued_at": lease::format_rfc3339_ms(now),
    });
    let Value::Object(map) = unsigned else {
        unreachable!("a json! object literal is an object")
    };
    println!("{}", lease::sign(map, &key));
    Ok(())
}

fn lease_verify(trust: &Path, max_clock_skew_ms: i64) -> Result<(), Failure> {
    let trust = read_trust(trust)?;
    let input = read_stdin()?;
    let raw = lease::decode_header(&input).map_err(|r| {
        println!("{}", r.code);
        Failure::refused(format!("{}: {}", r.code, r.detail))
    })?;
    let cx = VerifyContext {
        now_ms: WallClock::now_ms(),
        max_clock_skew_ms,
        first_seen: None,
        request: None,
    };
    match lease::verify(&raw, &trust, &cx) {
        Ok(v) => {
            println!(
                "ok {} epoch {} expires {}",
                v.lease().lease_id,
                v.lease().cas_fence_epoch,
                lease::format_rfc3339_ms(v.expires_at_ms())
            );
            Ok(())
        }
        Err(r) => {
            // The code alone on stdout for scripts; the reason on stderr for people.
            println!("{}", r.code);
            Err(Failure {
                code: 1,
                lines: vec![format!("{}: {}", r.code, r.detail)],
            })
        }
    }
}
