//! The facts one request is decided by and named as, and how it ended.

use palisade_rich::{Bundle, Capability};

/// Facts about the request that receipts and events name.
#[derive(Debug, Clone)]
pub struct WriteContext {
    pub method: http::Method,
    pub trace_id: std::sync::Arc<str>,
    /// `METHOD path` without the query.
    pub operation: String,
    /// The bundle in force (`sha-256:` of the lockfile), for receipts.
    pub lockfile_digest: Option<String>,
    /// The bundle's `bindingId` and the bound contract's digest, for drift events.
    pub binding_id: Option<String>,
    pub contract_digest: Option<String>,
    /// The binding's upstream timeout (`runtime.timeout`, else `operational.timeout`).
    pub timeout: Option<std::time::Duration>,
    /// The binding's `deployment.identity`: the SPIFFE ID the upstream must present.
    pub identity: Option<String>,
    /// Who acted, when admission verified a token (`sub:sha256:…`): named in receipts and
    /// drift events.
    pub caller: Option<String>,
    /// The connection the request went through, when its binding has one (RICH §9).
    pub connector: Option<palisade_policy::receipt::ConnectorRef>,
    /// The agent-facing operation a connection mapped this write from (its freeze and budget
    /// key: `METHOD /template` or `mcp:tool/<name>`): a freeze of either name stops the write
    /// (SPEC §14).
    pub facing: Option<String>,
    /// The write's keys as freezes and budgets name them (SPEC §14): its operation (the
    /// lockfile's `METHOD /template`, `mcp:tool/<name>`) and its resource (the fence key).
    /// Set by the engine; a held write keeps them for the operator to paste into a freeze.
    pub operation_key: Option<String>,
    pub resource_key: Option<String>,
    /// The synthesized contract the request runs under (RCNS), for its receipts.
    pub attribution: Option<palisade_policy::receipt::Attribution>,
    /// SHA-256 of the operator's rules file the request was decided under (SPEC §15), for
    /// every receipt it leaves.
    pub rules_digest: Option<String>,
}

impl WriteContext {
    pub fn new(method: http::Method, trace_id: std::sync::Arc<str>, operation: String) -> Self {
        Self {
            method,
            trace_id,
            operation,
            lockfile_digest: None,
            binding_id: None,
            contract_digest: None,
            timeout: None,
            identity: None,
            caller: None,
            connector: None,
            facing: None,
            operation_key: None,
            resource_key: None,
            attribution: None,
            rules_digest: None,
        }
    }

    /// Records the bundle and the capability (if any) this request is decided by.
    pub fn bind(&mut self, bundle: Option<&Bundle>, binding: &Binding<'_>) {
        if let Some(b) = bundle {
            self.lockfile_digest = Some(b.digest.clone());
            self.binding_id = Some(b.binding_id.clone());
        }
        if let Binding::Bound(cap) = binding {
            self.contract_digest = Some(cap.contract.digest.clone());
            self.identity = cap.deployment_identity.clone();
            self.timeout = cap
                .runtime
                .timeout_ms
                .or(cap.contract.timeout_ms)
                .map(std::time::Duration::from_millis);
        }
    }
}

/// How the bundle in force binds a request (SPEC §4, §7).
#[derive(Debug, Clone, Copy)]
pub enum Binding<'a> {
    /// No bundle configured: every operation is unbound.
    NoBundle,
    /// A bundle is loaded and no capability matches.
    Unbound,
    Bound(&'a Capability),
}

impl<'a> Binding<'a> {
    pub fn capability(&self) -> Option<&'a Capability> {
        match self {
            Binding::Bound(c) => Some(c),
            _ => None,
        }
    }
}

/// How a request was routed through a bundle, held without borrowing it: a write is routed
/// once and the answer travels with it (into the task that delivers it, too), each stage
/// reading its [`Binding`] from the same bundle version by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routed {
    NoBundle,
    Unbound,
    /// The index of the bound capability in the bundle's `capabilities`.
    Bound(usize),
}

impl Routed {
    /// Routes an HTTP request through `bundle`.
    pub fn of(bundle: Option<&Bundle>, method: &http::Method, path: &str) -> Self {
        match bundle {
            None => Routed::NoBundle,
            Some(b) => b
                .route_index(method.as_str(), path)
                .map_or(Routed::Unbound, Routed::Bound),
        }
    }

    /// Routes an MCP tool call through `bundle`.
    pub fn tool(bundle: Option<&Bundle>, name: &str) -> Self {
        match bundle {
            None => Routed::NoBundle,
            Some(b) => b.tool_index(name).map_or(Routed::Unbound, Routed::Bound),
        }
    }

    /// The binding in `bundle`, the version this was routed through.
    pub fn binding(self, bundle: Option<&Bundle>) -> Binding<'_> {
        match (self, bundle) {
            (Routed::Bound(i), Some(b)) => b
                .capabilities
                .get(i)
                .map_or(Binding::Unbound, Binding::Bound),
            (Routed::NoBundle, _) | (_, None) => Binding::NoBundle,
            (Routed::Unbound, Some(_)) => Binding::Unbound,
        }
    }
}

/// How a request ended, for metrics and the access log.
#[derive(Debug, Clone, Copy)]
pub enum Outcome {
    Forwarded,
    Refused,
    Error,
    /// An idempotency key's stored outcome, sent again (SPEC §5.6).
    Replayed,
}

impl Outcome {
    /// Index into `telemetry::OUTCOMES`.
    pub fn index(self) -> usize {
        self as usize
    }
}
