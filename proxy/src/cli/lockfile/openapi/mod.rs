//! `palisade lock import-openapi`: an OpenAPI 3.0 or 3.1 document → one contract per
//! operation and a lockfile binding each as `protocol: http`, `operation: "METHOD /template"`
//! (issue 23; RICH §3.3 evidence adapters, §6 provenance).
//!
//! Per operation: input = the JSON request body's schema (path, query and header parameters
//! are recorded under `structural.parameters`, which the runtime checks too; every `$ref` in
//! the document is followed, or listed with why it could not be), output = the 2xx
//! JSON responses (`anyOf` when several), error domain = the 4xx/5xx responses, side effect =
//! the method's semantics (GET/HEAD read, PUT/DELETE idempotent, POST/PATCH write),
//! reversibility = `x-rich-reversibility` or the importer's option, else `unknown`. Each
//! contract's `provenance` names the document (`documentDigest`, `infoVersion`) and marks the
//! assertions as declared evidence, not qualified. Pure and deterministic: the same document
//! and options give the same values, and so the same files and digests.

mod coverage;
mod operation;
mod refs;
mod schema;
mod swagger2;

pub use coverage::Coverage;

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use operation::{
    error_domain, parameters, pointer_escape, request_schema, response_schema, Translate,
};
use refs::resolve;

use palisade_policy::digest::{Sha256Digest, Spelling};

/// What the document cannot say and the operator may.
#[derive(Debug, Default, Clone)]
pub struct ImportOptions {
    /// Prefix of every template; `None`: the path of the first `servers` URL.
    pub base_path: Option<String>,
    /// Reversibility by operation (its capability name or operationId).
    pub reversibility: BTreeMap<String, String>,
    /// `format` checked, not an annotation (`structural.formats = "assert"`).
    pub assert_formats: bool,
    /// Only operations whose name (operationId) or `METHOD /path` (as the document writes the
    /// path) matches one of these shell-style patterns; empty: every operation.
    pub operations: Vec<glob::Pattern>,
}

/// The imported bundle: the lockfile and its contracts (each with its digest), and what the
/// operator should read before using it.
#[derive(Debug)]
pub struct Imported {
    pub lockfile: Value,
    pub contracts: Vec<(Sha256Digest, Value)>,
    /// Choices made for the operator (merged routes, missing bodies, …).
    pub warnings: Vec<String>,
    /// What could not be translated, with where it was.
    pub untranslated: Vec<String>,
    /// How much of each imported operation's input the contract checks.
    pub coverage: Vec<(String, Coverage)>,
}

impl Imported {
    /// The line `lock import-openapi` ends with (`coverage::summary`).
    pub fn summary(&self) -> String {
        coverage::summary(&self.coverage)
    }
}

const METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];
const REVERSIBILITY: [&str; 4] = ["reversible", "compensable", "irreversible", "unknown"];

