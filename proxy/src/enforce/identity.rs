//! Deployment identity at the enforcement layer (SPEC §7): which identity a route pins, and
//! what a mismatch met at the TLS handshake leaves behind (drift event, rejection receipt).
//! The handshake check itself is `net::identity`.

use palisade_policy::codes::{ErrorCode, Refusal};
use palisade_policy::drift::Action;

use crate::context::{Plane, WriteContext};
use crate::enforce::receipts::Refused;
use crate::net::identity::Mismatch;

/// The `deployment.identity` of the capability the bundle in force routes `method path` to.
pub(crate) fn for_route(
    bundle: Option<&palisade_rich::Bundle>,
    method: &http::Method,
    path: &str,
) -> Option<String> {
    bundle?
        .route(method.as_str(), path)?
        .deployment_identity
        .clone()
}

/// Reports a mismatch: the `identity` drift event (the peer's SPIFFE ID as the observed
/// identifier, its certificate's digest as evidence, the expected ID in the diagnostics) and
/// the refusals counter. Returns the refusal for the response.
pub(crate) fn report(plane: &Plane, cx: &WriteContext, m: &Mismatch) -> Refusal {
    let refusal = Refusal::new(
        ErrorCode::DeploymentIdentity,
        "the upstream's TLS identity is not the binding's deployment.identity",
    );
    crate::enforce::output::report(
        plane,
        &refusal,
        cx,
        Action::Blocked,
        crate::enforce::output::Observed {
            identifier: Some(m.observed.clone().unwrap_or_else(|| "none".into())),
            expected: None,
            evidence: m.certificate.clone(),
            diagnostics: vec![
                ("expectedIdentity", m.expected.clone()),
                ("operation", cx.operation.clone()),
            ],
        },
    );
    refusal
}

/// 502 `ERR_DEPLOYMENT_IDENTITY` for a request that holds no permit (a read, a pre-image
/// fetch): the drift event and a rejection receipt. Nothing of the request reached the peer.
pub(crate) async fn refused(plane: &Plane, cx: &WriteContext, m: &Mismatch) -> Refused {
    let refusal = report(plane, cx, m);
    crate::enforce::output::blocked(plane, refusal, cx).await
}
