//! `GET /admin/v1/receipts` (SPEC §9): audit export. The receipts a filter asks for, oldest
//! first, as JSON lines of envelopes (each verifiable alone against the log's key, as a
//! client's `Agent-Commit-Receipt` is) or, with `Accept: text/csv` or `format=csv`, as CSV
//! of each receipt's top-level members. `Link: <…&after=N>; rel="next"` walks the log a page
//! at a time; a page reads at most [`log_query::SCAN`] entries.
//!
//! `?since=&until=` (RFC 3339) `&caller=&operation=&outcome=&code=&rule=&kind=&approver=`
//! `&after=<log index>&limit=<n>` (default 100, at most 1,000).

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use palisade_policy::log::query::Asked;
use serde_json::Value;

use crate::context::Plane;
use crate::net::body::{self, text_response as text, ProxyBody};
use crate::store::log_query;

/// The header naming the next page's `after` (also in `Link`).
pub const NEXT: &str = "palisade-next-after";
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1_000;

/// The CSV's columns: the log index, then every top-level member a receipt may have; an
/// object or array member is its JSON text.
const COLUMNS: [&str; 31] = [
    "index",
    "at",
    "kind",
    "receipt_id",
    "operation",
    "method",
    "sor_target_uri",
    "caller",
    "outcome",
    "code",
    "rule",
    "upstream_status",
    "lease_id",
    "cas_fence_epoch",
    "request_digest",
    "pre_image_state_hash",
    "lockfile_digest",
    "rules_digest",
    "rules_report",
    "trace_id",
    "trace_anchor_ref",
    "escrow_id",
    "approver",
    "reason",
    "by",
    "freeze_id",
    "connector",
    "synthesis_id",
    "contract_hash",
    "negotiation_origin",
    "rcns_step",
];

pub async fn export(
    plane: &Plane,
    query: Option<&str>,
    headers: &HeaderMap,
) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return text(
            StatusCode::NOT_FOUND,
            "write enforcement is off: there is no log\n".into(),
        );
    };
    let asked = match Asked::parse(query.unwrap_or("")) {
        Ok(a) => a,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let csv = match wants_csv(&asked, headers) {
        Ok(csv) => csv,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    let limit = asked.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let store = enf.store.as_ref();
    let page = match log_query::page(store, &asked.filter, asked.after, limit).await {
        Ok(p) => p,
        Err(e) => return unavailable(&e),
    };
    let body = if csv {
        to_csv(page.found.iter().map(|f| (f.index, &f.receipt)))
    } else {
        match log_query::envelopes(store, &page).await {
            Ok(envs) => envs
                .iter()
                .map(|e| format!("{}\n", serde_json::to_string(e).unwrap_or_default()))
                .collect(),
            Err(e) => return unavailable(&e),
        }
    };
    page_answer(body, csv, ("/admin/v1/receipts", query), page.next)
}

/// CSV or JSON lines: `format=`, else `Accept: text/csv` (and not JSON lines before it); an
/// unknown format is refused (the 400's text).
pub(crate) fn wants_csv(asked: &Asked, headers: &HeaderMap) -> Result<bool, String> {
    match asked.format.as_deref() {
        Some("csv") => Ok(true),
        Some("jsonl") => Ok(false),
        Some(other) => Err(format!("format: {other:?} is neither jsonl nor csv\n")),
        None => Ok(accepts_csv(headers)),
    }
}

/// A page's answer: 200 with its body as CSV or JSON lines and, when more may match, the
/// next page named (`Link`, `Palisade-Next-After`) by the same path and query.
pub(crate) fn page_answer(
    body: String,
    csv: bool,
    (path, query): (&str, Option<&str>),
    next: Option<u64>,
) -> Response<ProxyBody> {
    let mut resp = text(StatusCode::OK, body);
    let content_type = if csv {
        "text/csv; charset=utf-8"
    } else {
        "application/jsonl"
    };
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Some(next) = next {
        link_next(&mut resp, path, query, next);
    }
    resp
}

/// `Accept: text/csv` (and not JSON lines before it).
fn accepts_csv(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|m| {
            m.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .find(|m| m == "text/csv" || m == "application/jsonl" || m == "application/x-ndjson")
        .is_some_and(|m| m == "text/csv")
}

/// `Palisade-Next-After: N` and `Link: <path?…&after=N>; rel="next"`: the same query, the
/// next page.
fn link_next(resp: &mut Response<ProxyBody>, path: &str, query: Option<&str>, next: u64) {
    let mut pairs: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with("after=") && *p != "after")
        .collect();
    let after = format!("after={next}");
    pairs.push(&after);
    let link = format!("<{path}?{}>; rel=\"next\"", pairs.join("&"));
    let h = resp.headers_mut();
    h.insert(NEXT, HeaderValue::from(next));
    if let Ok(v) = HeaderValue::from_str(&link) {
        h.insert(header::LINK, v);
    }
}

/// RFC 4180: a header row, fields quoted when they hold a comma, a quote or a line break.
pub(crate) fn to_csv<'a>(rows: impl Iterator<Item = (u64, &'a Value)>) -> String {
    csv_with(
        &COLUMNS,
        rows.map(|(i, r)| {
            let mut row = r.as_object().cloned().unwrap_or_default();
            row.insert("index".into(), i.into());
            Value::Object(row)
        }),
    )
}

