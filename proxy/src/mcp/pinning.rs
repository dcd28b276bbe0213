//! Tool-list pinning (SPEC §7, RICH §1): every `tools/list` result is compared tool by tool
//! with the lockfile's `toolDigest`s (`sha-256:` of the JCS of the tool object as listed).
//!
//! - A pinned tool whose definition changed ("rug pull") is removed under `fail-closed` and
//!   `quarantine` (its definition written to the quarantine directory) and kept under `notify`;
//!   each case emits a `tool-definition` drift event. Under the removing policies, calls of it
//!   are refused (409 `ERR_TOOL_DRIFTED`) until a listing shows the pinned definition again or
//!   a lockfile pins the new one (the mark is per bundle digest, so a new bundle clears it).
//! - A tool the lockfile does not know is removed under `unbound_writes = "deny"` (with an
//!   event), since calling it would be refused anyway; under `allow` it is passed on.
//! - Pinned tools without a `toolDigest` are passed on as they are.
//!
//! Each page of a paginated listing is filtered on its own; `nextCursor` is kept.

use palisade_policy::digest::{Sha256Digest, Spelling};
use palisade_policy::drift::Action;
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::{Bundle, DriftPolicy};
use serde_json::Value;

use crate::config::UnboundWrites;
use crate::context::WriteContext;
use crate::context::{Drifted, Plane};

/// Whether a drifted tool's calls are refused under `policy`.
pub fn refuses_calls(policy: DriftPolicy) -> bool {
    !matches!(policy, DriftPolicy::Notify)
}

/// The `tools/list` response `msg` with changed and unknown tools handled; `None` when it
/// needs no change (or is not a `tools/list` result).
pub fn filter(
    plane: &Plane,
    pins: &Drifted,
    cx: &WriteContext,
    bundle: &Bundle,
    msg: &Value,
) -> Option<Value> {
    let tools = msg.get("result")?.get("tools")?.as_array()?;
    let mut kept = Vec::with_capacity(tools.len());
    let mut changed = false;
    for tool in tools {
        let name = tool.get("name").and_then(Value::as_str).unwrap_or("");
        let keep = match bundle.tool(name) {
            None => {
                if plane.config.unbound_writes == UnboundWrites::Deny {
                    report(
                        plane,
                        cx,
                        (name, tool),
                        None,
                        Action::Blocked,
                        "unknown-tool",
                    );
                    false
                } else {
                    true
                }
            }
            Some(cap) => match &cap.tool_digest {
                None => true,
                Some(pinned) => {
                    let listed = Sha256Digest::of_json(tool);
                    let drifted = &listed != pinned;
                    let removes = refuses_calls(cap.runtime.on_drift);
                    pins.mark(&bundle.digest, name, drifted && removes);
                    if drifted {
                        let action = match cap.runtime.on_drift {
                            DriftPolicy::Notify => Action::Notify,
                            DriftPolicy::Quarantine => {
                                crate::enforce::output::quarantine(
                                    plane,
                                    &palisade_policy::canon::to_vec(tool),
                                );
                                Action::Quarantined
                            }
                            _ => Action::Blocked,
                        };
                        let expected = pinned.spelled(Spelling::ShaDash256);
                        let listed = (name, tool);
                        let why = "changed-definition";
                        report(plane, cx, listed, Some(expected), action, why);
                    }
                    !(drifted && removes)
                }
            },
        };
        if keep {
            kept.push(tool.clone());
        } else {
            changed = true;
        }
    }
    if !changed {
        return None;
    }
    let mut out = msg.clone();
    out["result"]["tools"] = Value::Array(kept);
    Some(out)
}

/// A `tool-definition` drift event naming the tool; the evidence is the listed definition
/// (`listed`: the tool's name and definition as the server listed them).
fn report(
    plane: &Plane,
    cx: &WriteContext,
    (tool, definition): (&str, &Value),
    expected: Option<String>,
    action: Action,
    reason: &'static str,
) {
    let refusal = Refusal::new(
        ErrorCode::ToolDrifted,
        "a listed tool does not match its pinned definition",
    );
    crate::enforce::output::report(
        plane,
        &refusal,
        cx,
        action,
        crate::enforce::output::Observed {
            identifier: Some(tool.to_owned()),
            expected,
            evidence: palisade_policy::canon::to_vec(definition),
            diagnostics: vec![("reason", reason.to_owned())],
        },
    );
}
