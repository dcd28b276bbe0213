//! Stopping a runaway agent (SPEC §14): the keys a write is counted and frozen by, and the
//! operators' freezes, matched before check 1.
//!
//! Keys: `caller` is the receipts' caller; `operation` the lockfile's (`"METHOD /template"`),
//! `mcp:tool/<name>` for a tool call, `"METHOD <canonical path>"` for an unbound write;
//! `resource` the fence key (the absolute URI without query, or the tool's resource).

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
            resource,
        }
    }

    pub fn as_write(&self) -> WriteKeys<'_> {
        WriteKeys {
            caller: self.caller.as_deref(),
            operation: &self.operation,
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
