//! Stopping a runaway agent (SPEC §14): the keys a write is counted and frozen by, and the
//! operators' freezes, matched before check 1.
//!
//! Keys: `caller` is the receipts' caller; `operation` the lockfile's (`"METHOD /template"`),
//! `mcp:tool/<name>` for a tool call, `"METHOD <canonical path>"` for an unbound write;
//! `resource` the fence key (the absolute URI without query, or the tool's resource).

use crate::store::{BudgetSpend, BudgetVerdict};
use palisade_policy::freeze::WriteKeys;
use palisade_policy::{target, ErrorCode, Refusal};
use serde_json::Value;

use crate::context::Enforcement;
use crate::enforce::facts::{Requester, WriteFacts};
use crate::enforce::permit::Denied;

/// A write's keys.
pub(crate) struct Keys {
    pub caller: Option<String>,
    pub operation: String,
    /// The agent-facing name of a connected operation (`WriteContext::facing`).
    pub also: Option<String>,
    pub resource: String,
}

impl Keys {
    pub fn of(operation: String, facts: &WriteFacts<'_>, who: &Requester) -> Keys {
        let resource = facts
            .resource
            .clone()
            .or_else(|| {
                facts
                    .target
                    .as_deref()
                    .map(|t| target::resource_key(t).to_owned())
            })
            .unwrap_or_default();
        Keys {
            caller: who.caller.clone(),
            operation,
            also: None,
            resource,
        }
    }

    pub fn as_write(&self) -> WriteKeys<'_> {
        WriteKeys {
            caller: self.caller.as_deref(),
            operation: &self.operation,
            also: self.also.as_deref(),
            resource: &self.resource,
        }
    }
}

/// The refusal of a write a freeze stops: 423 `ERR_FROZEN`, naming the freeze and its reason.
pub(crate) fn frozen(enf: &Enforcement, keys: &Keys) -> Option<Denied> {
    let f = enf.freezes.stopping(&keys.as_write(), enf.clock.now_ms())?;
    let refusal = Refusal::new(
        ErrorCode::Frozen,
        "an operator froze this write: the freeze_id and reason say which freeze and why",
    );
    Some(Denied {
        extra: vec![
            ("freeze_id".to_owned(), Value::String(f.id)),
            ("reason".to_owned(), Value::String(f.reason)),
        ],
        ..Denied::from(refusal)
    })
}

/// Spends one unit of every `[budgets]` rule (SPEC §14) for a write about to move its epoch:
/// the rows spent (none without rules), or 429 `ERR_WRITE_BUDGET` naming the rule, with the
/// seconds until one more write fits (`Retry-After`).
pub(crate) async fn spend_budgets(enf: &Enforcement, keys: &Keys) -> Result<Vec<Vec<u8>>, Denied> {
    if enf.budgets.is_empty() {
        return Ok(Vec::new());
    }
    let w = keys.as_write();
    let spends = enf
        .budgets
        .iter()
        .map(|r| BudgetSpend {
            key: r.key(&w),
            limit: r.limit,
            window_ms: r.window_ms,
        })
        .collect();
    match enf
        .store
        .budget_spend(spends)
        .await
        .map_err(crate::store::StoreError::into_refusal)?
    {
        BudgetVerdict::Spent(rows) => {
            for r in enf.budgets.iter() {
                metrics::counter!("palisade_budget_spent_total", "rule" => r.name.clone())
                    .increment(1);
            }
            Ok(rows)
        }
        BudgetVerdict::Over {
            rule,
            retry_after_ms,
        } => {
            let name = enf.budgets.get(rule).map_or("", |r| r.name.as_str());
            metrics::counter!("palisade_budget_refusals_total", "rule" => name.to_owned())
                .increment(1);
            let refusal = Refusal::new(
                ErrorCode::WriteBudget,
                "the write is over the write budget its rule names: it may be sent again after Retry-After",
            );
            Err(Denied {
                extra: vec![
                    ("rule".to_owned(), serde_json::Value::from(name)),
                    (
                        "retry_after".to_owned(),
                        serde_json::Value::from(retry_after_ms.div_ceil(1000)),
                    ),
                ],
                ..Denied::from(refusal)
            })
        }
    }
}
