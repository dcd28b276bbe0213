//! `GET /admin/v1/approvals` (SPEC §9, §15): the approval register, every approval and
//! rejection an operator made of a held write, read from the receipt log itself (its
//! `approval` receipts) through audit export's reader, so it holds exactly what the log
//! proves.
//!
//! `?since=&until=` (RFC 3339) `&approver=&after=<log index>&limit=<n>` (default 100, at most
//! 1,000) `&format=jsonl|csv`. Each row: the decision's log index, time, escrow, operation,
//! rule, decision (`approved`, `rejected`), approver, reason, and the held write's `final`
//! outcome as its escrow record says now (`held`, `releasing`, `released`, `refused`,
//! `rejected`; empty once the record is gone). Paging as audit export's: `Link` and
//! `Palisade-Next-After`.

use http::{Response, StatusCode};
use palisade_policy::log::query::Asked;
use serde_json::Value;

use super::receipts::{csv_with, page_answer, unavailable, wants_csv};
use crate::context::Plane;
use crate::net::body::{text_response as text, ProxyBody};
use crate::store::log_query;

const COLUMNS: [&str; 12] = [
    "index",
    "at",
    "escrow_id",
    "operation",
    "rule",
    "outcome",
    "approver",
    "reason",
    "final",
    "request_digest",
    "lease_id",
    "receipt_id",
];

pub async fn list(
    plane: &Plane,
    query: Option<&str>,
    headers: &http::HeaderMap,
) -> Response<ProxyBody> {
    let Some(enf) = &plane.enforcement else {
        return text(StatusCode::NOT_FOUND, "write enforcement is off\n".into());
    };
    let mut asked = match Asked::parse(query.unwrap_or("")) {
        Ok(a) => a,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let f = &asked.filter;
    if f.caller.is_some()
        || f.operation.is_some()
        || f.outcome.is_some()
        || f.code.is_some()
        || f.rule.is_some()
        || f.kind.is_some()
    {
        return text(
            StatusCode::BAD_REQUEST,
            "the approval register reads since, until, approver, after, limit and format; \
             audit export (/admin/v1/receipts) filters by the others\n"
                .into(),
        );
    }
    let csv = match wants_csv(&asked, headers) {
        Ok(csv) => csv,
        Err(why) => return text(StatusCode::BAD_REQUEST, why),
    };
    asked.filter.kind = Some("approval".into());
    let limit = asked.limit.unwrap_or(100).clamp(1, 1_000);
    let store = enf.store.as_ref();
    let page = match log_query::page(store, &asked.filter, asked.after, limit).await {
        Ok(p) => p,
        Err(e) => return unavailable(&e),
    };
    let mut rows = Vec::with_capacity(page.found.len());
    for found in &page.found {
        let r = &found.receipt;
        let mut row = serde_json::Map::new();
        row.insert("index".into(), found.index.into());
        for c in COLUMNS.iter().filter(|c| !matches!(**c, "index" | "final")) {
            row.insert((*c).into(), r.get(*c).cloned().unwrap_or(Value::Null));
        }
        let held = match r.get("escrow_id").and_then(Value::as_str) {
            Some(id) => match store.escrow(id).await {
                Ok(rec) => rec.map(|rec| rec.state.as_str()),
                Err(e) => return unavailable(&e),
            },
            None => None,
        };
        row.insert("final".into(), held.map_or(Value::Null, Value::from));
        rows.push(Value::Object(row));
    }
    let body = if csv {
        csv_with(&COLUMNS, rows.into_iter())
    } else {
        rows.iter().map(|r| format!("{r}\n")).collect()
    };
    page_answer(body, csv, ("/admin/v1/approvals", query), page.next)
}