/// Imports `doc` (parsed from a file whose bytes hash to `document_digest`).
pub fn import(
    doc: &Value,
    document_digest: &Sha256Digest,
    opts: &ImportOptions,
) -> Result<Imported, String> {
    // Swagger 2.0: read as the OpenAPI 3.0 document it describes, then imported as one.
    let upgraded = match doc.get("swagger").and_then(Value::as_str) {
        Some("2.0") => Some(swagger2::upgrade(doc)?),
        Some(v) => return Err(format!("Swagger {v} is not supported (2.0 is)")),
        None => None,
    };
    let doc = upgraded.as_ref().map_or(doc, |u| &u.doc);
    let version = doc
        .get("openapi")
        .and_then(Value::as_str)
        .ok_or("not an OpenAPI document: no `openapi` or `swagger` version")?;
    let dialect_30 = if version.starts_with("3.0") {
        true
    } else if version.starts_with("3.1") {
        false
    } else {
        return Err(format!(
            "OpenAPI {version} is not supported (3.0 and 3.1 are, and Swagger 2.0)"
        ));
    };
    for (op, r) in &opts.reversibility {
        if !REVERSIBILITY.contains(&r.as_str()) {
            return Err(format!(
                "reversibility of {op:?}: {r:?} is not one of {}",
                REVERSIBILITY.join(", ")
            ));
        }
    }
    let empty = Map::new();
    let components = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let info_version = doc.pointer("/info/version").cloned().unwrap_or(Value::Null);
    let title = doc
        .pointer("/info/title")
        .and_then(Value::as_str)
        .unwrap_or("openapi");
    let base = match &opts.base_path {
        Some(b) => b.trim_end_matches('/').to_owned(),
        None => server_path(doc),
    };
    let paths = doc
        .get("paths")
        .and_then(Value::as_object)
        .ok_or("the document has no `paths`")?;

    let mut out = Imported {
        lockfile: Value::Null,
        contracts: Vec::new(),
        warnings: Vec::new(),
        untranslated: upgraded
            .as_ref()
            .map(|u| u.untranslated.clone())
            .unwrap_or_default(),
        coverage: Vec::new(),
    };
    let mut caps = Map::new();
    // (METHOD, template with parameter names erased) → the capability that has the route.
    let mut routes: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut used_names = std::collections::BTreeSet::new();
    for (path, item) in paths {
        // A path item may be a `$ref` (to `components/pathItems` in 3.1, or anywhere in the
        // document); followed, or the path is listed with why it could not be.
        let item = match resolve(doc, item) {
            Ok(resolved) => resolved,
            Err(why) => {
                out.untranslated
                    .push(format!("/paths/{}: {why}", pointer_escape(path)));
                continue;
            }
        };
        let Some(item) = item.as_object() else {
            continue;
        };
        for method in METHODS {
            let Some(op) = item.get(method).and_then(Value::as_object) else {
                continue;
            };
            let at = format!("/paths/{}/{method}", pointer_escape(path));
            let upper = method.to_ascii_uppercase();
            let template = format!("{base}{path}");
            let route = (upper.clone(), erase_names(&template));
            let name = op
                .get("operationId")
                .and_then(Value::as_str)
                .filter(|id| !used_names.contains(*id))
                .map_or_else(|| format!("{upper} {template}"), str::to_owned);
            let selected = opts.operations.is_empty()
                || opts
                    .operations
                    .iter()
                    .any(|p| p.matches(&name) || p.matches(&format!("{upper} {path}")));
            if !selected {
                continue;
            }
            if let Some(first) = routes.get(&route) {
                out.warnings.push(format!(
                    "{name} ({upper} {template}) is the same route as {first}; bound once, as {first}"
                ));
                continue;
            }
            routes.insert(route, name.clone());
            used_names.insert(name.clone());
            let (reversibility, rev_source) = reversibility_of(opts, &name, op);
            let t = Translate {
                components,
                dialect_30,
                untranslated: Vec::new(),
            };
            let Schemas {
                params,
                input,
                output,
                errors,
                untranslated,
                coverage,
            } = schemas(doc, t, (item, op), method, &at);
            if let Coverage::Unchecked(why) = &coverage {
                out.warnings.push(format!(
                    "{name}: {why}; its input is \"unknown\" (not checked)"
                ));
            }
            out.coverage.push((name.clone(), coverage));
            let side_effect = match method {
                "get" | "head" | "options" => "read",
                "put" | "delete" => "idempotent",
                _ => "write",
            };
            let contract = json!({
                "structural": {
                    "input": input.clone().unwrap_or_else(|| json!("unknown")),
                    "output": output.clone().unwrap_or_else(|| json!("unknown")),
                    "parameters": params,
                    "formats": if opts.assert_formats { "assert" } else { "annotate" },
                },
                "representation": "unknown",
                "semantic": "unknown",
                "error": errors,
                "state": "unknown",
                "operational": {"sideEffect": side_effect, "reversibility": reversibility,
                                "idempotencyKey": "optional", "modelMediation": "unknown"},
                "provenance": {
                    "source": "openapi",
                    "evidence": "declared",
                    "qualified": false,
                    "documentDigest": document_digest.spelled(Spelling::ShaDash256),
                    "infoVersion": info_version,
                    "openapi": version,
                    "operation": format!("{upper} {path}"),
                    "operationId": op.get("operationId").cloned().unwrap_or(Value::Null),
                    "assertions": {
                        "/structural/input": source(input.is_some()),
                        "/structural/output": source(output.is_some()),
                        "/error": "generated-from-typed-source",
                        "/operational/sideEffect": "generated-from-typed-source",
                        "/operational/reversibility": rev_source,
                    },
                    "untranslated": untranslated,
                }
            });
            out.untranslated.extend(untranslated);
            let digest = Sha256Digest::of_json(&contract);
            caps.insert(
                name,
                json!({"protocol": "http", "operation": format!("{upper} {template}"),
                       "contractDigest": digest.spelled(Spelling::ShaDash256),
                       "runtime": {"onDrift": "fail-closed"}}),
            );
            out.contracts.push((digest, contract));
        }
    }
    for name in opts.reversibility.keys() {
        if !caps.contains_key(name) {
            return Err(format!(
                "reversibility is set for {name:?}, which is not an imported operation"
            ));
        }
    }
    if caps.is_empty() {
        return Err("no operation was imported (check --operations)".into());
    }
    out.contracts.sort_by_key(|c| c.0.to_hex());
    out.contracts.dedup_by(|a, b| a.0 == b.0);
    out.lockfile = json!({
        "richVersion": "0.1",
        "bindingId": format!("urn:palisade:openapi:{}:{}", slug(title),
                             info_version.as_str().map_or_else(|| info_version.to_string(), str::to_owned)),
        "graphClosure": "open",
        "capabilities": caps,
    });
    Ok(out)
}

