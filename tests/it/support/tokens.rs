//! Access tokens for the admission tests, minted by an independent library (PyJWT over
//! pyca/cryptography keys, `tests/admission/tokens.py`), and the `[admission]` table that trusts
//! their issuer.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::writes::BASE;

/// The issuer every minted token names.
pub const ISSUER: &str = "https://as.example.com";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Runs `tokens.py` with `spec` (see its docstring): writes `dir/jwks.json` and
/// `dir/jwks-rotated.json`, returns `{name: token}`.
pub fn mint(dir: &Path, spec: &Value) -> Value {
    let python = repo().join("target/pyenv/bin/python");
    assert!(
        python.exists(),
        "run scripts/test.sh: it makes the venv with PyJWT"
    );
    let out = Command::new(python)
        .arg(repo().join("tests/admission/tokens.py"))
        .arg(dir)
        .arg(spec.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tokens.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The `[admission]` table for `mode`, trusting the keys `mint` wrote into `dir`.
pub fn admission_toml(mode: &str, dir: &Path) -> String {
    format!(
        "[admission]\nmode = \"{mode}\"\nresource = \"{BASE}\"\njwks = [\"{}\"]\n\
         issuers = [\"{ISSUER}\"]\n",
        dir.join("jwks.json").display()
    )
}
