//! The book (`docs/`, issue 43) cannot rot: it builds with mdBook and has no broken link
//! (`tests/docs/check_links.py` over the built HTML, offline), every block marked runnable is
//! run, and the reference pages name every error code, metric and command this build has.
//!
//! Runnable blocks (see docs/introduction.md): ` ```sh,run ` runs with `bash -euo pipefail` in
//! one scratch directory per page, in order, with this build's `palisade` first on `PATH`;
//! ` ```sh,run,demo ` the same while `palisade demo` runs, `$DATA` and `$ADMIN` set to its
//! addresses; ` ```toml,check ` is written to `palisade.toml` there and must pass
//! `palisade config check`. The scratch directory has `examples/` (the repository's), as the
//! checkout's root has.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;
use tokio::time::Instant;

use crate::support::bin;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("docs"), &mut out);
    out.sort();
    out
}

/// A fenced block: its info string and its text.
struct Block {
    info: String,
    text: String,
    line: usize,
}

fn blocks(page: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(String, usize, usize, String)> = None; // info, fence len, line, text
    for (n, line) in page.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence = trimmed.chars().take_while(|c| *c == '`').count();
        match &mut open {
            None if fence >= 3 => {
                open = Some((
                    trimmed[fence..].trim().to_owned(),
                    fence,
                    n + 1,
                    String::new(),
                ));
            }
            Some((_, len, _, _)) if fence >= *len && trimmed[fence..].trim().is_empty() => {
                let (info, _, line, text) = open.take().unwrap();
                out.push(Block { info, text, line });
            }
            Some((_, _, _, text)) => {
                text.push_str(line);
                text.push('\n');
            }
            None => {}
        }
    }
    out
}

fn attrs(info: &str) -> Vec<&str> {
    info.split(',').map(str::trim).collect()
}

/// `palisade demo` on free ports: (child, data URL, admin URL).
fn start_demo(dir: &Path) -> (std::process::Child, String, String) {
    let mut child = Command::new(bin())
        .args(["demo", "--port", "0"])
        .env("TMPDIR", dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut data = None;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let url = line.split_whitespace().find(|w| w.starts_with("http://"));
            if line.trim_start().starts_with("sidecar data plane") {
                data = url.map(str::to_owned);
            } else if line.trim_start().starts_with("sidecar admin") {
                let _ = tx.send((data.clone(), url.map(str::to_owned)));
            }
        }
    });
    let (data, admin) = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the demo started");
    (child, data.unwrap(), admin.unwrap())
}

#[test]
fn every_runnable_block_in_the_book_runs() {
    let bin_dir = Path::new(bin()).parent().unwrap().to_owned();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut ran = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let runnable: Vec<Block> = blocks(&text)
            .into_iter()
            .filter(|b| {
                let a = attrs(&b.info);
                a.contains(&"run") || a.contains(&"check")
            })
            .collect();
        if runnable.is_empty() {
            continue;
        }
        let python_bin = repo().join("target/pyenv/bin");
        let scratch = tempfile::tempdir().unwrap();
        // Blocks name the repository's examples as a reader at its root would.
        for dir in ["examples", "clients"] {
            std::os::unix::fs::symlink(repo().join(dir), scratch.path().join(dir)).unwrap();
        }
        let demo = runnable
            .iter()
            .any(|b| attrs(&b.info).contains(&"demo"))
            .then(|| start_demo(scratch.path()));
        for b in &runnable {
            let a = attrs(&b.info);
            let at = format!("{}:{}", page.display(), b.line);
            let mut cmd = if a.contains(&"check") {
                std::fs::write(scratch.path().join("palisade.toml"), &b.text).unwrap();
                let mut c = Command::new(bin());
                c.args(["config", "check", "--config", "palisade.toml"]);
                c
            } else {
                assert_eq!(
                    a.first(),
                    Some(&"sh"),
                    "{at}: a runnable block is sh or toml"
                );
                let mut c = Command::new("bash");
                c.args(["-euo", "pipefail", "-c", &b.text]);
                c
            };
            // The venv's python (httpx, the MCP SDK) after this build's palisade; the Python
            // library importable as `pip install ./clients/python` would make it.
            cmd.current_dir(scratch.path())
                .env("PATH", format!("{}:{path}", python_bin.display()))
                .env("PYTHONPATH", repo().join("clients/python/src"));
            if let Some((_, data, admin)) = &demo {
                cmd.env("DATA", data).env("ADMIN", admin);
            }
            let started = Instant::now();
            let out = cmd.output().unwrap();
            assert!(
                out.status.success(),
                "{at}: the block failed ({}):\n{}\n--- stdout\n{}\n--- stderr\n{}",
                out.status,
                b.text,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "{at}: too slow"
            );
            ran += 1;
        }
        if let Some((mut child, _, _)) = demo {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    // The book's runnable blocks, counted: a parser that found none would pass vacuously.
    assert!(ran >= 20, "only {ran} runnable blocks found");
    eprintln!("{ran} runnable blocks ran");
}

#[test]
fn the_book_builds_and_every_link_resolves() {
    let mdbook = std::env::var("MDBOOK").unwrap_or_else(|_| "mdbook".into());
    let Ok(version) = Command::new(&mdbook).arg("--version").output() else {
        panic!("mdbook is not installed: scripts/test.sh installs it (cargo install mdbook)");
    };
    assert!(version.status.success());
    let out_dir = tempfile::tempdir().unwrap();
    let built = Command::new(&mdbook)
        .args(["build", "--dest-dir"])
        .arg(out_dir.path())
        .arg(repo())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "mdbook build failed:\n{log}");
    // mdBook reports a chapter it cannot find or a bad SUMMARY as a warning or error line.
    assert!(
        !log.contains("ERROR") && !log.contains("WARN"),
        "mdbook build warned:\n{log}"
    );
    let python = repo().join("target/pyenv/bin/python");
    let checked = Command::new(if python.exists() {
        python
    } else {
        PathBuf::from("python3")
    })
    .arg(repo().join("tests/docs/check_links.py"))
    .arg(out_dir.path())
    .output()
    .unwrap();
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    eprintln!("{}", String::from_utf8_lossy(&checked.stdout));
}

