//! A held write announced to a Slack incoming webhook (`escrow.webhook_format = "slack"`,
//! SPEC §15): one message, its `text` the notification's fallback and a `section` block in
//! Slack's `mrkdwn`, with the operation (its template, not the path as sent), the rule, the
//! caller, the approvals needed, and the console link. No value of the request, ever.

use serde_json::{json, Value};

use crate::context::Plane;
use crate::store::EscrowRecord;

/// The message for the hold of `record`.
pub(crate) fn held(plane: &Plane, record: &EscrowRecord, link: Option<&str>) -> Value {
    let operation = record
        .operation_key
        .as_deref()
        .unwrap_or(record.operation.as_str());
    let approvals = record
        .approvals_required
        .map_or(plane.config.escrow.approvals, |n| n as usize);
    let mut lines = vec![
        "*A write is held for approval*".to_owned(),
        format!("*Operation:* `{}`", escape(operation)),
    ];
    if let Some(rule) = &record.rule {
        lines.push(format!("*Rule:* `{}`", escape(rule)));
    }
    if let Some(caller) = &record.caller {
        lines.push(format!("*Caller:* `{}`", escape(caller)));
    }
    lines.push(format!("*Approvals needed:* {approvals}"));
    if let Some(l) = link {
        lines.push(format!("<{}|Open it in the console>", escape(l)));
    }
    let text = format!(
        "A write is held for approval: {}{}",
        escape(operation),
        record
            .rule
            .as_deref()
            .map(|r| format!(" (rule {})", escape(r)))
            .unwrap_or_default()
    );
    json!({
        "text": text,
        "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": lines.join("\n")}}],
    })
}

/// Slack's three control characters in message text (its "Escaping text" rules).
fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
