//! The admin listener's credential (SPEC §9): `admin.token_file` or a client certificate with
//! an allowed SPIFFE ID (mTLS), checked on every mutating and `/admin/v1/*` call, the probes
//! left open, a non-loopback listener refused without one, slow headers cut. Approvals are made with curl, as an operator would.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::io::{Read as _, Write as _};
use std::process::Command;
use std::time::Duration;

use http::StatusCode;
use palisade_policy::keys::KeyPair;
use serde_json::{json, Value};
use support::writes::*;
use support::*;

mod identities;
mod tokens;

/// `curl` against the admin listener: the status and the body. A mutating call says it is
/// JSON, as SPEC §9 asks of every admin client.
pub(crate) fn curl(p: &Palisade, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut cmd = Command::new("curl");
    cmd.args(["-s", "-X", method, "-w", "\n%{http_code}"]);
    if method != "GET" {
        cmd.args(["-H", "content-type: application/json"]);
    }
    if let Some(t) = token {
        cmd.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out = cmd
        .arg(format!("http://{}{path}", p.admin))
        .output()
        .expect("curl is installed (scripts/test.sh installs it)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.trim().parse().unwrap(), body.to_owned())
}

/// A sidecar whose admin listener takes the token in `dir/admin-token`.
async fn guarded(token: &str) -> Setup {
    guarded_with(token, "").await
}

/// [`guarded`], with `more` configuration after it.
pub(crate) async fn guarded_with(token: &str, more: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("admin-token");
    std::fs::write(&file, format!("{token}\n")).unwrap();
    let extra = format!(
        "[admin]\naddr = \"127.0.0.1:0\"\ntoken_file = \"{}\"\n{more}",
        file.display()
    );
    start_in(Upstream::start().await, dir, &extra)
}

/// Holds a HUMAN_ESCROW write to `/items/1`; returns the escrow id.
async fn hold(s: &Setup) -> String {
    hold_at(s, "/items/1").await
}

pub(crate) async fn hold_at(s: &Setup, path: &str) -> String {
    let agent = KeyPair::from_seed(AGENT_SEED);
    let lease = lease_for(&agent, path, 1, |f| {
        f.insert("recovery_mode".into(), json!("HUMAN_ESCROW"));
    });
    let (parts, body) = send(
        &http1_client(),
        put(&s.p, path, Some(&lease), Some(&inverse_for(path))),
    )
    .await;
    assert_eq!(
        parts.status,
        StatusCode::ACCEPTED,
        "{}",
        String::from_utf8_lossy(&body)
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    doc["escrow_id"].as_str().unwrap().to_owned()
}

fn puts(s: &Setup) -> usize {
    s.upstream
        .requests()
        .iter()
        .filter(|r| r.method == "PUT")
        .count()
}
