//! The agent's Python library (`clients/python`, issue 40): its pytest suite, run against this
//! build's binary — the demo's sample SoR and sidecar, sidecars of its own for budgets,
//! freezes and outages, and the official MCP SDK's server behind one. It also builds the
//! wheel and installs it into a fresh venv. `scripts/test.sh` makes the venv with pytest.

use std::path::Path;
use std::process::Command;

use crate::support::bin;

#[test]
fn the_python_library_against_the_binary() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(python.exists(), "run scripts/test.sh: it makes the venv");
    let out = Command::new(python)
        .args([
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "clients/python/tests",
        ])
        .current_dir(&repo)
        .env("PALISADE_BIN", bin())
        .env("PYTHONPATH", repo.join("clients/python/src"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("pytest runs");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "pytest failed:\n{said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One line of it in the test output: how many passed.
    eprintln!("{}", said.lines().last().unwrap_or(""));
    assert!(said.contains(" passed"), "{said}");
}
