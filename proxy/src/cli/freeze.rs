//! `palisade freeze` and `palisade unfreeze` (SPEC §14): the emergency stop from a shell, as a
//! call to a sidecar's admin listener. Any replica will do: a freeze holds at all of them.
//!
//! ```text
//! palisade freeze --admin https://10.0.0.7:9901 --scope caller --value sub:sha256:… \
//!                 --reason "refund loop" [--until 2026-12-06T18:00:00Z]
//! palisade freeze --admin URL --list
//! palisade unfreeze --admin URL --id 0193…
//! ```
//! The admin token comes from `--token-file` (or `PALISADE_ADMIN_TOKEN_FILE`) or from
//! `PALISADE_ADMIN_TOKEN`, never from the command line, where `ps` would show it.

use std::path::PathBuf;

use http::{Method, Request};
use serde_json::{json, Value};

use super::failure::Failure;

/// Largest answer read from the admin listener.
const MAX_ANSWER: usize = 4 << 20;

#[derive(Debug, clap::Args)]
pub(crate) struct AdminArgs {
    /// The admin listener's base URL (http or https).
    #[arg(long, env = "PALISADE_ADMIN_URL")]
    pub(crate) admin: String,
    /// A file holding the admin token (a file of `name:token` lines: the first one's).
    #[arg(long, env = "PALISADE_ADMIN_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(crate) struct FreezeArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// What to freeze.
    #[arg(long, value_parser = ["all", "caller", "operation", "resource"], required_unless_present = "list")]
    pub(crate) scope: Option<String>,
    /// The caller, operation (`METHOD /template`, `mcp:tool/<name>`) or resource (fence key).
    #[arg(long)]
    pub(crate) value: Option<String>,
    /// Why: shown to every agent the freeze refuses, and kept in the receipt log.
    #[arg(long, required_unless_present = "list")]
    pub(crate) reason: Option<String>,
    /// When it ends by itself (RFC 3339).
    #[arg(long)]
    pub(crate) until: Option<String>,
    /// List the freezes instead.
    #[arg(long, conflicts_with_all = ["scope", "value", "reason", "until"])]
    pub(crate) list: bool,
}

#[derive(Debug, clap::Args)]
pub(crate) struct UnfreezeArgs {
    #[command(flatten)]
    pub(crate) admin: AdminArgs,
    /// The freeze's id, as `freeze` printed it.
    #[arg(long)]
    pub(crate) id: String,
}

pub(crate) fn freeze(args: FreezeArgs) -> Result<(), Failure> {
    let (method, path, body) = if args.list {
        (Method::GET, "/admin/v1/freeze".to_owned(), None)
    } else {
        let mut doc = json!({"scope": args.scope, "reason": args.reason});
        if let Some(v) = args.value {
            doc["value"] = json!(v);
        }
        if let Some(u) = args.until {
            doc["until"] = json!(u);
        }
        (Method::POST, "/admin/v1/freeze".to_owned(), Some(doc))
    };
    call(&args.admin, method, &path, body)
}

pub(crate) fn unfreeze(args: UnfreezeArgs) -> Result<(), Failure> {
    // Ids are UUIDs: anything else would be another path.
    let id = &args.id;
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-') {
        return Err(Failure::usage(format!(
            "--id {id:?}: a freeze id is a UUID"
        )));
    }
    call(
        &args.admin,
        Method::DELETE,
        &format!("/admin/v1/freeze/{id}"),
        None,
    )
}

/// Sends one admin call and prints its JSON answer; a 4xx or 5xx is a refusal (exit 1) whose
/// problem goes to stderr.
fn call(admin: &AdminArgs, method: Method, path: &str, body: Option<Value>) -> Result<(), Failure> {
    let token = token(admin)?;
    let url = format!("{}{path}", admin.admin.trim_end_matches('/'));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::usage(format!("runtime: {e}")))?;
    let (status, answer) = rt.block_on(send(&url, method, token.as_deref(), body))?;
    let text = match serde_json::from_slice::<Value>(&answer) {
        Ok(v) => serde_json::to_string_pretty(&v).unwrap_or_default(),
        Err(_) => String::from_utf8_lossy(&answer).trim().to_owned(),
    };
    if status.is_success() {
        println!("{text}");
        return Ok(());
    }
    Err(Failure::refused(format!("{url}: {status}\n{text}")))
}

fn token(admin: &AdminArgs) -> Result<Option<String>, Failure> {
    if let Some(f) = &admin.token_file {
        return super::admin_client::token_file(f).map(Some);
    }
    Ok(std::env::var("PALISADE_ADMIN_TOKEN")
        .ok()
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty()))
}

async fn send(
    url: &str,
    method: Method,
    token: Option<&str>,
    body: Option<Value>,
) -> Result<(http::StatusCode, bytes::Bytes), Failure> {
    let client = super::admin_client::client()?;
    let method_mutates = method != Method::GET;
    let mut req = Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    // Every mutating admin call is JSON, body or not (SPEC §9).
    let bytes = body.map(|b| b.to_string()).unwrap_or_default();
    if method_mutates {
        req = req.header(http::header::CONTENT_TYPE, "application/json");
    }
    let req = req
        .body(http_body_util::Full::new(bytes::Bytes::from(bytes)))
        .map_err(|e| Failure::usage(format!("{url}: {e}")))?;
    super::admin_client::call(&client, req, url, MAX_ANSWER).await
}
