//! Opaque access tokens (SPEC §13, RFC 7662): a bearer token that is not a JWT is asked about
//! at the issuer's introspection endpoint, as the sidecar's own client (HTTP Basic), and its
//! answer is held to what a JWT's claims are (`active`, `iss`, `aud`, `exp`, and its
//! `authorization_details` as the grant). An admitted answer is kept in the verified-token
//! cache under the token's digest until the token's `exp`, so a token is introspected once,
//! not per call; a refused one is remembered for 30 s, so a token sent again and again costs
//! the issuer one call in that time. An endpoint that does not answer is a refusal (401,
//! saying so, not remembered), never an admission.

use std::sync::Arc;

use http::{header, Request};
use palisade_policy::{ErrorCode, Refusal};
use palisade_rich::admission;
use serde_json::Value;

use super::https::call;
use crate::context::{AdmissionState, Admitted, Enforcement};

/// What `application/x-www-form-urlencoded` escapes: all but letters, digits and `*-._`
/// (the WHATWG URL standard's form set; a space is escaped as `%20`, which every decoder
/// reads).
const FORM: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'*')
    .remove(b'-')
    .remove(b'.')
    .remove(b'_');

/// Most bytes of an introspection answer.
const MAX_ANSWER: usize = 64 * 1024;

/// Before a token is judged: an opaque one is introspected (once, then cached); `Err` when its
/// issuer says it is not active, its claims do not admit it here, or the issuer cannot say.
pub async fn opaque(
    adm: &AdmissionState,
    enf: &Enforcement,
    bearer: Option<&str>,
) -> Result<(), Refusal> {
    let (Some(cfg), Some(token)) = (&adm.config.introspection, bearer) else {
        return Ok(());
    };
    if admission::is_jwt(token) {
        return Ok(());
    }
    let now_s = u64::try_from(enf.clock.now_ms() / 1000).unwrap_or(0);
    let digest = palisade_policy::digest::Sha256Digest::of(token.as_bytes());
    if adm.cached(&digest, now_s).is_some() {
        return Ok(());
    }
    if let Some(r) = adm.refused(&digest, now_s) {
        return Err(r);
    }
    let answer = ask(cfg, token).await.map_err(|why| {
        tracing::warn!(url = %cfg.url, error = %why, "token introspection failed");
        metrics::counter!(crate::telemetry::INTROSPECTIONS, "result" => "failed").increment(1);
        Refusal::new(
            ErrorCode::TokenInvalid,
            "the token is not a JWT and its issuer's introspection endpoint did not answer",
        )
    })?;
    let verified = match admission::from_introspection(&answer, token, &adm.rules, now_s) {
        Ok(v) => v,
        Err(r) => {
            metrics::counter!(crate::telemetry::INTROSPECTIONS, "result" => "refused").increment(1);
            adm.remember_refused(digest, now_s, r.clone());
            return Err(r);
        }
    };
    metrics::counter!(crate::telemetry::INTROSPECTIONS, "result" => "active").increment(1);
    let grants = admission::grant::parse(&verified.authorization_details)?;
    adm.remember(Arc::new(Admitted {
        token: verified,
        grants,
    }));
    Ok(())
}

/// POST `token=…&token_type_hint=access_token` with the client's credentials; the answer's
/// JSON.
async fn ask(cfg: &crate::config::Introspection, token: &str) -> Result<Value, String> {
    use base64::Engine as _;
    let secret = std::fs::read_to_string(&cfg.client_secret_file)
        .map_err(|e| format!("{}: {e}", cfg.client_secret_file.display()))?;
    let enc = |s: &str| percent_encoding::utf8_percent_encode(s, FORM).to_string();
    // RFC 6749 §2.3.1: the id and secret are form-encoded before they are joined.
    let basic = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        enc(&cfg.client_id),
        enc(secret.trim())
    ));
    let form = format!("token={}&token_type_hint=access_token", enc(token));
    let req = Request::post(&cfg.url)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json")
        .header(header::AUTHORIZATION, format!("Basic {basic}"))
        .body(http_body_util::Full::new(bytes::Bytes::from(form)))
        .map_err(|e| e.to_string())?;
    let (_, body) = call(req, MAX_ANSWER).await?;
    palisade_policy::json::parse(&body, 16).map_err(|e| format!("not JSON: {e}"))
}