/// An operation's reversibility and where it came from: the operator's option, the
/// document's `x-rich-reversibility`, else `unknown`.
fn reversibility_of(
    opts: &ImportOptions,
    name: &str,
    op: &Map<String, Value>,
) -> (String, &'static str) {
    if let Some(r) = opts.reversibility.get(name) {
        return (r.clone(), "manually-authored");
    }
    match op
        .get("x-rich-reversibility")
        .and_then(Value::as_str)
        .filter(|r| REVERSIBILITY.contains(r) && *r != "unknown")
    {
        Some(r) => (r.to_owned(), "generated-from-typed-source"),
        None => ("unknown".into(), "unresolved"),
    }
}

/// One operation's contract schemas, what could not be carried over, and how much of its
/// input they check.
struct Schemas {
    params: Value,
    input: Option<Value>,
    output: Option<Value>,
    errors: Value,
    untranslated: Vec<String>,
    coverage: Coverage,
}

fn schemas(
    doc: &Value,
    mut t: Translate<'_>,
    (item, op): (&Map<String, Value>, &Map<String, Value>),
    method: &str,
    at: &str,
) -> Schemas {
    let params = parameters(doc, item, op, &mut t, at);
    let input = request_schema(doc, op, &mut t, at);
    let unchecked = match &input {
        Err(why) if matches!(method, "put" | "post" | "patch") => Some(why.clone()),
        _ => None,
    };
    let input_untranslated = t.untranslated.first().cloned();
    let output = response_schema(doc, op, &mut t, at);
    let errors = error_domain(doc, op, &mut t, at);
    let coverage = match (unchecked, input_untranslated) {
        (Some(why), _) => Coverage::Unchecked(why),
        (None, Some(what)) => Coverage::Partly(what),
        (None, None) => Coverage::Full,
    };
    Schemas {
        params,
        input: input.ok(),
        output,
        errors,
        untranslated: t.untranslated,
        coverage,
    }
}

fn source(known: bool) -> &'static str {
    if known {
        "generated-from-typed-source"
    } else {
        "unresolved"
    }
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// The path of the first `servers` URL (`https://api.xero.com/assets.xro/1.0` →
/// `/assets.xro/1.0`), without a trailing slash; empty when there is none.
fn server_path(doc: &Value) -> String {
    let Some(url) = doc.pointer("/servers/0/url").and_then(Value::as_str) else {
        return String::new();
    };
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let path = if url.contains("://") {
        rest.find('/').map_or("", |i| &rest[i..])
    } else {
        rest
    };
    path.trim_end_matches('/').to_owned()
}