#[test]
fn the_openapi_document_is_valid_and_the_binary_serves_every_operation_in_it() {
    let python = repo().join("target/pyenv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test.sh (SETUP_ONLY=1 makes only the venv)",
        python.display()
    );
    let scratch = tempfile::tempdir().unwrap();
    let (mut demo, data, admin) = start_demo(scratch.path());
    // The operations the demo does not serve (`x-palisade-requires`: the AIP-2.1 relay), on
    // a sidecar configured with `[aip2]`.
    let dir = tempfile::tempdir().unwrap();
    let aip2 = "[aip2]\nkernels = { 84532 = \"0x9d25A874f046185d9237Cd4954C88D2B74B0021b\" }\n\
                relay = true\n";
    let text = crate::support::writes::write_config_for("http://127.0.0.1:9", dir.path(), "", aip2);
    let relay = crate::support::Palisade::start(&text);
    let out = Command::new(python)
        .arg(repo().join("tests/docs/check_openapi.py"))
        .arg(repo().join("docs/reference/openapi.yaml"))
        .args([&admin, &data, relay.url("").trim_end_matches('/')])
        .output()
        .unwrap();
    let _ = demo.kill();
    let _ = demo.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout
        .lines()
        .last()
        .unwrap_or("")
        .starts_with(r#"{"ok": true"#));
}

#[test]
fn the_reference_names_every_code_metric_and_command() {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap();
    let errors = read("docs/reference/errors.md");
    for code in palisade_policy::ErrorCode::ALL {
        assert!(
            errors.contains(&format!("`{}`", code.as_str())),
            "docs/reference/errors.md does not name {}",
            code.as_str()
        );
    }
    let metrics = read("docs/reference/metrics.md");
    let telemetry = read("proxy/src/telemetry/mod.rs");
    let mut names = 0;
    for line in telemetry.lines() {
        if let Some(name) = line
            .split('"')
            .nth(1)
            .filter(|n| n.starts_with("palisade_") && line.contains("pub const"))
        {
            names += 1;
            assert!(
                metrics.contains(&format!("`{name}`")),
                "docs/reference/metrics.md does not name {name}"
            );
        }
    }
    assert!(names >= 10, "only {names} metric names found");
    let cli = read("docs/reference/cli.md");
    let help = Command::new(bin()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let commands: Vec<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .collect();
    assert!(commands.len() >= 10, "{help}");
    for c in commands {
        assert!(
            cli.contains(&format!("`palisade {c}")),
            "docs/reference/cli.md does not show `palisade {c}`"
        );
    }
}

#[test]
fn the_readme_is_short_and_starts_with_the_two_commands() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.lines().count() <= 150,
        "README.md has {} lines (issue 43: at most 150; detail goes in the book)",
        readme.lines().count()
    );
    let blocks = blocks(&readme);
    let first: Vec<&str> = blocks
        .first()
        .map(|b| b.text.lines().collect())
        .unwrap_or_default();
    assert!(first
        .first()
        .is_some_and(|l| l.starts_with("cargo run --release -- demo")));
    assert!(first
        .get(1)
        .is_some_and(|l| l.starts_with("scripts/test.sh")));
    // Every link from the README into docs/ names a file that exists.
    for (i, _) in readme.match_indices("](docs/") {
        let rest = &readme[i + 2..];
        let target = &rest[..rest.find(')').unwrap()];
        let file = target.split('#').next().unwrap();
        assert!(repo().join(file).exists(), "README.md links to {target}");
    }
}

