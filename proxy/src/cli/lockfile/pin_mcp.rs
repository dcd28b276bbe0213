//! `palisade lock pin-mcp --url URL --out FILE`: pins a running MCP server's tools.
//!
//! Reads every page of the server's `tools/list` (the stateless 2026-07-28 revision first; on
//! refusal the `initialize` handshake of the session revisions, ended with DELETE) and writes a
//! bundle an operator can review: the lockfile at FILE, one capability per tool with its
//! `toolDigest` (`sha-256:` of the JCS of the tool object as listed), and a contract per tool in
//! `contracts/` beside it. The contracts say only what the listing shows: `inputSchema`,
//! `outputSchema`, and the side effect the tool's own MCP annotations declare (`readOnlyHint`
//! → `read`, else `idempotentHint` → `idempotent`, else `write`; no hints at all → `unknown`,
//! treated as a write that needs a lease). Each contract's `provenance` member records where
//! each assertion came from (RICH §6.1), that it is declared evidence, not qualified, and the
//! annotations as listed. The operator overrides the side effect per tool
//! (`--side-effect TOOL=EFFECT`, recorded as `manually-authored`) or ignores annotations
//! altogether (`--ignore-annotations`). Every other operational fact is `"unknown"` until the
//! operator states it.

use std::path::Path;
use std::time::Duration;

use http::Uri;
use palisade_policy::digest::{Sha256Digest, Spelling};
use serde_json::{json, Map, Value};

use crate::net::upstream::Upstream;

const DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// The client capabilities `--client-capabilities` names (`none`: `{}`); unknown names are
/// refused.
pub fn client_capabilities(names: &str) -> Result<Value, String> {
    let mut caps = serde_json::Map::new();
    for name in names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty() && *n != "none")
    {
        let value = match name {
            "roots" => json!({"listChanged": true}),
            "sampling" | "elicitation" => json!({}),
            other => {
                return Err(format!(
                    "--client-capabilities: {other:?} is not roots, sampling, elicitation or none"
                ))
            }
        };
        caps.insert(name.to_owned(), value);
    }
    Ok(Value::Object(caps))
}

/// Every tool the server at `url` lists to a client with `capabilities`, as listed.
pub async fn fetch_tools(url: &str, capabilities: &Value) -> Result<Vec<Value>, String> {
    let uri: Uri = url.parse().map_err(|e| format!("--url: {e}"))?;
    let client = Upstream::with_base(
        uri.clone(),
        Duration::from_secs(5),
        Duration::from_secs(30),
        None,
    )
    .map_err(|e| e.to_string())?;
    crate::mcp::client::list_tools(&client, uri, capabilities, "palisade-pin-mcp", &[]).await
}

/// How `pin-mcp` states each tool's side effect.
#[derive(Debug, Default, Clone)]
pub struct PinOptions {
    /// `--ignore-annotations`: every side effect `unknown` unless overridden.
    pub ignore_annotations: bool,
    /// `--side-effect TOOL=EFFECT`, by tool name.
    pub side_effects: std::collections::BTreeMap<String, String>,
    /// `--reversibility TOOL=VALUE`, by tool name. MCP has no annotation for it, so a pin
    /// writes `unknown` (treated as irreversible: no `COMPENSATING_ACTION` lease is admitted)
    /// unless the operator states it.
    pub reversibility: std::collections::BTreeMap<String, String>,
}

/// The reversibilities an operator may state (RICH's).
const REVERSIBILITIES: [&str; 4] = ["reversible", "compensable", "irreversible", "unknown"];

/// The side effects an operator may state.
const EFFECTS: [&str; 4] = ["read", "idempotent", "write", "unknown"];

impl PinOptions {
    /// Refuses an effect that is not one of [`EFFECTS`].
    pub fn new(
        ignore_annotations: bool,
        side_effects: std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        if let Some((tool, effect)) = side_effects
            .iter()
            .find(|(_, e)| !EFFECTS.contains(&e.as_str()))
        {
            return Err(format!(
                "--side-effect {tool}={effect}: the effect must be one of {}",
                EFFECTS.join(", ")
            ));
        }
        Ok(Self {
            ignore_annotations,
            side_effects,
            reversibility: Default::default(),
        })
    }

    /// States tools' reversibility; refuses a value that is not one of RICH's.
    pub fn with_reversibility(
        mut self,
        reversibility: std::collections::BTreeMap<String, String>,
    ) -> Result<Self, String> {
        if let Some((tool, value)) = reversibility
            .iter()
            .find(|(_, v)| !REVERSIBILITIES.contains(&v.as_str()))
        {
            return Err(format!(
                "--reversibility {tool}={value}: it must be one of {}",
                REVERSIBILITIES.join(", ")
            ));
        }
        self.reversibility = reversibility;
        Ok(self)
    }
}

