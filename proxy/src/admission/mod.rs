//! RICH admission (seed 002 §12, SPEC §13) at the sidecar: a call to a bound operation goes on
//! only under a bearer token that admits it, decided before anything is read, spent or sent.
//!
//! ```text
//! Authorization: Bearer <JWT>     taken off the request as it arrives (unless
//!                                 admission.forward_token): the SoR never sees it
//!                                 missing, two, or not Bearer    401 ERR_TOKEN_INVALID
//!   → cache by token digest, else policy::admission::verify        401 ERR_TOKEN_INVALID
//!     (typ, alg, kid, signature, iss, aud, exp/nbf/iat) and the token's rich_binding grants
//!   → policy::admission::admit: operation, contract digest in force, bound in the fragment
//!                                                                   403 ERR_NOT_ADMITTED
//!   → later, once the body is read: the input against the granted bound   403
//! ```
//! A 401 carries `WWW-Authenticate: Bearer` with the protected-resource metadata's URL
//! (RFC 9728); a 403 carries `error="insufficient_authorization_details"` and, in its body,
//! the `authorization_details` the call needs. Both are receipted with a drift event.

mod https;
pub mod introspect;
pub mod jwks;
pub mod jwks_url;
pub mod metadata;

use std::sync::Arc;

use http::{header, HeaderValue};
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::admission::{self, Call, Operation};
use palisade_rich::{Bundle, Capability};

use crate::context::{AdmissionState, Admitted, AppState, Enforcement, Recorder, WriteContext};
use crate::enforce::receipts::{self, Refused};

/// What a request was admitted with: the granted operation, its bound to check the input
/// against.
pub struct Admission {
    pub operation: Operation,
    pub admitted: Arc<Admitted>,
}

/// The credential a request came with, taken off it as it arrived.
pub enum Presented {
    None,
    Bearer(String),
    /// An `Authorization` the sidecar cannot use as a bearer token (two of them, another
    /// scheme, not text).
    Unusable(&'static str),
}

impl Presented {
    /// The bearer token, when one was presented.
    pub fn bearer(&self) -> Option<&str> {
        match self {
            Presented::Bearer(t) => Some(t),
            _ => None,
        }
    }
}

/// Takes the request's `Authorization` off it (it was issued for this sidecar, and the SoR
/// never sees it), unless `admission.forward_token`; whenever `[admission]` is configured (a
/// binding may require a token where the mode is off).
pub fn take(
    adm: Option<&AdmissionState>,
    enf: Option<&Enforcement>,
    parts: &mut http::request::Parts,
) -> Option<Presented> {
    let adm = adm?;
    let presented = token(parts);
    // Leases granted, escrows held and idempotency keys scoped under this token name its
    // subject, as receipts do: one caller across a subject's tokens.
    if let (Presented::Bearer(_), Some(enf)) = (&presented, enf) {
        if let Ok(a) = verified(adm, enf, &presented) {
            parts
                .extensions
                .insert(crate::net::conn::TokenCaller(a.token.caller()));
        }
    }
    if !adm.config.forward_token {
        parts.headers.remove(header::AUTHORIZATION);
    }
    Some(presented)
}

/// What admission decides with: the issuers' keys and the verified-token cache, the clock
/// that judges a token's times, and the recorder its refusals go to. Present when
/// `[admission]` is configured and writes are enforced.
#[derive(Clone, Copy)]
pub struct Gate<'a> {
    pub adm: &'a AdmissionState,
    pub enf: &'a Enforcement,
    pub rec: Recorder<'a>,
}

impl AppState {
    pub fn gate(&self) -> Option<Gate<'_>> {
        Some(Gate {
            adm: self.admission.as_ref()?,
            enf: self.enforcement.as_deref()?,
            rec: self.recorder(),
        })
    }
}

/// Whether a call to `cap` needs a token: its binding's `runtime.admission`, else the mode.
pub fn required(adm: &AdmissionState, cap: &Capability) -> bool {
    cap.runtime.admission.unwrap_or(adm.config.required)
}

/// Decides whether a request that presented `presented` may call `cap` of `bundle`.
pub async fn gate(
    g: Gate<'_>,
    presented: &Presented,
    (bundle, cap): (&Bundle, &Capability),
    cx: &WriteContext,
) -> Result<Admission, Refused> {
    let call = Call {
        binding_id: &bundle.binding_id,
        operation: &cap.operation,
        contract_digest: &cap.contract.digest,
    };
    if let Err(r) = introspect::opaque(g.adm, g.enf, presented.bearer()).await {
        return Err(refuse(g.rec, g.adm, cx, r, Some(call), true).await);
    }
    keys_for(g.adm, presented).await;
    let admitted = match verified(g.adm, g.enf, presented) {
        Ok(a) => a,
        Err(r) => {
            let shown = !matches!(presented, Presented::None);
            return Err(refuse(g.rec, g.adm, cx, r, Some(call), shown).await);
        }
    };
    let operation = match admission::admit(&admitted.grants, call) {
        Ok(op) => op.clone(),
        // The token verified, so `cx` names its subject already (`take`, then the caller).
        Err(r) => return Err(refuse(g.rec, g.adm, cx, r, Some(call), true).await),
    };
    Ok(Admission {
        operation,
        admitted,
    })
}

