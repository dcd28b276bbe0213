//! One bound capability of a bundle: its protocol and operation, its contract, its
//! deployment identity and `runtime` block.

use std::sync::Arc;

use super::contract::Contract;
use palisade_policy::digest::Sha256Digest;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Mcp,
}

/// A binding's `runtime.onDrift` (RICH §14.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftPolicy {
    FailClosed,
    Quarantine,
    QualifiedFallback,
    Notify,
}

/// A binding's `runtime` block.
#[derive(Debug, Clone)]
pub struct Runtime {
    pub on_drift: DriftPolicy,
    pub timeout_ms: Option<u64>,
    /// `runtime.admission`: `Some(true)` for `"required"`, `Some(false)` for `"off"`, `None` to
    /// follow `[admission] mode` (SPEC §13: per binding overridable in the lockfile).
    pub admission: Option<bool>,
    /// Base URL of a pre-qualified backup deployment (`qualified-fallback`).
    pub fallback: Option<String>,
}

/// One bound capability.
#[derive(Debug)]
pub struct Capability {
    /// Its key in the lockfile's `capabilities`.
    pub name: String,
    pub protocol: Protocol,
    /// `PUT /api/v2/allocations/{id}` or an MCP tool name.
    pub operation: String,
    pub contract: Arc<Contract>,
    /// `deployment.identity` (a SPIFFE ID), checked when the upstream is HTTPS.
    pub deployment_identity: Option<String>,
    /// `toolDigest` of an MCP capability.
    pub tool_digest: Option<Sha256Digest>,
    /// `toolAnnotations` of an MCP capability: the `annotations` of the pinned definition
    /// (`destructiveHint`, `readOnlyHint`, …), as `palisade lock pin-mcp` recorded them; what
    /// an operator's rule reads as `tool.annotations` (SPEC §15).
    pub tool_annotations: Option<serde_json::Value>,
    pub runtime: Runtime,
}