/// The side effect a tool's annotations declare, if they declare one. MCP's defaults apply
/// once any hint is present (`readOnlyHint` false, `idempotentHint` false); a hint that is
/// not a boolean is not evidence of anything.
fn declared_side_effect(annotations: Option<&Value>) -> Option<&'static str> {
    let a = annotations?.as_object()?;
    let hint = |k: &str| a.get(k).and_then(Value::as_bool);
    let hints = [
        "readOnlyHint",
        "destructiveHint",
        "idempotentHint",
        "openWorldHint",
    ];
    if !hints.iter().any(|k| hint(k).is_some()) {
        return None;
    }
    Some(if hint("readOnlyHint") == Some(true) {
        "read"
    } else if hint("idempotentHint") == Some(true) {
        "idempotent"
    } else {
        "write"
    })
}

/// The contract a listing supports: its schemas and declared side effect, with where each
/// came from.
fn contract_for(tool: &Value, opts: &PinOptions) -> Value {
    let schema = |key: &str| match tool.get(key) {
        Some(Value::Object(s)) => {
            let mut s = s.clone();
            s.entry("$schema").or_insert_with(|| json!(DIALECT));
            Value::Object(s)
        }
        _ => json!("unknown"),
    };
    let listed = |key: &str| match tool.get(key) {
        Some(Value::Object(_)) => "generated-from-typed-source",
        _ => "unresolved",
    };
    let name = tool.get("name").and_then(Value::as_str).unwrap_or_default();
    let annotations = tool.get("annotations");
    let (side_effect, source) = match opts.side_effects.get(name) {
        Some(effect) => (effect.as_str(), "manually-authored"),
        None => match declared_side_effect(annotations).filter(|_| !opts.ignore_annotations) {
            Some(effect) => (effect, "generated-from-typed-source"),
            None => ("unknown", "unresolved"),
        },
    };
    let (reversibility, reversibility_source) = match opts.reversibility.get(name) {
        Some(r) => (r.as_str(), "manually-authored"),
        None => ("unknown", "unresolved"),
    };
    json!({
        "structural": {"input": schema("inputSchema"), "output": schema("outputSchema")},
        "representation": "unknown", "semantic": "unknown", "error": "unknown",
        "state": "unknown",
        "operational": {"sideEffect": side_effect, "reversibility": reversibility,
                        "idempotencyKey": "optional", "modelMediation": "unknown"},
        "provenance": {
            "source": "mcp-tools-list",
            "evidence": "declared",
            "qualified": false,
            "annotations": annotations.cloned().unwrap_or(Value::Null),
            "assertions": {
                "/structural/input": listed("inputSchema"),
                "/structural/output": listed("outputSchema"),
                "/operational/sideEffect": source,
                "/operational/reversibility": reversibility_source
            }
        }
    })
}

/// What `pin-mcp` wrote: the lockfile's digest and each tool's stated side effect.
pub struct Pinned {
    pub digest: String,
    pub side_effects: Map<String, Value>,
}

/// Writes the lockfile at `out` and the contracts beside it.
pub fn write_bundle(
    tools: &[Value],
    url: &str,
    out: &Path,
    opts: &PinOptions,
) -> Result<Pinned, String> {
    let names: Vec<&str> = tools
        .iter()
        .filter_map(|t| t.get("name").and_then(Value::as_str))
        .collect();
    if let Some(stray) = opts
        .side_effects
        .keys()
        .find(|k| !names.contains(&k.as_str()))
    {
        return Err(format!(
            "--side-effect names {stray:?}, which the server does not list"
        ));
    }
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let contracts = dir.join("contracts");
    std::fs::create_dir_all(&contracts).map_err(|e| format!("{}: {e}", contracts.display()))?;
    let mut caps = Map::new();
    let mut side_effects = Map::new();
    for tool in tools {
        let name = tool
            .get("name")
            .and_then(Value::as_str)
            .ok_or("a listed tool has no name")?;
        let contract = contract_for(tool, opts);
        side_effects.insert(
            name.to_owned(),
            contract["operational"]["sideEffect"].clone(),
        );
        let digest = Sha256Digest::of_json(&contract);
        let path = contracts.join(format!("{}.json", digest.to_hex()));
        let text = serde_json::to_vec_pretty(&contract).map_err(|e| e.to_string())?;
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut cap = json!({"protocol": "mcp", "operation": name,
               "toolDigest": Sha256Digest::of_json(tool).spelled(Spelling::ShaDash256),
               "contractDigest": digest.spelled(Spelling::ShaDash256),
               "runtime": {"onDrift": "fail-closed"}});
        // What operator rules read as `tool.annotations` (SPEC §15): the listed definition's
        // own, pinned with it (its digest covers them).
        if let Some(a @ Value::Object(_)) = tool.get("annotations") {
            cap["toolAnnotations"] = a.clone();
        }
        caps.insert(name.to_owned(), cap);
    }
    let lock = json!({"richVersion": "0.1", "bindingId": format!("urn:palisade:pinned:{url}"),
                      "graphClosure": "open", "capabilities": caps});
    let text = serde_json::to_vec_pretty(&lock).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(Pinned {
        digest: Sha256Digest::of_json(&lock).spelled(Spelling::ShaDash256),
        side_effects,
    })
}
