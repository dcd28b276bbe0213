//! Which receipts an audit export asks for (SPEC §9): `since`, `until`, `caller`, `operation`,
//! `outcome`, `code`, `rule`, `kind`, `approver`, judged on a receipt's own members. Pure: the
//! store's reader ([`Filter::matches`] on each entry it reads) and `palisade simulate` (which
//! reads the export back) share it.
//!
//! A receipt's `outcome` is its `outcome` member where it has one (a held write, an approval,
//! an expiry, a freeze), else the one its kind implies: a `commit` was `forwarded`, a
//! `rejection` `refused`, a `dry-run` `dry-run`, a `compensation` `compensated`, an `interim`
//! `interim`, a `delivery` `delivered`.

use serde_json::Value;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// Most characters a filter's value may have.
const MAX_VALUE: usize = 512;

/// What an export asks for; `None` matches anything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Unix milliseconds, inclusive.
    pub since_ms: Option<i64>,
    /// Unix milliseconds, exclusive.
    pub until_ms: Option<i64>,
    pub caller: Option<String>,
    /// The budgets' key form (`PUT /api/v2/items/{id}`, `mcp:tool/create_order`).
    pub operation: Option<String>,
    pub outcome: Option<String>,
    pub code: Option<String>,
    pub rule: Option<String>,
    pub kind: Option<String>,
    pub approver: Option<String>,
}

/// A query string's filter and paging, and what else it named.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Asked {
    pub filter: Filter,
    /// The log index the page starts after.
    pub after: Option<u64>,
    pub limit: Option<usize>,
    /// `format=csv|jsonl`, when given.
    pub format: Option<String>,
}

impl Asked {
    /// Reads `since=…&until=…&caller=…` (percent-encoded values, `+` a space). An unknown
    /// parameter, a repeated one, a time that is not RFC 3339 or a number that is not one is
    /// an error that names it: a SIEM's query with a typo must not silently match everything.
    pub fn parse(query: &str) -> Result<Asked, String> {
        let mut a = Asked::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, raw) = pair.split_once('=').unwrap_or((pair, ""));
            let v = decode(raw);
            if v.len() > MAX_VALUE {
                return Err(format!("{k}: longer than {MAX_VALUE} characters"));
            }
            let f = &mut a.filter;
            let slot = match k {
                "since" => return_time(&mut f.since_ms, k, &v).map(|_| None)?,
                "until" => return_time(&mut f.until_ms, k, &v).map(|_| None)?,
                "caller" => Some(&mut f.caller),
                "operation" => Some(&mut f.operation),
                "outcome" => Some(&mut f.outcome),
                "code" => Some(&mut f.code),
                "rule" => Some(&mut f.rule),
                "kind" => Some(&mut f.kind),
                "approver" => Some(&mut f.approver),
                "format" => Some(&mut a.format),
                "after" => {
                    once(&a.after, k)?;
                    a.after = Some(
                        v.parse()
                            .map_err(|_| format!("after: {v:?} is not a log index"))?,
                    );
                    None
                }
                "limit" => {
                    once(&a.limit, k)?;
                    a.limit = Some(
                        v.parse()
                            .map_err(|_| format!("limit: {v:?} is not a number"))?,
                    );
                    None
                }
                _ => return Err(format!("unknown parameter {k:?}")),
            };
            if let Some(slot) = slot {
                once(slot, k)?;
                *slot = Some(v);
            }
        }
        Ok(a)
    }
}

fn once<T>(slot: &Option<T>, k: &str) -> Result<(), String> {
    match slot {
        Some(_) => Err(format!("{k}: given twice")),
        None => Ok(()),
    }
}

fn return_time(slot: &mut Option<i64>, k: &str, v: &str) -> Result<(), String> {
    once(slot, k)?;
    *slot = Some(parse_time(v).ok_or_else(|| format!("{k}: {v:?} is not an RFC 3339 time"))?);
    Ok(())
}

/// RFC 3339 → Unix milliseconds.
pub fn parse_time(s: &str) -> Option<i64> {
    let t = OffsetDateTime::parse(s, &Rfc3339).ok()?;
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).ok()
}

/// A receipt's `at`, in Unix milliseconds.
pub fn at_ms(receipt: &Value) -> Option<i64> {
    receipt
        .get("at")
        .and_then(Value::as_str)
        .and_then(parse_time)
}

/// A receipt's outcome (see the module's note).
pub fn outcome(receipt: &Value) -> Option<&str> {
    if let Some(o) = receipt.get("outcome").and_then(Value::as_str) {
        return Some(o);
    }
    Some(match receipt.get("kind").and_then(Value::as_str)? {
        "commit" => "forwarded",
        "rejection" => "refused",
        "dry-run" => "dry-run",
        "compensation" => "compensated",
        "interim" => "interim",
        "delivery" => "delivered",
        _ => return None,
    })
}

