//! The admission stage (SPEC §13): with `admission.mode = "required"`, a request bound to a
//! capability of the bundle in force is decided by `admission::gate` before its body is read;
//! its input is held to the granted bound once it is.

use std::sync::Arc;

use http::Response;
use palisade_policy::admission::Call;
use palisade_policy::rich::Bundle;

use crate::admission::{self, Admission};
use crate::context::{AppState, Binding, WriteContext};
use crate::net::body::ProxyBody;

/// `Ok(None)`: admission does not apply (off, no bundle, or an unbound operation).
pub async fn stage(
    state: &AppState,
    parts: &mut http::request::Parts,
    bundle: Option<&Bundle>,
    cx: &WriteContext,
) -> Result<Option<Admission>, Response<ProxyBody>> {
    let (Some(adm), Some(enf), Some(bundle)) = (&state.admission, &state.enforcement, bundle)
    else {
        return Ok(None);
    };
    if !adm.config.required {
        return Ok(None);
    }
    let Binding::Bound(cap) = Binding::of(Some(bundle), &parts.method, parts.uri.path()) else {
        return Ok(None);
    };
    let mut cx = cx.clone();
    cx.bind(Some(bundle), &Binding::Bound(cap));
    admission::gate(state, enf, adm, parts, bundle, cap, &cx)
        .await
        .map(Some)
}

/// The body of an admitted write against the granted bound.
pub async fn input(
    state: &AppState,
    admitted: &Admission,
    bundle: Option<&Arc<Bundle>>,
    parts: &http::request::Parts,
    bytes: &[u8],
    cx: &WriteContext,
) -> Result<(), Response<ProxyBody>> {
    let (Some(adm), Some(enf), Some(bundle)) = (&state.admission, &state.enforcement, bundle)
    else {
        return Ok(());
    };
    let Binding::Bound(cap) = Binding::of(Some(bundle), &parts.method, parts.uri.path()) else {
        return Ok(());
    };
    let mut cx = cx.clone();
    cx.bind(Some(bundle), &Binding::Bound(cap));
    let call = Call {
        binding_id: &bundle.binding_id,
        operation: &cap.operation,
        contract_digest: &cap.contract.digest,
    };
    admission::check_input(state, enf, adm, admitted, bytes, &cx, call).await
}
