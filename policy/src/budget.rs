//! Write budgets (SPEC §14): at most `limit` writes per key are forwarded in any interval of
//! length `window` (a sliding window), the key made of a rule's dimensions (`caller`,
//! `operation`, `resource`, any combination) as freezes name them.
//!
//! ```toml
//! [budgets]
//! rules = [{ name = "per-agent", per = ["caller"], limit = 600, window = "1m" }]
//! ```
//!
//! A rule's key is the SHA-256 of its name and the write's values (first 16 bytes): bounded in
//! the store whatever a resource URI's length, and the same at every replica. A write with no
//! known caller counts under the empty caller, so anonymous writes share one budget.

use crate::digest::Sha256Digest;
use crate::freeze::WriteKeys;

/// Most rules.
pub const MAX_RULES: usize = 64;
/// Largest `limit`.
pub const MAX_LIMIT: u32 = 1_000_000;
/// Longest `window`, in ms (a day).
pub const MAX_WINDOW_MS: u64 = 86_400_000;

/// A key dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Caller,
    Operation,
    Resource,
}

impl Dim {
    pub fn parse(s: &str) -> Option<Dim> {
        match s {
            "caller" => Some(Dim::Caller),
            "operation" => Some(Dim::Operation),
            "resource" => Some(Dim::Resource),
            _ => None,
        }
    }
}

/// One rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub name: String,
    pub per: Vec<Dim>,
    pub limit: u32,
    pub window_ms: u64,
}

impl Rule {
    /// The write's key under this rule.
    pub fn key(&self, keys: &WriteKeys<'_>) -> [u8; 16] {
        // Length-prefixed parts: no two (name, values) lists share an encoding.
        let mut text = Vec::with_capacity(64);
        let mut part = |b: &[u8]| {
            text.extend_from_slice(&(b.len() as u64).to_be_bytes());
            text.extend_from_slice(b);
        };
        part(self.name.as_bytes());
        for d in &self.per {
            match d {
                Dim::Caller => part(keys.caller.unwrap_or("").as_bytes()),
                Dim::Operation => part(keys.operation.as_bytes()),
                Dim::Resource => part(keys.resource.as_bytes()),
            }
        }
        let d = Sha256Digest::of(&text);
        let mut out = [0u8; 16];
        out.copy_from_slice(&d.0[..16]);
        out
    }
}

/// When, at `now_ms`, one more write fits a window of `window_ms` that already holds the
/// spends at `times` (ascending) under `limit`: `None` now, else after how many ms.
pub fn retry_after(times: &[i64], limit: u32, window_ms: u64, now_ms: i64) -> Option<u64> {
    let since = now_ms.saturating_sub(i64::try_from(window_ms).unwrap_or(i64::MAX));
    let live: Vec<i64> = times.iter().copied().filter(|t| *t > since).collect();
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if live.len() < limit {
        return None;
    }
    // The spend whose leaving makes room: the (len - limit)-th oldest of those in the window
    // (with a limit of 0, nothing ever fits: a whole window).
    let Some(leaving) = live
        .len()
        .checked_sub(limit)
        .and_then(|i| live.get(i))
        .copied()
    else {
        return Some(window_ms.max(1));
    };
    let at = leaving.saturating_add(i64::try_from(window_ms).unwrap_or(i64::MAX));
    Some(u64::try_from(at - now_ms).unwrap_or(0).max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_per_rule_and_per_value() {
        let rule = |per: Vec<Dim>| Rule {
            name: "r".into(),
            per,
            limit: 2,
            window_ms: 10_000,
        };
        let w = WriteKeys {
            caller: Some("c"),
            operation: "PUT /items/{id}",
            also: None,
            resource: "https://x/items/1",
        };
        let by_caller = rule(vec![Dim::Caller]);
        let other_resource = WriteKeys {
            resource: "https://x/items/2",
            ..w
        };
        assert_eq!(by_caller.key(&w), by_caller.key(&other_resource));
        let by_both = rule(vec![Dim::Caller, Dim::Resource]);
        assert_ne!(by_both.key(&w), by_both.key(&other_resource));
        let renamed = Rule {
            name: "s".into(),
            ..by_caller.clone()
        };
        assert_ne!(renamed.key(&w), by_caller.key(&w));
        // ("ab", "") and ("a", "b") differ: parts are length-prefixed.
        let two = rule(vec![Dim::Caller, Dim::Operation]);
        let a = WriteKeys {
            caller: Some("ab"),
            operation: "",
            ..w
        };
        let b = WriteKeys {
            caller: Some("a"),
            operation: "b",
            ..w
        };
        assert_ne!(two.key(&a), two.key(&b));
    }

    #[test]
    fn the_window_slides() {
        // Two spends at 1,000 and 4,000 under 2 per 10 s.
        assert_eq!(retry_after(&[1000, 4000], 2, 10_000, 5000), Some(6000));
        assert_eq!(retry_after(&[1000, 4000], 2, 10_000, 11_000), None);
        assert_eq!(retry_after(&[1000], 2, 10_000, 5000), None);
        assert_eq!(
            retry_after(&[1000, 2000, 4000], 2, 10_000, 5000),
            Some(7000)
        );
        assert_eq!(retry_after(&[], 0, 10_000, 5000), Some(10_000));
    }
}
