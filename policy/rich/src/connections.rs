//! The lockfile's `connections` (RICH §10.2), as the sidecar runs them: an agent-facing
//! capability (`source`) served by a legacy one (`target`) through pinned connectors.
//!
//! ```json
//! "connections": [{
//!   "id": "allocate-v2-on-v1", "source": "allocate-v2", "target": "allocate-v1",
//!   "edgeKind": "data",
//!   "connectorDigest": "sha-256:…", "connectorProfile": "urn:palisade:connector-profile:t1-jmespath:1",
//!   "connectorQualificationDigest": "sha-256:…",
//!   "response": {"connectorDigest": "…", "connectorProfile": "…", "connectorQualificationDigest": "…"},
//!   "runtime": {"onDrift": "fail-closed"}
//! }]
//! ```
//!
//! A request routed to `source` is checked against the source contract's input, mapped by the
//! request connector, checked against the target contract's input and sent as the target
//! operation; with a `response` connector the answer comes back the same way. A GET connects
//! to a GET (issue 37): its request connector maps the query ([`super::query_input`] to
//! [`super::parameters::query_string`]) and its `response` connector, required there, the
//! answer. An MCP tool connects to an MCP tool: its arguments are mapped, and its result's
//! `structuredContent` back. The compiler
//! refuses (§11.1): a connector, profile or qualification record missing from the bundle,
//! connectors whose pinned digests are not the two contracts', profiles it does not run,
//! qualification records that do not name the connector or did not qualify it (or expired),
//! tool edges, and a target template with a parameter the source cannot supply.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::connector::artifact::{is_digest, Connector, PROFILE_T0, PROFILE_T1};
use super::{Capability, DriftPolicy, Problem, Protocol};

/// A resolved connection.
#[derive(Debug)]
pub struct Connection {
    pub id: String,
    /// Index of the agent-facing capability in [`super::Bundle::capabilities`].
    pub source: usize,
    /// Index of the capability the SoR serves.
    pub target: usize,
    /// A GET on both sides: the request connector maps the query (the source's as an object,
    /// [`super::query_input`]), and the response connector maps the answer back.
    pub read: bool,
    /// Source input → target input.
    pub request: Arc<Connector>,
    /// Target output → source output, when bound.
    pub response: Option<Arc<Connector>>,
    /// `fail-closed` (default) or `notify`. `notify` lets an unmappable *response* through
    /// unmapped, with a drift event; a request that cannot be mapped has nothing to send, so
    /// it is refused under either policy.
    pub on_drift: DriftPolicy,
}

/// Which way a connector maps.
#[derive(Clone, Copy)]
enum Direction {
    Request,
    Response,
}

pub(super) struct Inputs<'a> {
    pub capabilities: &'a [Capability],
    pub files: &'a BTreeMap<String, Vec<u8>>,
    /// Now, in Unix milliseconds, to check qualification expiry; `None` skips the check.
    pub now_ms: Option<i64>,
}

/// Resolves `lockfile#/connections`.
pub(super) fn resolve(
    connections: &Value,
    inputs: &Inputs<'_>,
    problems: &mut Vec<Problem>,
) -> Vec<Connection> {
    let Value::Array(list) = connections else {
        problems.push(Problem::new(
            "lockfile#/connections",
            "must be an array of connections",
        ));
        return Vec::new();
    };
    let mut compiled: BTreeMap<String, Option<Arc<Connector>>> = BTreeMap::new();
    let mut sources = BTreeMap::new();
    let mut out = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let at = format!("lockfile#/connections/{i}");
        let Some(c) = c.as_object() else {
            problems.push(Problem::new(at, "must be an object"));
            continue;
        };
        if let Some(conn) = one(c, &at, inputs, &mut compiled, problems) {
            if let Some(first) = sources.insert(conn.source, i) {
                problems.push(Problem::new(
                    format!("{at}/source"),
                    format!("is already the source of connections/{first}"),
                ));
                continue;
            }
            out.push(conn);
        }
    }
    out
}