/// `rows` under `columns`, in CSV.
pub(crate) fn csv_with(columns: &[&str], rows: impl Iterator<Item = Value>) -> String {
    let mut out = columns.join(",");
    out.push_str("\r\n");
    for r in rows {
        let fields: Vec<String> = columns
            .iter()
            .map(|c| match r.get(*c) {
                None | Some(Value::Null) => String::new(),
                Some(Value::String(s)) => quote(s),
                Some(other) => quote(&other.to_string()),
            })
            .collect();
        out.push_str(&fields.join(","));
        out.push_str("\r\n");
    }
    out
}

fn quote(s: &str) -> String {
    // A field a spreadsheet would run as a formula is quoted and prefixed (OWASP's CSV
    // injection advice): a caller or reason is text an agent chose.
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{s}")
    } else {
        s.to_owned()
    };
    if s.contains([',', '"', '\n', '\r', '\'']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s
    }
}

pub(crate) fn unavailable(e: &crate::store::StoreError) -> Response<ProxyBody> {
    tracing::warn!(error = %e, "audit export: the store cannot be read");
    body::text_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "the store cannot be read\n".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn csv_quotes_what_a_spreadsheet_would_run_or_split() {
        let r = json!({"kind": "rejection", "caller": "=HYPERLINK(\"x\")", "reason": "a, b",
            "rules_report": [{"rule": "r", "would": "hold"}], "cas_fence_epoch": 7});
        let out = to_csv([(3, &r)].into_iter());
        let line = out.lines().nth(1).unwrap();
        assert!(line.starts_with("3,,rejection,"), "{line}");
        assert!(line.contains("\"'=HYPERLINK(\"\"x\"\")\""), "{line}");
        assert!(line.contains("\"a, b\""), "{line}");
        assert!(
            line.contains("\"[{\"\"rule\"\":\"\"r\"\",\"\"would\"\":\"\"hold\"\"}]\""),
            "{line}"
        );
        assert_eq!(
            out.lines().next().unwrap().split(',').count(),
            COLUMNS.len()
        );
    }

    #[test]
    fn accept_chooses_csv_only_when_it_comes_first() {
        let h = |v: &str| {
            let mut m = HeaderMap::new();
            m.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
            accepts_csv(&m)
        };
        assert!(h("text/csv"));
        assert!(h("Text/CSV; charset=utf-8, application/jsonl"));
        assert!(!h("application/jsonl, text/csv"));
        assert!(!h("*/*"));
        assert!(!accepts_csv(&HeaderMap::new()));
    }
}