/// The token alone, for calls that need none but are shaped by one (MCP `tools/list`):
/// `Ok(None)` when none was presented.
pub async fn token_only(
    g: Gate<'_>,
    presented: &Presented,
    cx: &WriteContext,
) -> Result<Option<Arc<Admitted>>, Refused> {
    if matches!(presented, Presented::None) {
        return Ok(None);
    }
    if let Err(r) = introspect::opaque(g.adm, g.enf, presented.bearer()).await {
        return Err(refuse(g.rec, g.adm, cx, r, None, true).await);
    }
    keys_for(g.adm, presented).await;
    match verified(g.adm, g.enf, presented) {
        Ok(a) => Ok(Some(a)),
        Err(r) => Err(refuse(g.rec, g.adm, cx, r, None, true).await),
    }
}

/// The input of an admitted call against its granted bound; `None`: the input is not one
/// JSON value.
pub async fn check_input(
    g: Gate<'_>,
    admission: &Admission,
    input: Option<&serde_json::Value>,
    cx: &WriteContext,
    call: Call<'_>,
) -> Result<(), Refused> {
    if admission.operation.bound.is_none() {
        return Ok(());
    }
    let checked = match input {
        Some(v) => admission::check_input(&admission.operation, v),
        None => Err(Refusal::new(
            ErrorCode::NotAdmitted,
            "the token grants this operation within a bound, and the input is not one JSON value",
        )),
    };
    match checked {
        Ok(()) => Ok(()),
        Err(r) => Err(refuse(g.rec, g.adm, cx, r, Some(call), true).await),
    }
}

/// The request's credential: exactly one `Authorization: Bearer …` header.
fn token(parts: &http::request::Parts) -> Presented {
    let mut values = parts.headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Presented::None;
    };
    if values.next().is_some() {
        return Presented::Unusable("more than one Authorization header");
    }
    let Ok(text) = value.to_str() else {
        return Presented::Unusable("the Authorization header is not text");
    };
    match text.split_once(' ') {
        Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") && !t.trim().is_empty() => {
            Presented::Bearer(t.trim().to_owned())
        }
        _ => Presented::Unusable("the Authorization header is not a Bearer token"),
    }
}

/// A token naming a `kid` the keys in force lack: the issuers' JWKS URLs are looked at again
/// before it is judged (each at most once per `jwks_refresh.min`, however many such tokens).
async fn keys_for(adm: &AdmissionState, presented: &Presented) {
    if adm.urls.is_empty() {
        return;
    }
    if let Presented::Bearer(t) = presented {
        if admission::kid_of(t).is_some_and(|kid| !adm.keys.load().has(&kid)) {
            jwks_url::refresh_for_unknown_kid(adm).await;
        }
    }
}

fn verified(
    adm: &AdmissionState,
    enf: &Enforcement,
    presented: &Presented,
) -> Result<Arc<Admitted>, Refusal> {
    let token = match presented {
        Presented::Bearer(t) => t.as_str(),
        Presented::None => {
            return Err(Refusal::new(
                ErrorCode::TokenInvalid,
                "this operation needs an access token (Authorization: Bearer)",
            ))
        }
        Presented::Unusable(why) => return Err(Refusal::new(ErrorCode::TokenInvalid, *why)),
    };
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

/// The `scope` a 403's step-up challenge names: the authorization details type a token must
/// carry here (the metadata's `authorization_details_types_supported`); the details
/// themselves are in the problem body, since no scope string can carry a contract digest.
pub const STEP_UP_SCOPE: &str = palisade_rich::admission::grant::DETAILS_TYPE;

/// A receipted refusal with the headers RFC 6750 and RFC 9728 name: no error code when no
/// token was presented, `invalid_token` for a bad one, `insufficient_authorization_details`
/// (with what to ask for) for one that does not admit the call.
async fn refuse(
    rec: Recorder<'_>,
    adm: &AdmissionState,
    cx: &WriteContext,
    r: Refusal,
    call: Option<Call<'_>>,
    presented: bool,
) -> Refused {
    let metadata = metadata::url(adm);
    let (extra, challenge) = if !presented {
        (
            Vec::new(),
            format!("Bearer resource_metadata=\"{metadata}\""),
        )
    } else if let (ErrorCode::NotAdmitted, Some(call)) = (r.code, call) {
        // Two challenges: RFC 6750's `insufficient_scope` first (what MCP clients step up
        // on: the scope to ask for and where the metadata is, RFC 9728 §5.1), then the RICH
        // one, whose `authorization_details` are in the problem body.
        (
            vec![("authorization_details", admission::needed(call))],
            format!(
                "Bearer error=\"insufficient_scope\", scope=\"{STEP_UP_SCOPE}\", \
                 resource_metadata=\"{metadata}\", \
                 Bearer error=\"insufficient_authorization_details\", resource_metadata=\"{metadata}\""
            ),
        )
    } else {
        (
            Vec::new(),
            format!("Bearer error=\"invalid_token\", resource_metadata=\"{metadata}\""),
        )
    };
    let evidence = receipts::Evidence::with_extra(&extra);
    let refused = receipts::record(rec, r, cx, evidence).await;
    match HeaderValue::from_str(&challenge) {
        Ok(v) => refused.with_header(header::WWW_AUTHENTICATE, v),
        Err(_) => refused,
    }
}
