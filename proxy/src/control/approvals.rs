//! `GET /admin/v1/approvals` (SPEC §9, §15): the approval register, every approval and
//! rejection an operator made of a held write, read from the receipt log itself (the
//! `approval` receipts), so it holds exactly what the log proves.
//!
//! `?after=<index>` (a log index; the next page starts after it), `&limit=<n>` (decisions,
//! default 100, at most 1,000), `&format=jsonl|csv`. Each request reads at most [`SCAN`]
//! entries of the log; `Palisade-Next-After` says where the next page starts, and a page
//! with fewer than `limit` decisions and that header equal to the log's size has read it all.

use http::{HeaderValue, Response, StatusCode};
use serde_json::Value;

use crate::context::Plane;
use crate::net::body::{self, ProxyBody};

/// Most log entries one request reads.
pub const SCAN: u64 = 10_000;

/// The header naming the next page's `after`.
pub const NEXT: &str = "palisade-next-after";

const COLUMNS: [&str; 9] = [
    "index",
    "at",
    "escrow_id",
    "outcome",
    "approver",
    "reason",
    "request_digest",
    "lease_id",
    "receipt_id",
];

pub async fn list(plane: &Plane, query: Option<&str>) -> Response<ProxyBody> {
    let text = body::text_response;
    let Some(enf) = &plane.enforcement else {
        return text(StatusCode::NOT_FOUND, "write enforcement is off\n".into());
    };
    let (mut after, mut limit, mut csv) = (None::<u64>, 100usize, false);
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("after", v)) => after = v.parse().ok(),
            Some(("limit", v)) => limit = v.parse().unwrap_or(100).clamp(1, 1000),
            Some(("format", "csv")) => csv = true,
            Some(("format", "jsonl")) => csv = false,
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    format!("unknown parameter {pair:?}: after, limit, format=jsonl|csv\n"),
                )
            }
        }
    }
    let size = match enf.store.log_head().await {
        Ok(h) => h.size,
        Err(_) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store cannot be read\n".into(),
            )
        }
    };
    let from = after.map_or(0, |a| a.saturating_add(1)).min(size);
    let to = from.saturating_add(SCAN).min(size);
    let entries = match enf.store.log_entries(from, to).await {
        Ok(e) => e,
        Err(_) => {
            return text(
                StatusCode::SERVICE_UNAVAILABLE,
                "the store cannot be read\n".into(),
            )
        }
    };
    let mut rows: Vec<Value> = Vec::new();
    // Where the next page starts: after the last entry read, or after the last decision
    // returned when the page filled up first.
    let mut next = to.saturating_sub(1);
    for (index, jcs) in entries {
        let Ok(receipt) = serde_json::from_slice::<Value>(&jcs) else {
            continue;
        };
        if receipt["kind"] != "approval" {
            continue;
        }
        let mut row = serde_json::Map::new();
        row.insert("index".into(), index.into());
        for c in &COLUMNS[1..] {
            row.insert((*c).into(), receipt.get(*c).cloned().unwrap_or(Value::Null));
        }
        rows.push(Value::Object(row));
        if rows.len() == limit {
            next = index;
            break;
        }
    }
    let body = if csv { to_csv(&rows) } else { to_jsonl(&rows) };
    let mut resp = text(StatusCode::OK, body);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(if csv {
            "text/csv; charset=utf-8"
        } else {
            "application/jsonl"
        }),
    );
    h.insert(NEXT, HeaderValue::from(next));
    resp
}

fn to_jsonl(rows: &[Value]) -> String {
    rows.iter().map(|r| format!("{r}\n")).collect()
}

/// RFC 4180: a header row, fields quoted when they hold a comma, a quote or a line break.
fn to_csv(rows: &[Value]) -> String {
    let mut out = COLUMNS.join(",");
    out.push_str("\r\n");
    for r in rows {
        let fields: Vec<String> = COLUMNS
            .iter()
            .map(|c| match &r[c] {
                Value::Null => String::new(),
                Value::String(s) => quote(s),
                other => quote(&other.to_string()),
            })
            .collect();
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

fn quote(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}
