//! Check 9 (SPEC §5.2): the write against its bound contract, its body (or a tool call's
//! arguments, parsed once by the stage that read them) against `structural.input` and its
//! path and query against `structural.parameters`.

use palisade_policy::Refusal;

use crate::config::Config;
use crate::context::Binding;
use crate::enforce::facts::WriteFacts;

/// Check 9: the body (or a tool call's arguments) against the bound contract's
/// `structural.input`, and the path and query against its `structural.parameters`.
pub(crate) fn check(
    config: &Config,
    binding: &Binding<'_>,
    facts: &WriteFacts<'_>,
) -> Result<(), Refusal> {
    let Some(cap) = binding.capability() else {
        return Ok(());
    };
    match facts.parsed {
        Some(input) => palisade_rich::check_input_value(&cap.contract, input)?,
        None => {
            palisade_rich::check_input(&cap.contract, facts.input, config.limits.max_json_depth)?
        }
    }
    let (path, query) = facts
        .path
        .split_once('?')
        .map_or((facts.path, None), |(p, q)| (p, Some(q)));
    let none = http::HeaderMap::new();
    let headers = crate::net::headers::values(facts.headers.unwrap_or(&none));
    palisade_rich::check_parameters(cap, path, query, &headers)
}
