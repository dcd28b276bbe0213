//! The compiled bundle: lockfile + contracts → capabilities and a routing table.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::capability::{Capability, DriftPolicy, Protocol, Runtime};
use super::contract::Contract;
use super::contract::{choice, compile_contract, duration_at, MAX_DOC_DEPTH};
use super::recipes::RecipeSet;
use super::Problem;
use palisade_policy::digest::{Sha256Digest, Spelling};

#[derive(Debug)]
enum Segment {
    Literal(String),
    Param,
}

#[derive(Debug)]
struct Route {
    method: String,
    segments: Vec<Segment>,
    capability: usize,
}

/// The routing table: a trie over path segments. At each level a literal segment is tried
/// before a parameter, so `/items/export` beats `/items/{id}`; a lookup costs a few hash
/// lookups per segment, whatever the number of capabilities.
#[derive(Debug, Default)]
struct Node {
    literal: std::collections::HashMap<String, Node>,
    param: Option<Box<Node>>,
    /// Method → capability, for templates that end here.
    methods: BTreeMap<String, usize>,
}

impl Node {
    fn insert(&mut self, r: &Route) {
        let mut node = self;
        for seg in &r.segments {
            node = match seg {
                Segment::Literal(l) => node.literal.entry(l.clone()).or_default(),
                Segment::Param => node.param.get_or_insert_with(Box::default),
            };
        }
        node.methods.insert(r.method.clone(), r.capability);
    }

    fn find(&self, method: &str, parts: &[&str]) -> Option<usize> {
        let Some((first, rest)) = parts.split_first() else {
            return self.methods.get(method).copied();
        };
        if let Some(hit) = self.literal.get(*first).and_then(|n| n.find(method, rest)) {
            return Some(hit);
        }
        if first.is_empty() {
            return None;
        }
        self.param.as_ref().and_then(|n| n.find(method, rest))
    }
}

/// A compiled, immutable bundle.
#[derive(Debug)]
pub struct Bundle {
    /// `sha-256:<hex>` of the lockfile's JCS form.
    pub digest: String,
    pub binding_id: String,
    pub capabilities: Vec<Capability>,
    routes: Node,
    tools: BTreeMap<String, usize>,
    /// `connections` (RICH §10.2): agent-facing capabilities served through a connector.
    pub connections: Vec<super::connections::Connection>,
    /// Source capability index → its connection.
    by_source: BTreeMap<usize, usize>,
    /// `rcns.recipesDigest`: the RCNS recipe set (seed 000 §3.5), when the lockfile pins one.
    pub recipes: Option<Arc<RecipeSet>>,
}

fn parse_http_operation(op: &str) -> Option<(String, Vec<Segment>)> {
    let (method, path) = op.split_once(' ')?;
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let path = path.strip_prefix('/')?;
    let mut segments = Vec::new();
    for seg in path.split('/') {
        if seg.starts_with('{') && seg.ends_with('}') && seg.len() > 2 {
            segments.push(Segment::Param);
        } else if seg.contains(['{', '}', ' ', '?', '#']) {
            return None;
        } else {
            segments.push(Segment::Literal(seg.to_owned()));
        }
    }
    Some((method.to_owned(), segments))
}

/// A capability's `runtime` block.
fn runtime_of(cap: &Map<String, Value>, at: &str, problems: &mut Vec<Problem>) -> Runtime {
    let rt_at = format!("{at}/runtime");
    let empty = Map::new();
    let runtime_obj = cap
        .get("runtime")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let on_drift = choice(
        runtime_obj,
        "onDrift",
        &rt_at,
        &[
            ("fail-closed", DriftPolicy::FailClosed),
            ("quarantine", DriftPolicy::Quarantine),
            ("qualified-fallback", DriftPolicy::QualifiedFallback),
            ("notify", DriftPolicy::Notify),
        ],
        Some(DriftPolicy::FailClosed),
        problems,
    )
    .unwrap_or(DriftPolicy::FailClosed);
    let fallback = runtime_obj
        .get("fallback")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if on_drift == DriftPolicy::QualifiedFallback && fallback.is_none() {
        problems.push(Problem::new(
            format!("{rt_at}/fallback"),
            "qualified-fallback needs the fallback deployment's base URL",
        ));
    }
    let admission = choice(
        runtime_obj,
        "admission",
        &rt_at,
        &[("required", Some(true)), ("off", Some(false))],
        Some(None),
        problems,
    )
    .flatten();
    Runtime {
        on_drift,
        timeout_ms: duration_at(runtime_obj, "timeout", &rt_at, problems),
        fallback,
        admission,
    }
}

/// A capability's `toolDigest`, when it has one.
fn tool_digest_of(
    cap: &Map<String, Value>,
    at: &str,
    problems: &mut Vec<Problem>,
) -> Option<Sha256Digest> {
    match cap.get("toolDigest") {
        None => None,
        Some(v) => match v.as_str().and_then(|s| s.parse::<Sha256Digest>().ok()) {
            Some(d) => Some(d),
            None => {
                problems.push(Problem::new(
                    format!("{at}/toolDigest"),
                    "must be sha-256: and 64 lowercase hex digits",
                ));
                None
            }
        },
    }
}

