//! Palisade's RICH layer (issue 55: a crate of its own, beside PTCL's `palisade-policy`):
//!
//! - the bindings (SPEC §7): a lockfile and its contract documents, compiled into a [`Bundle`]
//!   — digests verified, schemas compiled under complexity limits, an immutable routing
//!   table; pure: the caller reads the files and hands over bytes; compiling does no I/O.
//!   Errors list every problem found, each with the JSON pointer (or file) it is about, so an
//!   operator can fix a bundle in one pass;
//! - [`rcns`]: AGTP-RCNS negotiation decided over the bundle's recipes;
//! - [`admission`]: RICH admission tokens that name contract digests.
//!
//! It builds on `palisade-policy` for PTCL's vocabulary (recovery modes, reversibility) and
//! on `palisade-core` (through it) for JSON, digests and the error table.
#![forbid(unsafe_code)]

pub mod admission;
pub mod rcns;

pub mod bound;
mod bundle;
mod capability;
pub mod compat;
pub mod connections;
pub mod connector;
mod contract;
mod duration;
pub mod migration;
pub mod parameters;
mod problem;
mod recipe_grammar;
mod recipe_steps;
pub mod recipes;
pub mod schema;

pub use bound::WorstCaseBound;
pub use bundle::Bundle;
pub use capability::{Capability, DriftPolicy, Protocol, Runtime};
pub use connections::Connection;
pub use contract::{Contract, IdempotencyKey, SideEffect};
pub(crate) use problem::content_named;
pub use problem::Problem;
pub use schema::{Schema, Violation};

/// The request's path, query and header parameters against the capability's
/// `structural.parameters` (`path` is the request path without its query; `headers` gives a
/// header's values by lower-case name).
pub fn check_parameters(
    cap: &Capability,
    path: &str,
    query: Option<&str>,
    headers: parameters::Headers<'_, '_>,
) -> Result<(), palisade_policy::Refusal> {
    let Some(p) = cap
        .contract
        .parameters
        .as_ref()
        .filter(|_| cap.protocol == Protocol::Http)
    else {
        return Ok(());
    };
    p.check(
        &parameters::path_values(&cap.operation, path),
        query,
        headers,
    )
}

/// A read's query as its connection's request connector maps it: declared names read as
/// their schemas' types, others as text ([`parameters::query_string`] writes the answer back).
pub fn query_input(
    cap: &Capability,
    query: Option<&str>,
) -> Result<serde_json::Value, palisade_policy::Refusal> {
    match cap.contract.parameters.as_ref() {
        Some(p) => p.query_object(query),
        None => parameters::plain_query_object(query),
    }
}

/// RICH §11.2 duty 5: a connector's output against the target contract's `structural.input`
/// before the target is invoked; `ERR_CONNECTOR_POSTCONDITION` at the failing location.
pub fn check_mapped_input(
    target: &Contract,
    v: &serde_json::Value,
) -> Result<(), palisade_policy::Refusal> {
    mapped(
        target.input.as_ref(),
        v,
        "the connector's output violates the target contract's structural.input",
        "",
    )
}

/// A response connector's output against the source contract's `structural.output`, its
/// location under `at` (where the mapped value sits in the answer).
pub fn check_mapped_output(
    source: &Contract,
    v: &serde_json::Value,
    at: &str,
) -> Result<(), palisade_policy::Refusal> {
    mapped(
        source.output.as_ref(),
        v,
        "the mapped answer violates the source contract's structural.output",
        at,
    )
}

fn mapped(
    schema: Option<&Schema>,
    v: &serde_json::Value,
    what: &str,
    at: &str,
) -> Result<(), palisade_policy::Refusal> {
    let Some(schema) = schema else {
        return Ok(());
    };
    schema.check(v).map_err(|violation| {
        palisade_policy::Refusal::new(
            palisade_policy::ErrorCode::ConnectorPostcondition,
            format!("{what} at schema keyword {}", violation.schema_location),
        )
        .with_location(format!("{at}{}", violation.instance_location))
    })
}

/// Check 9 (SPEC §5.2, RICH §11.2): a request body against the capability's
/// `structural.input`. The body must be I-JSON when there is a schema to check; the refusal
/// names the failing location in the payload, never a value.
pub fn check_input(
    contract: &Contract,
    body: &[u8],
    max_depth: usize,
) -> Result<(), palisade_policy::Refusal> {
    use palisade_policy::{ErrorCode, Refusal};
    if contract.input.is_none() {
        return Ok(());
    }
    let value = palisade_policy::json::parse(body, max_depth).map_err(|_| {
        Refusal::new(
            ErrorCode::ContractInput,
            "the request body is not I-JSON, and the operation's input contract needs it",
        )
        .with_location("")
    })?;
    check_input_value(contract, &value)
}

/// [`check_input`] on a body already parsed.
pub fn check_input_value(
    contract: &Contract,
    value: &serde_json::Value,
) -> Result<(), palisade_policy::Refusal> {
    use palisade_policy::{ErrorCode, Refusal};
    let Some(schema) = &contract.input else {
        return Ok(());
    };
    schema.check(value).map_err(|v| {
        Refusal::new(
            ErrorCode::ContractInput,
            format!(
                "the request body violates structural.input at schema keyword {}",
                v.schema_location
            ),
        )
        .with_location(v.instance_location)
    })
}
