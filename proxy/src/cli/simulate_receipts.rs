//! `palisade simulate --traffic FILE` where FILE holds the JSON lines of `audit export` (SPEC
//! §15): the writes the log recorded, each known by its receipt alone. A receipt holds the
//! method, the target, the operation and the caller, never a body, a query or headers, so
//! input contracts and parameters are not judged, and a rule that reads what a receipt lacks
//! leaves the write `unjudged` (by that rule) rather than guessed.
//!
//! Which receipts are writes: `commit`, `rejection`, `escrow` and `dry-run` of a write method,
//! one a lease (a held write released later has two receipts, its hold's and its commit's),
//! and not a held write's later outcome (a receipt naming an `escrow_id`: an approval, an
//! expiry).

use std::collections::HashSet;

use serde_json::Value;

use super::replay::lease::is_write;
use crate::enforce::verdict::Shape;

/// One write, as its receipt has it; `index` is its line in the file (from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub index: usize,
    pub method: String,
    pub path: Option<String>,
    pub operation: Option<String>,
    pub caller: Option<String>,
}

impl Written {
    pub fn shape(&self) -> Shape<'_> {
        Shape::Receipt {
            method: &self.method,
            path: self.path.as_deref(),
            operation: self.operation.as_deref(),
            caller: self.caller.as_deref(),
        }
    }
}

/// Whether `text` looks like audit export's JSON lines (its first line an envelope or a
/// receipt) rather than a HAR document.
pub(crate) fn is_export(text: &[u8]) -> bool {
    let first = text
        .split(|b| *b == b'\n')
        .find(|l| !l.trim_ascii().is_empty());
    first
        .and_then(|l| serde_json::from_slice::<Value>(l).ok())
        .is_some_and(|v| v.get("receipt").is_some() || v.get("receipt_id").is_some())
}

/// The writes of an export, and how many lines were not receipts.
pub(crate) fn writes(text: &[u8]) -> (Vec<Written>, usize) {
    let (mut out, mut skipped) = (Vec::new(), 0);
    let mut leases = HashSet::new();
    for (index, line) in text
        .split(|b| *b == b'\n')
        .enumerate()
        .filter(|(_, l)| !l.trim_ascii().is_empty())
    {
        let Ok(v) = serde_json::from_slice::<Value>(line) else {
            skipped += 1;
            continue;
        };
        let r = v.get("receipt").unwrap_or(&v);
        let s = |k: &str| r.get(k).and_then(Value::as_str);
        let Some(kind) = s("kind") else {
            skipped += 1;
            continue;
        };
        let Some(method) = s("method") else { continue };
        if !matches!(kind, "commit" | "rejection" | "escrow" | "dry-run")
            || r.get("escrow_id").is_some()
            || !http::Method::from_bytes(method.as_bytes()).is_ok_and(|m| is_write(&m))
        {
            continue;
        }
        if let Some(lease) = s("lease_id") {
            if !leases.insert(lease.to_owned()) {
                continue;
            }
        }
        let path = s("sor_target_uri")
            .and_then(|u| u.parse::<http::Uri>().ok())
            .map(|u| u.path().to_owned());
        out.push(Written {
            index,
            method: method.to_owned(),
            path,
            operation: s("operation").map(str::to_owned),
            caller: s("caller").map(str::to_owned),
        });
    }
    (out, skipped)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn each_write_is_read_once_from_its_receipts() {
        let lines = [
            r#"{"receipt":{"kind":"escrow","method":"PUT","lease_id":"l1","sor_target_uri":"https://erp.example/items/1","operation":"PUT /items/{id}","caller":"a"},"index":0}"#,
            r#"{"receipt":{"kind":"approval","method":"PUT","lease_id":"l1","escrow_id":"e1"},"index":1}"#,
            r#"{"receipt":{"kind":"commit","method":"PUT","lease_id":"l1","sor_target_uri":"https://erp.example/items/1"},"index":2}"#,
            r#"{"receipt":{"kind":"rejection","method":"DELETE","code":"ERR_POLICY_DENIED","operation":"DELETE /items/{id}"},"index":3}"#,
            r#"{"receipt":{"kind":"rejection","method":"GET","code":"ERR_CONTRACT_OUTPUT"},"index":4}"#,
            r#"{"receipt":{"kind":"freeze","outcome":"frozen"},"index":5}"#,
            "not json",
            r#"{"receipt_id":"urn:uuid:x","kind":"commit","method":"POST","lease_id":"l2","sor_target_uri":"https://erp.example/orders"}"#,
        ]
        .join("\n");
        assert!(is_export(lines.as_bytes()));
        assert!(!is_export(br#"{"log":{"version":"1.2","entries":[]}}"#));
        let (w, skipped) = writes(lines.as_bytes());
        assert_eq!(skipped, 1);
        let got: Vec<(usize, &str, Option<&str>, Option<&str>)> = w
            .iter()
            .map(|w| {
                (
                    w.index,
                    w.method.as_str(),
                    w.path.as_deref(),
                    w.operation.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (0, "PUT", Some("/items/1"), Some("PUT /items/{id}")),
                (3, "DELETE", None, Some("DELETE /items/{id}")),
                (7, "POST", Some("/orders"), None),
            ]
        );
        assert_eq!(w[0].caller.as_deref(), Some("a"));
    }
}
