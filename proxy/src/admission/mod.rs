//! RICH admission (seed 002 §12, SPEC §13) at the sidecar: a call to a bound operation goes on
//! only under a bearer token that admits it, decided before anything is read, spent or sent.
//!
//! ```text
//! Authorization: Bearer <JWT>     missing, two, or not Bearer    401 ERR_TOKEN_INVALID
//!   → cache by token digest, else policy::admission::verify        401 ERR_TOKEN_INVALID
//!     (typ, alg, kid, signature, iss, aud, exp/nbf/iat) and the token's rich_binding grants
//!   → policy::admission::admit: operation, contract digest in force, bound in the fragment
//!                                                                   403 ERR_NOT_ADMITTED
//!   → the token leaves the request (unless admission.forward_token)
//!   → later, once the body is read: the input against the granted bound   403
//! ```
//! A 401 carries `WWW-Authenticate: Bearer` with the protected-resource metadata's URL
//! (RFC 9728); a 403 carries `error="insufficient_authorization_details"` and, in its body,
//! the `authorization_details` the call needs. Both are receipted with a drift event.

pub mod jwks;
pub mod metadata;

use std::sync::Arc;

use http::{header, HeaderValue, Response};
use palisade_policy::admission::{self, Call, Operation};
use palisade_policy::rich::{Bundle, Capability};
use palisade_policy::{ErrorCode, Refusal};

use crate::context::{AdmissionState, Admitted, AppState, Enforcement, WriteContext};
use crate::enforce::receipts;
use crate::net::body::ProxyBody;

/// What a request was admitted with: the granted operation, its bound to check the input
/// against.
pub struct Admission {
    pub operation: Operation,
    pub admitted: Arc<Admitted>,
}

/// Decides whether the request in `parts` may call `cap` of `bundle`; on `Ok` the bearer
/// token is gone from `parts` (unless `admission.forward_token`).
pub async fn gate(
    state: &AppState,
    enf: &Enforcement,
    adm: &AdmissionState,
    parts: &mut http::request::Parts,
    bundle: &Bundle,
    cap: &Capability,
    cx: &WriteContext,
) -> Result<Admission, Response<ProxyBody>> {
    let call = Call {
        binding_id: &bundle.binding_id,
        operation: &cap.operation,
        contract_digest: &cap.contract.digest,
    };
    let presented = parts.headers.contains_key(header::AUTHORIZATION);
    let admitted = match token(parts).and_then(|t| verified(adm, enf, &t)) {
        Ok(a) => a,
        Err(r) => return Err(refuse(state, enf, adm, cx, r, call, presented).await),
    };
    let operation = match admission::admit(&admitted.grants, call) {
        Ok(op) => op.clone(),
        Err(r) => return Err(refuse(state, enf, adm, cx, r, call, true).await),
    };
    if !adm.config.forward_token {
        parts.headers.remove(header::AUTHORIZATION);
    }
    Ok(Admission {
        operation,
        admitted,
    })
}

/// The input of an admitted call against its granted bound.
pub async fn check_input(
    state: &AppState,
    enf: &Enforcement,
    adm: &AdmissionState,
    admission: &Admission,
    bytes: &[u8],
    cx: &WriteContext,
    call: Call<'_>,
) -> Result<(), Response<ProxyBody>> {
    if admission.operation.bound.is_none() {
        return Ok(());
    }
    let input = palisade_policy::json::parse(bytes, state.config.max_json_depth).map_err(|_| {
        Refusal::new(
            ErrorCode::NotAdmitted,
            "the token grants this operation within a bound, and the input is not one JSON value",
        )
    });
    let checked = input.and_then(|v| admission::check_input(&admission.operation, &v));
    match checked {
        Ok(()) => Ok(()),
        Err(r) => Err(refuse(state, enf, adm, cx, r, call, true).await),
    }
}

/// The bearer token of the request: exactly one `Authorization: Bearer …` header.
fn token(parts: &http::request::Parts) -> Result<String, Refusal> {
    let missing = || {
        Refusal::new(
            ErrorCode::TokenInvalid,
            "this operation needs an access token (Authorization: Bearer)",
        )
    };
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next().ok_or_else(missing)?;
    if values.next().is_some() {
        return Err(Refusal::new(
            ErrorCode::TokenInvalid,
            "more than one Authorization header",
        ));
    }
    let text = value.to_str().map_err(|_| missing())?;
    match text.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") && !t.trim().is_empty() => {
            Ok(t.trim().to_owned())
        }
        _ => Err(missing()),
    }
}

fn verified(
    adm: &AdmissionState,
    enf: &Enforcement,
    token: &str,
) -> Result<Arc<Admitted>, Refusal> {
    let now_s = u64::try_from(enf.clock.now_ms() / 1000).unwrap_or(0);
    let digest = palisade_policy::digest::Sha256Digest::of(token.as_bytes());
    if let Some(hit) = adm.cached(&digest, now_s) {
        return Ok(hit);
    }
    let keys = adm.keys.load();
    let token = admission::verify(token, &keys, &adm.rules, now_s)?;
    let grants = admission::grant::parse(&token.authorization_details)?;
    let admitted = Arc::new(Admitted { token, grants });
    adm.remember(admitted.clone());
    Ok(admitted)
}

/// A receipted refusal with the headers RFC 6750 and RFC 9728 name: no error code when no
/// token was presented, `invalid_token` for a bad one, `insufficient_authorization_details`
/// (with what to ask for) for one that does not admit the call.
async fn refuse(
    state: &AppState,
    enf: &Enforcement,
    adm: &AdmissionState,
    cx: &WriteContext,
    r: Refusal,
    call: Call<'_>,
    presented: bool,
) -> Response<ProxyBody> {
    state.metrics.refusal(r.code);
    let metadata = metadata::url(adm);
    let (extra, challenge) = if !presented {
        (
            Vec::new(),
            format!("Bearer resource_metadata=\"{metadata}\""),
        )
    } else if r.code == ErrorCode::NotAdmitted {
        (
            vec![("authorization_details", admission::needed(call))],
            format!(
                "Bearer error=\"insufficient_authorization_details\", resource_metadata=\"{metadata}\""
            ),
        )
    } else {
        (
            Vec::new(),
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\""),
        )
    };
    let mut resp = receipts::refuse_with(enf, &r, cx, &extra).await;
    if let Ok(v) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
    }
    resp
}
