//! Running and checking a deployment from the command line: `run`, `config check`,
//! `audit verify`, `replay`.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use crate::config::Config;

use super::failure::Failure;
use super::keys::{read_key, read_trust};
use crate::net::identity;

#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// The recording (HAR 1.2, as browsers, mitmproxy, Charles or Fiddler export it).
    #[arg(long)]
    pub(crate) har: PathBuf,
    /// Where to send it: the origin of every request is rewritten to this URL's.
    #[arg(long)]
    pub(crate) target: String,
    /// Constant arrival rate, requests per second (cycling through the recording).
    #[arg(long, conflicts_with = "speed")]
    pub(crate) rate: Option<f64>,
    /// The recording's own timing, X times as fast (the default is --speed 1).
    #[arg(long)]
    pub(crate) speed: Option<f64>,
    /// How long to send for.
    #[arg(long, default_value = "60s")]
    pub(crate) duration: humantime::Duration,
    /// Stop after this many requests.
    #[arg(long)]
    pub(crate) requests: Option<u64>,
    /// Requests in flight at most; a request due while the cap is reached waits (and counts).
    #[arg(long, default_value_t = 256)]
    pub(crate) concurrency: usize,
    /// Act as the agent's gateway: a fresh valid lease, signed with this key, for each write.
    #[arg(long = "lease-key", conflicts_with = "lease_from_sidecar")]
    pub(crate) lease_key: Option<PathBuf>,
    /// Act as the agent's gateway with leases granted by the target's lease endpoint.
    #[arg(long = "lease-from-sidecar")]
    pub(crate) lease_from_sidecar: bool,
    /// The origin the sidecar names its resources by (its listen.public_base); default: --target's.
    #[arg(long = "public-base")]
    pub(crate) public_base: Option<String>,
    /// Do not GET the pre-image before each write (for a sidecar with ptcl.pre_image = "off").
    #[arg(long = "no-pre-image")]
    pub(crate) no_pre_image: bool,
    /// Also write the results as JSON here.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
    /// No progress line on stderr.
    #[arg(long)]
    pub(crate) quiet: bool,
}

pub(super) fn load_config(path: &Path) -> Result<Config, Failure> {
    Config::load(path).map_err(|e| Failure {
        code: 2,
        lines: e.0.iter().map(ToString::to_string).collect(),
    })
}

/// Loads every file the config names, reporting each one that is unusable. Returns what is
/// usable but will not do what the operator may think (warnings).
pub(super) fn check_referenced_files(cfg: &Config, path: &Path) -> Result<Vec<String>, Failure> {
    let file = path.display().to_string();
    let mut lines = Vec::new();
    if let Some(tls) = &cfg.listen.tls {
        if let Err(e) = crate::net::tls::ReloadingCert::load(&tls.cert, &tls.key) {
            lines.push(format!("{file}: listen.tls: {e}"));
        }
        if let Some(ca) = &tls.client_ca {
            if let Err(e) = crate::net::tls::root_store(ca) {
                lines.push(format!("{file}: listen.tls.client_ca: {e}"));
            }
        }
    }
    if let Some(tls) = &cfg.admin.tls {
        if let Err(e) = crate::net::tls::ReloadingCert::load(&tls.cert, &tls.key) {
            lines.push(format!("{file}: admin.tls: {e}"));
        }
        if let Some(ca) = &tls.client_ca {
            if let Err(e) = crate::net::tls::root_store(ca) {
                lines.push(format!("{file}: admin.tls.client_ca: {e}"));
            }
        }
    }
    if let Some(f) = &cfg.admin.token_file {
        if crate::control::admin_auth::read_token(f).is_none() {
            lines.push(format!(
                "{file}: admin.token_file: cannot read {} or it is empty",
                f.display()
            ));
        }
    }
    if let Some(ca) = &cfg.upstream.ca {
        if let Err(e) = crate::net::tls::root_store(ca) {
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
    if let Some(adm) = &cfg.admission {
        if let Err(problems) = crate::context::load_keys(&adm.jwks) {
            lines.extend(
                problems
                    .into_iter()
                    .map(|p| format!("{file}: admission.jwks: {p}")),
            );
        }
    }
    let mut warnings = Vec::new();
    match crate::control::bundle::from_config(cfg) {
        Err(problems) => lines.extend(problems.into_iter().map(|p| format!("{file}: rich: {p}"))),
        Ok(bundle) => warnings = identity::unchecked(cfg, bundle.as_deref()),
    }
    if lines.is_empty() {
        Ok(warnings)
    } else {
        Err(Failure { code: 2, lines })
    }
}

pub(super) fn run_replay(a: ReplayArgs) -> Result<(), Failure> {
    use crate::cli::replay;
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
pub(super) fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, Failure> {
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

pub(super) fn run(config: &Path) -> Result<(), Failure> {
    let cfg = load_config(config)?;
    let warnings = check_referenced_files(&cfg, config)?;
    crate::telemetry::init_logging();
    for w in warnings {
        tracing::warn!("{w}");
    }
    // available_parallelism respects the CPU quota a pod's cgroup sets.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    let (runtime, runtimes) = runtime_for(cfg.runtime_threads.unwrap_or(cpus))
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    runtime
        .block_on(async {
            let server = crate::server::Server::bind(cfg).await?;
            server
                .run_sharded(crate::server::shutdown_signal(), runtimes)
                .await
        })
        .map_err(|e| Failure::usage(format!("{e:#}")))
}

/// The sidecar's runtimes (issue 41): a current-thread runtime here, and as many data-plane
/// runtimes in all as `threads` (one per CPU by default, `runtime.threads` otherwise), each
/// with its own listener (`server::shards`): no work-stealing handoffs between threads, no
/// request crossing one. `PALISADE_RUNTIME=multi_thread` instead runs everything on one
/// tokio multi-thread runtime, and `PALISADE_RUNTIME=current_thread` on one current-thread
/// runtime (the shapes before issue 41, kept to compare and to test the single shape).
fn runtime_for(threads: usize) -> std::io::Result<(tokio::runtime::Runtime, usize)> {
    match std::env::var("PALISADE_RUNTIME").as_deref() {
        Ok("multi_thread") => Ok((
            tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?,
            1,
        )),
        Ok("current_thread") => Ok((
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            1,
        )),
        _ => Ok((
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?,
            threads.max(1),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use tokio::runtime::RuntimeFlavor;

    #[test]
    fn one_current_thread_runtime_per_data_plane_thread() {
        if std::env::var("PALISADE_RUNTIME").is_ok() {
            return; // the override decides, not the CPU count
        }
        for threads in [0, 1, 2, 8] {
            let (rt, runtimes) = super::runtime_for(threads).unwrap();
            assert_eq!(rt.handle().runtime_flavor(), RuntimeFlavor::CurrentThread);
            assert_eq!(runtimes, threads.max(1));
        }
    }
}
