//! Migration records (RICH §15.2): what a lockfile update changes, capability by capability,
//! and whether it needs an administrator's approval.
//!
//! A capability whose contract changes is compared with [`super::compat::contracts`]. A
//! `compatible` change needs nothing. A `breaking` one, an `unknown` one (the check cannot show
//! that nothing is lost: treated as lossy), and a capability removed, need approval; each gets
//! a record naming both digests, the outcome and its findings, the members dropped, the
//! coexistence window, a sunset, and how to roll back. Pure: the caller reads the files.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::compat::{self, Outcome};
use palisade_policy::digest::{Sha256Digest, Spelling};

/// One capability's change between two lockfiles.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    pub capability: String,
    /// `sha-256:` of the contract in force; `None` for a new capability.
    pub from: Option<String>,
    /// `sha-256:` of the contract replacing it; `None` when the capability is removed.
    pub to: Option<String>,
    /// `compatible`, `breaking`, `unknown`, or `removed` (no contract replaces it).
    pub outcome: &'static str,
    pub findings: Vec<Value>,
    /// Object members the old contract had and the new one does not (input and output).
    pub dropped: Vec<String>,
}

impl Change {
    /// Breaking, lossy (unknown) and removed changes need approval (§15.2).
    pub fn needs_approval(&self) -> bool {
        self.outcome != Outcome::Compatible.as_str() && self.from.is_some()
    }
}

/// A capability's contract in one lockfile: its digest and the document.
pub struct Bound<'a> {
    pub capability: &'a str,
    pub digest: String,
    pub contract: Option<&'a Value>,
}

/// The changes from `old` to `new` (each a capability → contract list), in capability order.
/// A contract that could not be read (`contract: None`) compares as `unknown`.
pub fn changes(old: &[Bound<'_>], new: &[Bound<'_>]) -> Vec<Change> {
    let names: BTreeSet<&str> = old.iter().chain(new).map(|b| b.capability).collect();
    let mut out = Vec::new();
    for name in names {
        let (o, n) = (
            old.iter().find(|b| b.capability == name),
            new.iter().find(|b| b.capability == name),
        );
        let change = match (o, n) {
            (Some(o), Some(n)) if o.digest == n.digest => continue,
            (None, Some(n)) => Change {
                capability: name.to_owned(),
                from: None,
                to: Some(n.digest.clone()),
                outcome: "compatible",
                findings: Vec::new(),
                dropped: Vec::new(),
            },
            (Some(o), None) => Change {
                capability: name.to_owned(),
                from: Some(o.digest.clone()),
                to: None,
                outcome: "removed",
                findings: vec![json!({"outcome": "breaking", "at": "/",
                                      "why": "the capability is no longer bound"})],
                dropped: Vec::new(),
            },
            (Some(o), Some(n)) => compare(name, o, n),
            (None, None) => continue,
        };
        out.push(change);
    }
    out
}

fn compare(name: &str, o: &Bound<'_>, n: &Bound<'_>) -> Change {
    let (outcome, findings, dropped) = match (o.contract, n.contract) {
        (Some(oc), Some(nc)) => {
            let verdict = compat::contracts(oc, nc);
            let findings = verdict
                .findings
                .iter()
                .map(|f| json!({"outcome": f.outcome.as_str(), "at": f.at, "why": f.why}))
                .collect();
            let mut dropped = Vec::new();
            for side in ["input", "output"] {
                let at = format!("/structural/{side}");
                if let (Some(a), Some(b)) = (oc.pointer(&at), nc.pointer(&at)) {
                    members_dropped(a, b, &at, 0, &mut dropped);
                }
            }
            (verdict.outcome().as_str(), findings, dropped)
        }
        _ => (
            Outcome::Unknown.as_str(),
            vec![json!({"outcome": "unknown", "at": "/",
                        "why": "the contract in force could not be read"})],
            Vec::new(),
        ),
    };
    Change {
        capability: name.to_owned(),
        from: Some(o.digest.clone()),
        to: Some(n.digest.clone()),
        outcome,
        findings,
        dropped,
    }
}

