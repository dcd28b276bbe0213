//! `palisade audit export --url ADMIN --token-file F [--since T] [--format jsonl|csv]` (SPEC
//! §9): every receipt of a running sidecar's log since a time, written to stdout for a SIEM
//! to ingest: JSON lines of envelopes (each verifiable alone with the log's key) or CSV. It
//! follows the export's cursor page after page until no later receipt can match; a CSV's
//! header row is written once. The last line on stderr names the log index to resume after.

use std::io::Write as _;
use std::path::Path;

use http::{Request, StatusCode};

use super::admin_client;
use super::Failure;

/// Receipts a page: the endpoint's most.
const PAGE: usize = 1_000;
/// Most bytes of one page: 1,000 envelopes of the largest entries, with their proofs.
const MAX_PAGE: usize = 1_000 * 300 * 1024;

pub(super) struct Export<'a> {
    pub url: &'a str,
    pub token_file: Option<&'a Path>,
    pub since: Option<&'a str>,
    pub until: Option<&'a str>,
    pub after: Option<u64>,
    pub csv: bool,
}

pub(super) fn run(e: &Export<'_>) -> Result<(), Failure> {
    for (name, t) in [("--since", e.since), ("--until", e.until)] {
        if let Some(t) = t {
            if palisade_log::query::parse_time(t).is_none() {
                return Err(Failure::usage(format!(
                    "{name} {t:?}: not an RFC 3339 time"
                )));
            }
        }
    }
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|err| Failure::usage(format!("runtime: {err}")))?
        .block_on(pages(e))
}

async fn pages(e: &Export<'_>) -> Result<(), Failure> {
    let token = e.token_file.map(admin_client::token_file).transpose()?;
    let client = admin_client::client()?;
    let enc = |s: &str| {
        percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
    };
    let mut fixed = format!(
        "limit={PAGE}&format={}",
        if e.csv { "csv" } else { "jsonl" }
    );
    for (k, v) in [("since", e.since), ("until", e.until)] {
        if let Some(v) = v {
            fixed.push_str(&format!("&{k}={}", enc(v)));
        }
    }
    let base = format!("{}/admin/v1/receipts", e.url.trim_end_matches('/'));
    let mut after = e.after;
    let (mut first, mut count, mut last) = (true, 0usize, None);
    let mut out = std::io::stdout().lock();
    loop {
        let url = match after {
            Some(a) => format!("{base}?{fixed}&after={a}"),
            None => format!("{base}?{fixed}"),
        };
        let mut req = Request::get(&url);
        if let Some(t) = &token {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let req = req
            .body(http_body_util::Full::default())
            .map_err(|err| Failure::usage(format!("{url}: {err}")))?;
        let (status, headers, body) =
            admin_client::call_with_headers(&client, req, &url, MAX_PAGE).await?;
        if status != StatusCode::OK {
            return Err(Failure::refused(format!(
                "{url}: {status} {}",
                String::from_utf8_lossy(&body).trim()
            )));
        }
        let text = String::from_utf8_lossy(&body);
        let mut lines = text.lines();
        if e.csv {
            // Every page starts with the header row; the output has it once.
            let header = lines.next().unwrap_or("");
            if first && closed(writeln!(out, "{header}"))? {
                return Ok(());
            }
        }
        for line in lines.filter(|l| !l.is_empty()) {
            if closed(writeln!(out, "{line}"))? {
                return Ok(());
            }
            count += 1;
            last = index_of(line, e.csv).max(last);
        }
        first = false;
        let next = headers
            .get("palisade-next-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match next {
            // A cursor that does not move would loop forever: the sidecar's answer is wrong.
            Some(n) if after.is_some_and(|a| n <= a) => {
                return Err(Failure::refused(format!(
                    "{url}: the cursor did not advance ({n})"
                )))
            }
            Some(n) => after = Some(n),
            None => break,
        }
    }
    if closed(out.flush())? {
        return Ok(());
    }
    eprintln!(
        "audit export: {count} receipts{}",
        last.max(after)
            .map_or(String::new(), |a| format!("; resume with --after {a}"))
    );
    Ok(())
}

/// The log index a line names: an envelope's `index`, a CSV row's first field.
fn index_of(line: &str, csv: bool) -> Option<u64> {
    if csv {
        line.split(',').next()?.parse().ok()
    } else {
        serde_json::from_str::<serde_json::Value>(line).ok()?["index"].as_u64()
    }
}

/// Whether stdout was closed by its reader (`| head`): the export ends there, quietly and
/// successfully, as a Unix filter does; any other write error is a failure.
fn closed(written: std::io::Result<()>) -> Result<bool, Failure> {
    match written {
        Ok(()) => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(true),
        Err(e) => Err(Failure::refused(format!("stdout: {e}"))),
    }
}