/// Two capabilities on one method and template would make routing ambiguous.
fn unique_routes(routes: &[Route], capabilities: &[Capability], problems: &mut Vec<Problem>) {
    let shape = |r: &Route| {
        let segs: Vec<String> = r
            .segments
            .iter()
            .map(|s| match s {
                Segment::Literal(l) => l.clone(),
                Segment::Param => "{}".into(),
            })
            .collect();
        format!("{} /{}", r.method, segs.join("/"))
    };
    let mut seen = BTreeMap::new();
    for r in routes {
        if let Some(first) = seen.insert(shape(r), r.capability) {
            problems.push(Problem::new(
                format!("lockfile#/capabilities/{}", capabilities[r.capability].name),
                format!("binds the same operation as {}", capabilities[first].name),
            ));
        }
    }
}

impl Bundle {
    /// Compiles a bundle. `contracts` maps file names (`<64-hex>.json`) to their bytes.
    pub fn compile(
        lockfile: &[u8],
        contracts: &BTreeMap<String, Vec<u8>>,
        expected_digest: Option<&str>,
    ) -> Result<Bundle, Vec<Problem>> {
        Self::compile_at(lockfile, contracts, expected_digest, None)
    }

    /// [`Bundle::compile`], with the time (Unix ms) connector qualifications must not have
    /// expired by; `None` leaves expiry unchecked (a file check, not a load).
    pub fn compile_at(
        lockfile: &[u8],
        contracts: &BTreeMap<String, Vec<u8>>,
        expected_digest: Option<&str>,
        now_ms: Option<i64>,
    ) -> Result<Bundle, Vec<Problem>> {
        let mut problems = Vec::new();
        let lock = palisade_policy::json::parse(lockfile, MAX_DOC_DEPTH)
            .map_err(|e| vec![Problem::new("lockfile#", format!("not I-JSON: {e}"))])?;
        let digest = Sha256Digest::of_json(&lock).spelled(Spelling::ShaDash256);
        if let Some(expected) = expected_digest {
            let matches = expected
                .parse::<Sha256Digest>()
                .map(|d| d.spelled(Spelling::ShaDash256) == digest)
                .unwrap_or(false);
            if !matches {
                problems.push(Problem::new(
                    "lockfile#",
                    format!("digest {digest} is not rich.expected_digest"),
                ));
            }
        }
        let Value::Object(lock) = lock else {
            return Err(vec![Problem::new("lockfile#", "must be a JSON object")]);
        };
        let binding_id = match lock.get("bindingId").and_then(Value::as_str) {
            Some(b) => b.to_owned(),
            None => {
                problems.push(Problem::new(
                    "lockfile#/bindingId",
                    "is required and must be a string",
                ));
                String::new()
            }
        };
        let empty = Map::new();
        let caps = match lock.get("capabilities") {
            Some(Value::Object(c)) => c,
            _ => {
                problems.push(Problem::new(
                    "lockfile#/capabilities",
                    "is required and must be an object",
                ));
                &empty
            }
        };
        // Each contract compiles once, however many capabilities share it.
        let mut compiled: BTreeMap<String, Option<Arc<Contract>>> = BTreeMap::new();
        let mut capabilities = Vec::new();
        let mut routes = Vec::new();
        let mut tools = BTreeMap::new();
        for (name, cap) in caps {
            let at = format!(
                "lockfile#/capabilities/{}",
                name.replace('~', "~0").replace('/', "~1")
            );
            let Some(cap) = cap.as_object() else {
                problems.push(Problem::new(at, "must be an object"));
                continue;
            };
            let protocol = choice(
                cap,
                "protocol",
                &at,
                &[("http", Protocol::Http), ("mcp", Protocol::Mcp)],
                None,
                &mut problems,
            );
            let operation = cap.get("operation").and_then(Value::as_str);
            if operation.is_none() {
                problems.push(Problem::new(format!("{at}/operation"), "is required"));
            }
            let contract_digest = cap
                .get("contractDigest")
                .and_then(Value::as_str)
                .filter(|d| super::connector::artifact::is_digest(d))
                .and_then(|d| d.strip_prefix("sha-256:"));
            let Some(hex) = contract_digest else {
                problems.push(Problem::new(
                    format!("{at}/contractDigest"),
                    "is required: sha-256: and 64 lowercase hex digits",
                ));
                continue;
            };
            let file = format!("{hex}.json");
            let contract = compiled
                .entry(file.clone())
                .or_insert_with(|| match contracts.get(&file) {
                    Some(bytes) => compile_contract(&file, bytes, &mut problems).map(Arc::new),
                    None => {
                        problems.push(Problem::new(
                            format!("{at}/contractDigest"),
                            format!("no contract file {file} in rich.contracts"),
                        ));
                        None
                    }
                })
                .clone();
            let runtime = runtime_of(cap, &at, &mut problems);
            let deployment_identity = cap
                .get("deployment")
                .and_then(|d| d.get("identity"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let tool_digest = tool_digest_of(cap, &at, &mut problems);
            let tool_annotations = match cap.get("toolAnnotations") {
                None => None,
                Some(v @ Value::Object(_)) => Some(v.clone()),
                Some(_) => {
                    problems.push(Problem::new(
                        format!("{at}/toolAnnotations"),
                        "must be an object (the pinned tool's `annotations`)",
                    ));
                    None
                }
            };
            let (Some(protocol), Some(operation), Some(contract)) = (protocol, operation, contract)
            else {
                continue;
            };
            let index = capabilities.len();
            match protocol {
                Protocol::Http => match parse_http_operation(operation) {
                    Some((method, segments)) => routes.push(Route {
                        method,
                        segments,
                        capability: index,
                    }),
                    None => problems.push(Problem::new(
                        format!("{at}/operation"),
                        "an http operation is \"METHOD /path/{param}\"",
                    )),
                },
                Protocol::Mcp => {
                    if tools.insert(operation.to_owned(), index).is_some() {
                        problems.push(Problem::new(
                            format!("{at}/operation"),
                            "another capability binds the same tool",
                        ));
                    }
                }
            }
            capabilities.push(Capability {
                name: name.clone(),
                protocol,
                operation: operation.to_owned(),
                contract,
                deployment_identity,
                tool_digest,
                tool_annotations,
                runtime,
            });
        }
        unique_routes(&routes, &capabilities, &mut problems);
        let connections = match lock.get("connections") {
            None => Vec::new(),
            Some(list) => super::connections::resolve(
                list,
                &super::connections::Inputs {
                    capabilities: &capabilities,
                    files: contracts,
                    now_ms,
                },
                &mut problems,
            ),
        };
        let recipes = lock
            .get("rcns")
            .and_then(|r| recipes(r, contracts, &capabilities, &mut problems));
        if !problems.is_empty() {
            return Err(problems);
        }
        let by_source = connections
            .iter()
            .enumerate()
            .map(|(i, c)| (c.source, i))
            .collect();
        let mut trie = Node::default();
        for r in &routes {
            trie.insert(r);
        }
        Ok(Bundle {
            digest,
            binding_id,
            capabilities,
            routes: trie,
            tools,
            connections,
            by_source,
            recipes,
        })
    }

    /// The connection whose source is the capability at `index`.
    pub fn connection_of(&self, index: usize) -> Option<&super::connections::Connection> {
        self.connections.get(*self.by_source.get(&index)?)
    }

    /// The capability bound to an HTTP request (`path` without the query).
    pub fn route(&self, method: &str, path: &str) -> Option<&Capability> {
        self.route_index(method, path)
            .map(|i| &self.capabilities[i])
    }

    /// As [`Bundle::route`], the capability's index in [`Bundle::capabilities`]: a routed
    /// request can hold it without borrowing the bundle.
    pub fn route_index(&self, method: &str, path: &str) -> Option<usize> {
        let path = path.strip_prefix('/')?;
        // Paths longer than any sane template are not worth splitting.
        let mut parts: [&str; 32] = [""; 32];
        let mut n = 0;
        for seg in path.split('/') {
            *parts.get_mut(n)? = seg;
            n += 1;
        }
        self.routes.find(method, &parts[..n])
    }

    /// The capability bound to an MCP tool.
    pub fn tool(&self, name: &str) -> Option<&Capability> {
        self.tool_index(name).map(|i| &self.capabilities[i])
    }

    /// As [`Bundle::tool`], the capability's index.
    pub fn tool_index(&self, name: &str) -> Option<usize> {
        self.tools.get(name).copied()
    }
}

#[cfg(test)]
mod tests;

/// The lockfile's `rcns` block: `{"recipesDigest": "sha-256:<hex>"}`, the recipe set in
/// `rich.contracts` named by its content.
fn recipes(
    block: &Value,
    files: &BTreeMap<String, Vec<u8>>,
    capabilities: &[Capability],
    problems: &mut Vec<Problem>,
) -> Option<Arc<RecipeSet>> {
    let at = "lockfile#/rcns/recipesDigest";
    let digest = block
        .get("recipesDigest")
        .and_then(Value::as_str)
        .filter(|d| super::connector::artifact::is_digest(d));
    let Some(digest) = digest else {
        problems.push(Problem::new(
            at,
            "is required: sha-256: and 64 lowercase hex digits",
        ));
        return None;
    };
    let file = format!("{}.json", &digest["sha-256:".len()..]);
    let Some(bytes) = files.get(&file) else {
        problems.push(Problem::new(
            at,
            format!("no recipe set {file} in rich.contracts"),
        ));
        return None;
    };
    let doc = match palisade_policy::json::parse(bytes, MAX_DOC_DEPTH) {
        Ok(d) => d,
        Err(e) => {
            problems.push(Problem::new(
                format!("contracts/{file}#"),
                format!("not I-JSON: {e}"),
            ));
            return None;
        }
    };
    problems.extend(super::content_named(&file, &doc).1);
    match RecipeSet::compile(&file, &doc, digest.to_owned(), capabilities) {
        Ok(set) => Some(Arc::new(set)),
        Err(ps) => {
            problems.extend(ps);
            None
        }
    }
}