/// Members of `a`'s `properties` that `b` no longer has, recursively (bounded depth).
fn members_dropped(a: &Value, b: &Value, at: &str, depth: usize, out: &mut Vec<String>) {
    if depth > 16 {
        return;
    }
    let (Some(pa), pb) = (
        a.get("properties").and_then(Value::as_object),
        b.get("properties").and_then(Value::as_object),
    ) else {
        return;
    };
    for (k, sub) in pa {
        let here = format!(
            "{at}/properties/{}",
            k.replace('~', "~0").replace('/', "~1")
        );
        match pb.and_then(|p| p.get(k)) {
            None => out.push(here),
            Some(other) => members_dropped(sub, other, &here, depth + 1, out),
        }
    }
}

/// The migration record of an approved change (§15.2).
pub fn record(change: &Change, old_lockfile_digest: &str, approved_at: &str) -> Value {
    json!({
        "migrationVersion": "1",
        "capability": change.capability,
        "sourceDigest": change.from,
        "targetDigest": change.to,
        "outcome": change.outcome,
        "findings": change.findings,
        "dropped": change.dropped,
        // No connector bridges the two: agents on the old contract get the new one's
        // refusals. `lock compat --connector` tells whether one would.
        "connector": null,
        "coexistence": {"from": approved_at, "until": null},
        "sunset": null,
        "rollback": {
            "lockfileDigest": old_lockfile_digest,
            "instructions": "restore the previous lockfile (kept beside this record) with its contracts, which stay in the contracts directory; a reload puts it back in force"
        },
        "approval": {"by": "administrator (--approve)", "at": approved_at}
    })
}

/// The `sha-256:` digest of a record, as the lockfile's `migrations` names it.
pub fn digest(record: &Value) -> String {
    Sha256Digest::of_json(record).spelled(Spelling::ShaDash256)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn c(props: Value, required: Value) -> Value {
        json!({"structural": {
            "input": {"type": "object", "properties": props.clone(), "required": required},
            "output": {"type": "object", "properties": props}}})
    }

    fn bound<'a>(name: &'a str, doc: &'a Value) -> Bound<'a> {
        Bound {
            capability: name,
            digest: Sha256Digest::of_json(doc).spelled(Spelling::ShaDash256),
            contract: Some(doc),
        }
    }

    #[test]
    fn each_kind_of_change_is_named_and_only_loss_needs_approval() {
        let v1 = c(
            json!({"a": {"type": "string"}, "b": {"type": "integer"}}),
            json!(["a"]),
        );
        let narrowed = c(
            json!({"a": {"type": "string", "maxLength": 3}}),
            json!(["a"]),
        );
        let same = v1.clone();
        let old = [
            bound("kept", &same),
            bound("narrowed", &v1),
            bound("gone", &v1),
        ];
        let new = [
            bound("kept", &same),
            bound("narrowed", &narrowed),
            bound("added", &v1),
        ];
        let changes = changes(&old, &new);
        let by = |n: &str| changes.iter().find(|c| c.capability == n).unwrap();
        assert!(changes.iter().all(|c| c.capability != "kept"));
        assert_eq!(by("added").outcome, "compatible");
        assert!(!by("added").needs_approval());
        assert_eq!(by("gone").outcome, "removed");
        assert!(by("gone").needs_approval());
        let n = by("narrowed");
        assert_eq!(n.outcome, "breaking");
        assert!(n.needs_approval());
        assert_eq!(
            n.dropped,
            [
                "/structural/input/properties/b",
                "/structural/output/properties/b"
            ]
        );
        let r = record(n, "sha-256:old", "2026-12-05T00:00:00Z");
        assert_eq!(r["sourceDigest"], json!(n.from));
        assert_eq!(r["rollback"]["lockfileDigest"], "sha-256:old");
        assert!(digest(&r).starts_with("sha-256:"));
    }
}
