//! The `palisade` command line (SPEC §1).
//!
//! Exit codes: 0 ok, 1 the input was refused, 2 usage or configuration error. Errors go to
//! stderr one per line, naming the file, field and reason.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use commands::{
    AuditCommand, ConfigCommand, ExportFormat, LeaseCommand, LockCommand, ReceiptCommand,
    StoreCommand,
};
use palisade_policy::digest::{Sha256Digest, Spelling};

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
    /// Run the demo's sample SoR alone: the SoR container beside the image in a test pod.
    SampleSor(sample_sor::Args),
    /// Replay recorded traffic (HAR 1.2) against a target, open loop (SPEC §12).
    Replay(ReplayArgs),
    /// Recorded traffic (HAR 1.2) through a bundle's contracts and rules, offline (SPEC §15).
    Simulate(simulate::SimulateArgs),
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
    /// A C2SP tlog-witness for Palisade logs: cosigns their checkpoints (issue 45).
    Witness {
        #[arg(long)]
        config: PathBuf,
    },
    /// Receipt tools (SPEC §5.5).
    #[command(subcommand)]
    Receipt(ReceiptCommand),
    /// RICH bundle tools.
    #[command(subcommand)]
    Lock(LockCommand),
    /// State store tools (SPEC §10).
    #[command(subcommand)]
    Store(StoreCommand),
    /// Stop writes now at every replica: an operator's freeze (SPEC §14), or `--list` them.
    Freeze(freeze::FreezeArgs),
    /// Lift a freeze by its id.
    Unfreeze(freeze::UnfreezeArgs),
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
        Command::Demo { port } => demo::run(port).map_err(Failure::chain),
        Command::SampleSor(args) => sample_sor::run(args).map_err(Failure::chain),
        Command::Replay(args) => run_replay(args),
        Command::Simulate(args) => simulate::run(args),
        Command::Freeze(args) => freeze::freeze(args),
        Command::Unfreeze(args) => freeze::unfreeze(args),
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
        }) => lease_sign(keys::LeaseSign {
            key: &key,
            target: &target,
            epoch,
            pre_image: &pre_image,
            inverse: &inverse,
            mode: &mode,
            t_req,
            t_granted,
        }),
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
        Command::Audit(AuditCommand::Verify {
            config,
            url,
            key,
            since,
            token_file,
            json,
        }) => match (config, url, key) {
            (_, Some(url), Some(key)) => {
                audit::verify_url(&url, &key, since.as_deref(), token_file.as_deref(), json)
            }
            (Some(config), _, _) => audit::verify_config(&config, json),
            _ => Err(Failure::usage(
                "audit verify: give --config FILE, or --url ADMIN_URL with --key VKEY",
            )),
        },
        Command::Audit(AuditCommand::Export {
            url,
            token_file,
            since,
            until,
            after,
            format,
        }) => audit_export::run(&audit_export::Export {
            url: &url,
            token_file: token_file.as_deref(),
            since: since.as_deref(),
            until: until.as_deref(),
            after,
            csv: format == ExportFormat::Csv,
        }),
        Command::Witness { config } => witness::run(&config),
        Command::Receipt(ReceiptCommand::Verify { key, file }) => {
            receipt::verify(&key, file.as_deref())
        }
        Command::Store(StoreCommand::Migrate { config }) => store_cmd::migrate(&config),
        Command::Store(StoreCommand::Check { config }) => store_cmd::check(&config),
        Command::Lock(LockCommand::Check {
            lockfile,
            contracts,
            expected_digest,
        }) => match crate::control::bundle::load(&lockfile, &contracts, expected_digest.as_deref())
        {
            Ok(b) => {
                println!("{}", crate::control::bundle::summary(&b));
                Ok(())
            }
            Err(lines) => Err(Failure { code: 1, lines }),
        },
        Command::Lock(LockCommand::Rehash {
            lockfile,
            contracts,
        }) => lockfile::rehash::run(&lockfile, &contracts),
        Command::Lock(LockCommand::Bound {
            lockfile,
            contracts,
            binding,
        }) => {
            let b = crate::control::bundle::load(&lockfile, &contracts, None)
                .map_err(|lines| Failure { code: 1, lines })?;
            match crate::control::bundle::bounds(&b, binding.as_deref()) {
                Some(v) => {
                    println!("{v}");
                    Ok(())
                }
                None => Err(Failure {
                    code: 1,
                    lines: vec![format!(
                        "no binding named {:?} in the lockfile",
                        binding.unwrap_or_default()
                    )],
                }),
            }
        }
        Command::Lock(LockCommand::ImportOpenapi {
            spec,
            out,
            base_path,
            reversibility,
            operations,
            assert_formats,
            approve,
        }) => {
            let mut opts = lockfile::openapi::ImportOptions {
                base_path,
                assert_formats,
                ..Default::default()
            };
            for glob in operations {
                let pattern = glob::Pattern::new(&glob)
                    .map_err(|e| Failure::usage(format!("--operations {glob:?}: {e}")))?;
                opts.operations.push(pattern);
            }
            opts.reversibility =
                pairs::name_values("--reversibility", "OPERATION=VALUE", &reversibility)
                    .map_err(Failure::usage)?;
            lockfile::import_openapi::run(&spec, &out, &opts, approve)
        }
        Command::Lock(LockCommand::Compat {
            old,
            new,
            from,
            to,
            connectors,
            qualifications,
        }) => match (old.or(from), new.or(to)) {
            (Some(old), Some(new)) => compat::run(&old, &new, &connectors, &qualifications),
            _ => Err(Failure::usage("lock compat: give OLD and NEW")),
        },
        Command::Lock(LockCommand::PinMcp {
            url,
            out,
            side_effects,
            reversibility,
            ignore_annotations,
            client_capabilities,
        }) => {
            let opts = pairs::name_values("--side-effect", "TOOL=EFFECT", &side_effects)
                .and_then(|m| lockfile::pin_mcp::PinOptions::new(ignore_annotations, m))
                .and_then(|o| {
                    let r = pairs::name_values("--reversibility", "TOOL=VALUE", &reversibility)?;
                    o.with_reversibility(r)
                })
                .map_err(Failure::usage)?;
            let caps = lockfile::pin_mcp::client_capabilities(&client_capabilities)
                .map_err(Failure::usage)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
            let tools = runtime
                .block_on(lockfile::pin_mcp::fetch_tools(&url, &caps))
                .map_err(|e| Failure {
                    code: 1,
                    lines: vec![format!("{url}: {e}")],
                })?;
            let pinned =
                lockfile::pin_mcp::write_bundle(&tools, &url, &out, &opts).map_err(|e| {
                    Failure {
                        code: 1,
                        lines: vec![e],
                    }
                })?;
            println!(
                "{}",
                serde_json::json!({"lockfile": out.display().to_string(), "digest": pinned.digest,
                                   "tools": tools.len(), "sideEffects": pinned.side_effects})
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

mod admin_client;
mod audit;
mod audit_export;
mod commands;
mod compat;
pub mod demo;
mod failure;
mod freeze;
pub(crate) mod keys;
mod lockfile;
mod migrate;
mod operate;
mod pairs;
mod receipt;
pub mod replay;
pub mod sample_bundle;
pub mod sample_sor;
mod simulate;
mod simulate_receipts;
mod stdin;
mod store_cmd;
mod witness;

pub use failure::Failure;
use keys::{keygen, lease_sign, lease_verify};
use operate::{check_referenced_files, load_config, run, run_replay, ReplayArgs};
use stdin::canonical_stdin;