/// `/a/{x}/b/{y}` → `/a/{}/b/{}`: routes that differ only in parameter names are one route
/// to HTTP.
fn erase_names(template: &str) -> String {
    let mut out = String::with_capacity(template.len());
    let mut in_param = false;
    for c in template.chars() {
        match c {
            '{' => {
                in_param = true;
                out.push('{');
            }
            '}' => {
                in_param = false;
                out.push('}');
            }
            _ if in_param => {}
            _ => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn routes_that_differ_only_in_names_are_bound_once() {
        let doc = json!({"openapi": "3.0.3", "info": {"title": "T", "version": "1"},
        "servers": [{"url": "https://x.example/api/v1/"}],
        "paths": {
            "/C/{ContactID}": {"get": {"operationId": "byId", "responses": {}}},
            "/C/{ContactNumber}": {"get": {"operationId": "byNumber", "responses": {}}},
            "/C": {"post": {"responses": {}}}
        }});
        let r = import(&doc, &Sha256Digest::of(b"d"), &ImportOptions::default()).unwrap();
        let caps = r.lockfile["capabilities"].as_object().unwrap();
        assert_eq!(caps.len(), 2, "{caps:?}");
        assert_eq!(caps["byId"]["operation"], "GET /api/v1/C/{ContactID}");
        assert_eq!(caps["POST /api/v1/C"]["operation"], "POST /api/v1/C");
        assert!(r
            .warnings
            .iter()
            .any(|w| w.contains("byNumber") && w.contains("byId")));
        assert!(r
            .warnings
            .iter()
            .any(|w| w.contains("declares no request body")));
    }

    #[test]
    fn operations_are_selected_by_name_or_route() {
        let doc = json!({"openapi": "3.1.0", "info": {"title": "T", "version": "1"},
                         "paths": {"/a": {"get": {"operationId": "getA", "responses": {}},
                                          "post": {"operationId": "makeA", "responses": {}}},
                                   "/b": {"get": {"responses": {}}}}});
        let digest = Sha256Digest::of(b"d");
        let pick = |pats: &[&str]| {
            let o = ImportOptions {
                operations: pats
                    .iter()
                    .map(|p| glob::Pattern::new(p).unwrap())
                    .collect(),
                ..Default::default()
            };
            import(&doc, &digest, &o).map(|r| {
                r.lockfile["capabilities"]
                    .as_object()
                    .unwrap()
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(pick(&["get*"]).unwrap(), ["getA"]);
        assert_eq!(pick(&["GET /*"]).unwrap(), ["GET /b", "getA"]);
        assert!(pick(&["nothing"]).unwrap_err().contains("no operation"));
    }

    #[test]
    fn options_are_checked() {
        let doc = json!({"openapi": "3.1.0", "info": {"title": "T", "version": "1"},
                         "paths": {"/a": {"delete": {"operationId": "del", "responses": {}}}}});
        let digest = Sha256Digest::of(b"d");
        let mut o = ImportOptions::default();
        o.reversibility.insert("del".into(), "maybe".into());
        assert!(import(&doc, &digest, &o)
            .unwrap_err()
            .contains("not one of"));
        o.reversibility.insert("del".into(), "irreversible".into());
        o.reversibility.insert("nope".into(), "reversible".into());
        assert!(import(&doc, &digest, &o).unwrap_err().contains("nope"));
        o.reversibility.remove("nope");
        let r = import(&doc, &digest, &o).unwrap();
        let (_, c) = &r.contracts[0];
        assert_eq!(c["operational"]["reversibility"], "irreversible");
        assert_eq!(c["operational"]["sideEffect"], "idempotent");
        assert_eq!(
            c["provenance"]["assertions"]["/operational/reversibility"],
            "manually-authored"
        );
        assert!(import(&json!({"openapi": "2.0"}), &digest, &o).is_err());
        let old = import(&json!({"swagger": "1.2", "paths": {}}), &digest, &o).unwrap_err();
        assert!(old.contains("Swagger 1.2 is not supported"), "{old}");
    }
}
