//! The subcommands' own subcommands (`receipt`, `store`, `lock`, `audit`, `lease`, `config`):
//! what each takes, as clap reads it; `mod.rs` dispatches them.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub(super) enum ReceiptCommand {
    /// Verify one receipt as a client received it (an `Agent-Commit-Receipt` value, base64url
    /// or JSON) offline: the checkpoint's signature, the leaf hash, the inclusion proof.
    Verify {
        /// The log's verifier key (`<origin>+<hex key ID>+<base64 key>`), or a file holding it.
        #[arg(long)]
        key: String,
        /// Read the receipt from this file instead of stdin.
        #[arg(long)]
        file: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum StoreCommand {
    /// Apply the schema migrations this build has to the configured postgres store (sidecars
    /// also migrate at start); prints the schema version.
    Migrate {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
    /// Check that the configured store can be reached and has the schema this build needs,
    /// without changing it; prints the schema version and the receipt count.
    Check {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum LockCommand {
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
    /// Recompute each capability's contractDigest after a reviewed edit of its contract file:
    /// the file renamed to its new digest, the lockfile updated, the bundle checked first
    /// (nothing is changed if it would not load). Prints each change and the new digest.
    Rehash {
        #[arg(long)]
        lockfile: PathBuf,
        #[arg(long)]
        contracts: PathBuf,
    },
    /// Print each binding's worst-case bound over its input (RICH §12.2), as JSON with its
    /// digest, or why it cannot be computed.
    Bound {
        #[arg(long)]
        lockfile: PathBuf,
        #[arg(long)]
        contracts: PathBuf,
        /// Only this binding (its name in the lockfile's capabilities).
        #[arg(long)]
        binding: Option<String>,
    },
    /// Import an OpenAPI 3.0/3.1 or Swagger 2.0 document (YAML or JSON): one contract per
    /// operation and a lockfile binding each as `METHOD /template`, written to DIR for review.
    ImportOpenapi {
        /// The OpenAPI document.
        spec: PathBuf,
        /// Where lock.json and contracts/ are written.
        #[arg(long)]
        out: PathBuf,
        /// Prefix of every template (default: the path of the first `servers` URL).
        #[arg(long)]
        base_path: Option<String>,
        /// An operation's reversibility (reversible, compensable, irreversible, unknown),
        /// which OpenAPI does not state; repeatable. The operation is its operationId, or
        /// `METHOD /template` when it has none.
        #[arg(long = "reversibility", value_name = "OPERATION=VALUE")]
        reversibility: Vec<String>,
        /// Only the operations whose operationId or `METHOD /path` (as the document writes
        /// the path) matches this shell-style pattern; repeatable.
        #[arg(long = "operations", value_name = "GLOB")]
        operations: Vec<String>,
        /// Check `format` (uuid, date, date-time, …) instead of keeping it an annotation.
        #[arg(long)]
        assert_formats: bool,
        /// Replace a lockfile already in OUT even where the update is breaking or lossy,
        /// writing a migration record for each such capability (RICH §15.2). Without it
        /// such an update exits 3 and writes nothing.
        #[arg(long)]
        approve: bool,
    },
    /// Compare two contract revisions (RICH §15.1): `compatible`, `compatible-with-connector`,
    /// `breaking` or `unknown`, with where and why. Exit 0 only when compatible.
    ///
    /// Exit codes: 0 compatible, 3 breaking, 4 unknown, 5 compatible-with-connector; 1 a file
    /// unreadable or not JSON, 2 usage.
    Compat {
        /// The contract in force (or `--from`).
        #[arg(
            value_name = "OLD",
            required_unless_present = "from",
            conflicts_with = "from"
        )]
        old: Option<PathBuf>,
        /// The contract that would replace it (or `--to`).
        #[arg(
            value_name = "NEW",
            required_unless_present = "to",
            conflicts_with = "to"
        )]
        new: Option<PathBuf>,
        #[arg(long, hide = true, requires = "to")]
        from: Option<PathBuf>,
        #[arg(long, hide = true, requires = "from")]
        to: Option<PathBuf>,
        /// A connector (RICH §9.1) pinned OLD → NEW (bridges inputs) or NEW → OLD (outputs);
        /// repeatable.
        #[arg(long = "connector", value_name = "FILE")]
        connectors: Vec<PathBuf>,
        /// A qualification record (RICH §8.2) of a connector; repeatable. A connector without
        /// one bridges nothing.
        #[arg(long = "qualification", value_name = "FILE")]
        qualifications: Vec<PathBuf>,
    },
    /// Pin a running MCP server's tools: write a lockfile (FILE) with each tool's digest and
    /// a contract per tool in contracts/ beside it, for review.
    PinMcp {
        /// The server's Streamable HTTP endpoint, e.g. http://127.0.0.1:8000/mcp.
        #[arg(long)]
        url: String,
        #[arg(long)]
        out: PathBuf,
        /// State a tool's side effect (read, idempotent, write, unknown) instead of what its
        /// annotations declare; repeatable. Recorded as manually authored.
        #[arg(long = "side-effect", value_name = "TOOL=EFFECT")]
        side_effects: Vec<String>,
        /// State a tool's reversibility (reversible, compensable, irreversible, unknown);
        /// repeatable. MCP has no annotation for it: without this a tool is `unknown`, which
        /// admits no COMPENSATING_ACTION lease. Recorded as manually authored.
        #[arg(long = "reversibility", value_name = "TOOL=VALUE")]
        reversibility: Vec<String>,
        /// Do not take side effects from the tools' MCP annotations: every tool not named by
        /// --side-effect is `unknown` (a write that needs a lease).
        #[arg(long)]
        ignore_annotations: bool,
        /// The client capabilities the pin declares (comma-separated: roots, sampling,
        /// elicitation, or none): servers list some tools only to clients that declare them,
        /// so pin with what your agents' clients declare.
        #[arg(long, default_value = "roots,sampling,elicitation")]
        client_capabilities: String,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum AuditCommand {
    /// Verify the receipt log: every hash against the leaves, each retained entry, the newest
    /// checkpoint's signature; of the store `--config` names, or of a running sidecar
    /// (`--url`).
    Verify {
        #[arg(long, env = "PALISADE_CONFIG", conflicts_with_all = ["url", "key", "since", "token_file"])]
        config: Option<PathBuf>,
        /// A sidecar's admin listener (its base URL), read through its log endpoints.
        #[arg(long, requires = "key")]
        url: Option<String>,
        /// The log's verifier key (C2SP signed-note form), or a file holding it.
        #[arg(long, requires = "url")]
        key: Option<String>,
        /// A checkpoint (a file) today's tree must extend.
        #[arg(long, requires = "url")]
        since: Option<PathBuf>,
        /// A file holding the admin token, sent as `Authorization: Bearer`.
        #[arg(long, requires = "url")]
        token_file: Option<PathBuf>,
        /// One JSON line: {"ok":true,"size":N,"root":"…","retained":M}.
        #[arg(long)]
        json: bool,
    },
    /// Write a running sidecar's receipts to stdout for a SIEM: JSON lines of envelopes (each
    /// verifiable alone with the log's key) or CSV, following the export's cursor to the end.
    Export {
        /// The sidecar's admin listener (its base URL).
        #[arg(long)]
        url: String,
        /// A file holding the admin token, sent as `Authorization: Bearer`.
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// Only receipts at or after this time (RFC 3339).
        #[arg(long)]
        since: Option<String>,
        /// Only receipts before this time (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// Resume after this log index (the last line on stderr names it).
        #[arg(long)]
        after: Option<u64>,
        #[arg(long, value_enum, default_value = "jsonl")]
        format: ExportFormat,
    },
}

/// `audit export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum ExportFormat {
    Jsonl,
    Csv,
}

#[derive(Debug, Subcommand)]
pub(super) enum LeaseCommand {
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
pub(super) enum ConfigCommand {
    /// Validate a configuration (and the files it names) without starting.
    Check {
        #[arg(long, env = "PALISADE_CONFIG")]
        config: PathBuf,
    },
}