fn one(
    c: &Map<String, Value>,
    at: &str,
    inputs: &Inputs<'_>,
    compiled: &mut BTreeMap<String, Option<Arc<Connector>>>,
    problems: &mut Vec<Problem>,
) -> Option<Connection> {
    let id = c.get("id").and_then(Value::as_str).unwrap_or_default();
    if id.is_empty() {
        problems.push(Problem::new(format!("{at}/id"), "is required"));
    }
    match c.get("edgeKind").and_then(Value::as_str) {
        Some("data") => {}
        Some("tool") => problems.push(Problem::new(
            format!("{at}/edgeKind"),
            "a tool edge hands a capability to a model, not a payload to a connector: it cannot be flattened into a data flow (RICH §11.1)",
        )),
        _ => problems.push(Problem::new(
            format!("{at}/edgeKind"),
            "is required and must be \"data\"",
        )),
    }
    let cap = |key: &str, problems: &mut Vec<Problem>| -> Option<usize> {
        let name = c.get(key).and_then(Value::as_str);
        let found = name.and_then(|n| inputs.capabilities.iter().position(|k| k.name == n));
        match found {
            Some(i) => Some(i),
            None => {
                problems.push(Problem::new(
                    format!("{at}/{key}"),
                    "must name a capability of this lockfile",
                ));
                None
            }
        }
    };
    let source = cap("source", problems);
    let target = cap("target", problems);
    let on_drift = match c
        .get("runtime")
        .and_then(|r| r.get("onDrift"))
        .and_then(Value::as_str)
    {
        None | Some("fail-closed") => DriftPolicy::FailClosed,
        Some("notify") => DriftPolicy::Notify,
        Some(_) => {
            problems.push(Problem::new(
                format!("{at}/runtime/onDrift"),
                "a connection's drift policy is \"fail-closed\" or \"notify\"",
            ));
            DriftPolicy::FailClosed
        }
    };
    let (source, target) = (source?, target?);
    if source == target {
        problems.push(Problem::new(
            format!("{at}/target"),
            "must be another capability than the source",
        ));
        return None;
    }
    let (src, tgt) = (&inputs.capabilities[source], &inputs.capabilities[target]);
    if src.protocol != tgt.protocol {
        problems.push(Problem::new(
            format!("{at}/target"),
            "a connection joins two capabilities of one protocol: an http operation to an http operation, an MCP tool to an MCP tool",
        ));
        return None;
    }
    // A tool call's arguments are mapped, and its result's structuredContent back (issue 37):
    // no method or path to check. An HTTP connection's are.
    let read = match src.protocol {
        Protocol::Mcp => false,
        Protocol::Http => http_pair(c, at, src, tgt, problems),
    };
    let (s, t) = (&src.contract.digest, &tgt.contract.digest);
    let join = Join {
        from: s,
        to: t,
        direction: Direction::Request,
    };
    let request = connector(c, at, join, inputs, compiled, problems);
    let response = response_connector(c, at, (s, t), inputs, compiled, problems)?;
    Some(Connection {
        id: id.to_owned(),
        source,
        target,
        read,
        request: request?,
        response,
        on_drift,
    })
}

/// The checks of an HTTP pair: a GET connects to a GET and maps its answer, a write to a
/// write; HEAD and OPTIONS have no answer to map; every target path parameter comes from the
/// source's path. Whether it is a read connection.
fn http_pair(
    c: &Map<String, Value>,
    at: &str,
    src: &Capability,
    tgt: &Capability,
    problems: &mut Vec<Problem>,
) -> bool {
    // A write's body is mapped; a read's query is mapped and its answer mapped back (issue
    // 37). A read cannot stand in for a write, nor a write for a read; HEAD and OPTIONS have
    // no answer to map.
    let method = |cap: &Capability| {
        cap.operation
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let (sm, tm) = (method(src), method(tgt));
    for (key, m) in [("source", &sm), ("target", &tm)] {
        if matches!(m.as_str(), "HEAD" | "OPTIONS") {
            problems.push(Problem::new(
                format!("{at}/{key}"),
                format!("{m} operations have no body to map; connect a GET or a write"),
            ));
        }
    }
    let read = sm == "GET";
    if read != (tm == "GET") {
        problems.push(Problem::new(
            format!("{at}/target"),
            "a read connects to a read and a write to a write: one cannot stand in for the other",
        ));
    }
    if read && c.get("response").is_none() {
        problems.push(Problem::new(
            format!("{at}/response"),
            "is required on a read connection: the answer is what a read's connection maps",
        ));
    }
    if let Some(missing) = missing_parameter(&src.operation, &tgt.operation) {
        problems.push(Problem::new(
            format!("{at}/target"),
            format!(
                "the target's path parameter {{{missing}}} is not a parameter of the source's path, so no request could fill it"
            ),
        ));
    }
    read
}

/// The `response` member: `Some(None)` when there is none, `None` when it is not an object.
fn response_connector(
    c: &Map<String, Value>,
    at: &str,
    (s, t): (&str, &str),
    inputs: &Inputs<'_>,
    compiled: &mut BTreeMap<String, Option<Arc<Connector>>>,
    problems: &mut Vec<Problem>,
) -> Option<Option<Arc<Connector>>> {
    match c.get("response") {
        None => Some(None),
        Some(Value::Object(r)) => {
            let at = format!("{at}/response");
            let join = Join {
                from: t,
                to: s,
                direction: Direction::Response,
            };
            Some(connector(r, &at, join, inputs, compiled, problems))
        }
        Some(_) => {
            problems.push(Problem::new(format!("{at}/response"), "must be an object"));
            None
        }
    }
}

/// The contracts a connector must join (their digests), and which way it maps.
struct Join<'a> {
    from: &'a str,
    to: &'a str,
    direction: Direction,
}

