//! The admission stage (SPEC §13): a request bound to a capability of the bundle in force that
//! requires admission (`admission.mode = "required"`, or its binding's `runtime.admission`) is
//! decided by `admission::gate` before its body is read; its input is held to the granted
//! bound once it is.

use crate::enforce::own::Own;
use std::sync::Arc;

use palisade_rich::admission::Call;
use palisade_rich::Bundle;

use crate::admission::{self, Admission, Gate, Presented};
use crate::context::{Binding, WriteContext};

/// `Ok(None)`: admission does not apply (off, no bundle, or an unbound operation).
pub async fn stage(
    gate: Option<Gate<'_>>,
    presented: Option<&Presented>,
    binding: Binding<'_>,
    bundle: Option<&Bundle>,
    cx: &WriteContext,
) -> Result<Option<Admission>, Own> {
    let (Some(g), Some(bundle), Some(presented), Binding::Bound(cap)) =
        (gate, bundle, presented, binding)
    else {
        return Ok(None);
    };
    if !admission::required(g.adm, cap) {
        return Ok(None);
    }
    let mut cx = cx.clone();
    cx.bind(Some(bundle), &Binding::Bound(cap));
    admission::gate(g, presented, (bundle, cap), &cx)
        .await
        .map(Some)
        .map_err(Own::from)
}

/// The body of an admitted write against the granted bound.
pub async fn input(
    gate: Option<Gate<'_>>,
    admitted: &Admission,
    bundle: Option<&Arc<Bundle>>,
    binding: Binding<'_>,
    input: Option<&serde_json::Value>,
    cx: &WriteContext,
) -> Result<(), Own> {
    let (Some(g), Some(bundle), Binding::Bound(cap)) = (gate, bundle, binding) else {
        return Ok(());
    };
    let mut cx = cx.clone();
    cx.bind(Some(bundle), &Binding::Bound(cap));
    let call = Call {
        binding_id: &bundle.binding_id,
        operation: &cap.operation,
        contract_digest: &cap.contract.digest,
    };
    admission::check_input(g, admitted, input, &cx, call)
        .await
        .map_err(Own::from)
}
