//! RCNS (issue 21): no PROPOSE body may panic the parser or the evaluation, and a step's
//! path built from an invocation's input is canonical (one segment per parameter, no dot
//! segment, no `/` smuggled in) or refused. The input is a JSON document used both ways.
#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use palisade_rich::rcns::compose::{context, step_request, tool_request};
use palisade_rich::rcns::recipes::{Step, ToolStep};
use palisade_rich::rcns::{evaluate, Caller, Proposal};
use palisade_rich::connector::t1::{Limits, T1};

static STEP: LazyLock<Step> = LazyLock::new(|| Step {
    capability: 0,
    operation: "PUT /items/{id}/lines/{line}".into(),
    path: BTreeMap::from([
        ("id".into(), T1::compile("input.id", Limits::default()).unwrap()),
        ("line".into(), T1::compile("input.line", Limits::default()).unwrap()),
    ]),
    body: Some(T1::compile("input", Limits::default()).unwrap()),
    tool: None,
});

/// A step on an MCP tool (issue 37): arguments and inverse from the input.
static TOOL: LazyLock<ToolStep> = LazyLock::new(|| ToolStep {
    name: "set_level".into(),
    arguments: Some(T1::compile("input", Limits::default()).unwrap()),
    inverse: Some((
        "set_level".into(),
        T1::compile("{sku: arguments.sku, qty: `0`}", Limits::default()).unwrap(),
    )),
});

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = Proposal::parse(data) {
        let caller = Caller {
            agent_id: "a".into(),
            scopes: BTreeSet::from(["rcns:negotiate".to_owned()]),
            trust_tier: 1,
        };
        let _ = evaluate::evaluate(&p, &caller, &BTreeSet::new(), None, None);
    }
    let Ok(input) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(req) = step_request(0, &STEP, &context(&input, &[])) {
        assert_eq!(
            palisade_policy::path::canonical_path(&req.path).as_deref(),
            Ok(req.path.as_str()),
            "{input}"
        );
        assert_eq!(req.path.split('/').count(), 5, "{}", req.path);
    }
    if let Ok(call) = tool_request(0, &TOOL, &context(&input, &[])) {
        assert!(call.arguments.is_object(), "{input}");
        let inverse = call.inverse.expect("a write tool's inverse");
        assert_eq!(inverse["tool"], "set_level");
        assert!(inverse["arguments"].is_object());
    }
});