/// The connector a reference names, checked against the contracts it must join.
fn connector(
    r: &Map<String, Value>,
    at: &str,
    join: Join<'_>,
    inputs: &Inputs<'_>,
    compiled: &mut BTreeMap<String, Option<Arc<Connector>>>,
    problems: &mut Vec<Problem>,
) -> Option<Arc<Connector>> {
    let Join {
        from,
        to,
        direction,
    } = join;
    let (file, bytes) = match pinned_file(r, "connectorDigest", "connector file", inputs) {
        Ok(f) => f,
        Err(why) => {
            let why =
                why.unwrap_or_else(|| "is required: sha-256: and 64 lowercase hex digits".into());
            problems.push(Problem::new(format!("{at}/connectorDigest"), why));
            return None;
        }
    };
    let conn = compiled
        .entry(file.clone())
        .or_insert_with(|| match Connector::compile(&file, bytes) {
            Ok(c) => Some(Arc::new(c)),
            Err(ps) => {
                problems.extend(ps);
                None
            }
        })
        .clone()?;
    let way = match direction {
        Direction::Request => "source capability's",
        Direction::Response => "target capability's",
    };
    if conn.source_digest != from {
        problems.push(Problem::new(
            format!("{at}/connectorDigest"),
            format!("the connector's sourceDigest is not the {way} contract ({from})"),
        ));
    }
    if conn.target_digest != to {
        let way = match direction {
            Direction::Request => "target capability's",
            Direction::Response => "source capability's",
        };
        problems.push(Problem::new(
            format!("{at}/connectorDigest"),
            format!("the connector's targetDigest is not the {way} contract ({to})"),
        ));
    }
    match r.get("connectorProfile").and_then(Value::as_str) {
        Some(p) if p == conn.profile => {}
        Some(p) if p == PROFILE_T0 || p == PROFILE_T1 => problems.push(Problem::new(
            format!("{at}/connectorProfile"),
            format!("the connector runs under {}, not {p}", conn.profile),
        )),
        _ => problems.push(Problem::new(
            format!("{at}/connectorProfile"),
            format!("must be a profile this sidecar runs: {PROFILE_T0} or {PROFILE_T1}"),
        )),
    }
    qualified(r, at, &conn, inputs, problems);
    Some(conn)
}

/// §11.1 (5): the connector's qualification record is in the bundle, names it, and qualified
/// it, and has not expired.
fn qualified(
    r: &Map<String, Value>,
    at: &str,
    conn: &Connector,
    inputs: &Inputs<'_>,
    problems: &mut Vec<Problem>,
) {
    let at = format!("{at}/connectorQualificationDigest");
    let key = "connectorQualificationDigest";
    let (file, bytes) = match pinned_file(r, key, "qualification record", inputs) {
        Ok(f) => f,
        Err(why) => {
            let why = why.unwrap_or_else(|| {
                "is required: an unqualified connector cannot be enforced (RICH §11.1)".into()
            });
            problems.push(Problem::new(at, why));
            return;
        }
    };
    let record = match palisade_policy::json::parse(bytes, 64) {
        Ok(v @ Value::Object(_)) => v,
        _ => {
            problems.push(Problem::new(
                format!("contracts/{file}#"),
                "a qualification record must be a JSON object",
            ));
            return;
        }
    };
    problems.extend(super::content_named(&file, &record).1);
    for (member, why) in conn.qualified_by(&record, inputs.now_ms) {
        problems.push(Problem::new(format!("contracts/{file}#/{member}"), why));
    }
}

/// The bundle file `r[key]` pins (a `what`), with its bytes. `Err(None)`: the member is
/// missing or not a digest; `Err(Some(why))`: no such file in the bundle.
fn pinned_file<'i>(
    r: &Map<String, Value>,
    key: &str,
    what: &str,
    inputs: &Inputs<'i>,
) -> Result<(String, &'i [u8]), Option<String>> {
    let digest = r
        .get(key)
        .and_then(Value::as_str)
        .filter(|d| is_digest(d))
        .ok_or(None)?;
    let file = format!("{}.json", &digest["sha-256:".len()..]);
    match inputs.files.get(&file) {
        Some(bytes) => Ok((file, bytes.as_slice())),
        None => Err(Some(format!("no {what} {file} in rich.contracts"))),
    }
}

/// The first `{name}` of `target` that `source` does not have.
fn missing_parameter(source: &str, target: &str) -> Option<String> {
    let params = |op: &str| -> Vec<String> {
        op.split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(str::to_owned)
            .collect()
    };
    let have = params(source);
    params(target).into_iter().find(|p| !have.contains(p))
}

/// The target operation's path for a request to `source_template` at `path`: each `{name}`
/// of the target template filled with the source path's segment of the same name. `None`
/// when the path does not fit the template (the router said it did, so only on a bug).
pub fn target_path(source_op: &str, target_op: &str, path: &str) -> Option<String> {
    let src = source_op.split_once(' ')?.1;
    let tgt = target_op.split_once(' ')?.1;
    if src.split('/').count() != path.split('/').count() {
        return None;
    }
    let values = super::parameters::path_values(source_op, path);
    let mut out = String::with_capacity(tgt.len() + path.len());
    for (i, seg) in tgt.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        match seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) {
            Some(name) => out.push_str(values.iter().find(|(n, _)| *n == name)?.1),
            None => out.push_str(seg),
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