#[test]
fn the_configuration_reference_names_every_key_of_every_table() {
    let doc = std::fs::read_to_string(repo().join("docs/configuration.md")).unwrap();
    let (mut tables, mut keys) = (0, 0);
    for e in std::fs::read_dir(repo().join("proxy/src/config")).unwrap() {
        let src = std::fs::read_to_string(e.unwrap().path()).unwrap();
        for (i, _) in src.match_indices("pub struct Raw") {
            let rest = &src[i + "pub struct Raw".len()..];
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric()).collect();
            let body = &rest[..rest.find("\n}").unwrap_or(rest.len())];
            // RawListen → `listen`, RawRich → `rich`: the top-level tables. Nested tables
            // (RawListenTls, a budget rule) are described in their parent key's row.
            let mut table = String::new();
            for (n, c) in name.chars().enumerate() {
                if c.is_uppercase() && n > 0 {
                    table.push('_');
                }
                table.push(c.to_ascii_lowercase());
            }
            if !doc.contains(&format!("`{table}.")) {
                continue;
            }
            tables += 1;
            for line in body.lines() {
                let Some(field) = line.trim().strip_prefix("pub ") else {
                    continue;
                };
                let Some((field, _)) = field.split_once(':') else {
                    continue;
                };
                keys += 1;
                let key = format!("{table}.{field}");
                assert!(
                    doc.contains(&key),
                    "docs/configuration.md does not document `{key}`"
                );
            }
        }
    }
    assert!(tables >= 10 && keys >= 60, "{tables} tables, {keys} keys");
    eprintln!("{tables} tables, {keys} keys documented");
}

#[test]
fn every_route_the_admin_router_and_the_sidecar_serve_is_in_the_openapi_document() {
    let read = |p: &str| std::fs::read_to_string(repo().join(p)).unwrap();
    let doc = read("docs/reference/openapi.yaml");
    let paths: Vec<&str> = doc
        .lines()
        .filter(|l| l.starts_with("  /") && l.ends_with(':'))
        .map(|l| l.trim().trim_end_matches(':'))
        .collect();
    let documented = |route: &str| paths.iter().any(|p| p.starts_with(route));
    // The admin router's routes and prefixes: its string literals that are paths.
    let admin = read("proxy/src/control/admin.rs");
    let mut routes: Vec<String> = admin
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.starts_with("/admin/") || ["/healthz", "/readyz", "/metrics", "/ui"].contains(s)
        })
        .map(str::to_owned)
        .collect();
    // The receipt log's sub-routes (control/log.rs).
    for sub in ["checkpoint", "key", "proof", "consistency", "tile/"] {
        assert!(read("proxy/src/control/log.rs").contains(&format!("\"{sub}")));
        routes.push(format!("/admin/v1/log/{sub}"));
    }
    // The data plane's own prefixes.
    for (file, name) in [
        ("proxy/src/authority/lease_record.rs", "PREFIX"),
        ("proxy/src/enforce/escrow.rs", "PREFIX"),
        ("proxy/src/rcns/headers.rs", "WELL_KNOWN"),
        ("proxy/src/aip/relay.rs", "PREFIX"),
    ] {
        let src = read(file);
        let line = src
            .lines()
            .find(|l| l.starts_with(&format!("pub const {name}: &str = ")))
            .unwrap_or_else(|| panic!("{file}: no {name}"));
        routes.push(line.split('"').nth(1).unwrap().to_owned());
    }
    assert!(routes.len() >= 20, "{routes:?}");
    for r in &routes {
        assert!(
            documented(r),
            "the binary serves {r} but docs/reference/openapi.yaml has no path for it"
        );
    }
}
