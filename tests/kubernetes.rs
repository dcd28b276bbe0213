//! The Kubernetes deployment (issue 18): the Helm chart and the manifests rendered from it,
//! checked by `tests/k8s/check_chart.py` with Helm's own engine (helm-python-sdk, Helm v4's Go
//! SDK), the Kubernetes OpenAPI schemas (kubernetes-validate, strict) and our conventions, the
//! config each shape carries through `palisade config check`. The venv is the one
//! `scripts/test.sh` makes (`target/pyenv`); a missing venv fails this test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn the_chart_renders_valid_manifests_for_both_shapes() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join("target/pyenv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/test.sh (SETUP_ONLY=1 makes only the venv)",
        python.display()
    );
    let out = Command::new(python)
        .arg(repo.join("tests/k8s/check_chart.py"))
        .env("PALISADE_BIN", env!("CARGO_BIN_EXE_palisade"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.lines().last(), Some(r#"{"ok": true}"#));
}