impl Filter {
    /// Whether `receipt` (an entry's JSON) is one the filter asks for. A receipt without the
    /// member a filter names does not match it; one whose `at` cannot be read matches no
    /// time bound.
    pub fn matches(&self, receipt: &Value) -> bool {
        let member = |name: &str, want: &Option<String>| match want {
            None => true,
            Some(w) => receipt.get(name).and_then(Value::as_str) == Some(w.as_str()),
        };
        if self.since_ms.is_some() || self.until_ms.is_some() {
            let Some(at) = at_ms(receipt) else {
                return false;
            };
            if self.since_ms.is_some_and(|s| at < s) || self.until_ms.is_some_and(|u| at >= u) {
                return false;
            }
        }
        member("caller", &self.caller)
            && member("operation", &self.operation)
            && member("code", &self.code)
            && member("rule", &self.rule)
            && member("kind", &self.kind)
            && member("approver", &self.approver)
            && self
                .outcome
                .as_deref()
                .is_none_or(|w| outcome(receipt) == Some(w))
    }
}

/// Percent-decoding as forms write it (`+` is a space); a malformed escape stays as it is.
fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    percent_encoding::percent_decode_str(&spaced)
        .decode_utf8_lossy()
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_query_is_read_whole_or_refused_by_name() {
        let a = Asked::parse(
            "since=2026-12-07T10:00:00Z&caller=spiffe%3A%2F%2Fa&operation=PUT+%2Fitems%2F%7Bid%7D&after=41&limit=5&format=csv",
        )
        .unwrap();
        assert_eq!(a.filter.since_ms, Some(1_796_637_600_000));
        assert_eq!(a.filter.caller.as_deref(), Some("spiffe://a"));
        assert_eq!(a.filter.operation.as_deref(), Some("PUT /items/{id}"));
        assert_eq!(
            (a.after, a.limit, a.format.as_deref()),
            (Some(41), Some(5), Some("csv"))
        );
        for (q, says) in [
            ("sinse=x", "unknown parameter"),
            ("since=yesterday", "not an RFC 3339 time"),
            ("kind=commit&kind=rejection", "given twice"),
            ("after=-1", "not a log index"),
        ] {
            let e = Asked::parse(q).unwrap_err();
            assert!(e.contains(says), "{q}: {e}");
        }
        assert!(Asked::parse(&format!("rule={}", "r".repeat(513))).is_err());
    }

    #[test]
    fn filters_read_the_receipts_own_members() {
        let commit = json!({"kind": "commit", "caller": "a", "operation": "PUT /x",
            "at": "2026-12-07T10:00:00.000Z"});
        let refused = json!({"kind": "rejection", "caller": "a", "code": "ERR_POLICY_DENIED",
            "rule": "no-deletes", "at": "2026-12-07T10:00:01.000Z"});
        let approval = json!({"kind": "approval", "outcome": "approved", "approver": "alice",
            "at": "2026-12-07T10:00:02.000Z"});
        let f = |q: &str| Asked::parse(q).unwrap().filter;
        let pick = |f: Filter| {
            [&commit, &refused, &approval]
                .iter()
                .map(|r| f.matches(r))
                .collect::<Vec<_>>()
        };
        assert_eq!(pick(f("")), [true, true, true]);
        assert_eq!(pick(f("outcome=forwarded")), [true, false, false]);
        assert_eq!(pick(f("outcome=refused&caller=a")), [false, true, false]);
        assert_eq!(pick(f("outcome=approved")), [false, false, true]);
        assert_eq!(pick(f("rule=no-deletes")), [false, true, false]);
        assert_eq!(pick(f("approver=alice")), [false, false, true]);
        assert_eq!(pick(f("operation=PUT+%2Fx")), [true, false, false]);
        assert_eq!(
            pick(f("since=2026-12-07T10:00:01Z&until=2026-12-07T10:00:02Z")),
            [false, true, false]
        );
        // Another offset spelling of the same instant.
        assert_eq!(
            pick(f("since=2026-12-07T11:00:01%2B01:00")),
            [false, true, true]
        );
        assert!(!f("since=2026-12-07T10:00:00Z").matches(&json!({"kind": "commit"})));
    }

    #[test]
    fn percent_decoding_keeps_what_is_not_an_escape() {
        assert_eq!(decode("a%2Fb%zz%4+c"), "a/b%zz%4 c");
        assert_eq!(decode("%e2%82%ac"), "€");
    }
}
