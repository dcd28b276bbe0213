//! The command line as SPEC §1 describes it, run as the real binary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use palisade::store::Receipts;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod audit;
mod config;
mod demo;
mod leases;
mod rehash;

fn palisade(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(support::bin())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A command refused on its arguments exits without reading its input: a broken pipe
    // here is that, not a failure of the test.
    if let Err(e) = child.stdin.take().unwrap().write_all(stdin) {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
    }
    child.wait_with_output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn testdata(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../testdata")
        .join(rel)
}
