//! OAuth 2.0 access tokens as JWTs (RFC 9068), verified against the issuers' keys (JWKS files,
//! RFC 7517), in this order, each failure a 401 `ERR_TOKEN_INVALID`:
//!
//! ```text
//! size ≤ MAX_TOKEN → header: typ at+jwt, alg one of the configured (EdDSA, ES256, RS256),
//!   kid of a known key whose type fits alg (and whose own alg, if it names one, is alg)
//!   → signature (jsonwebtoken, RustCrypto) → iss one of the configured, aud names this
//!   resource → exp (required), nbf, iat against the clock ± skew
//! ```
//! `none` and HMAC are impossible by construction: only asymmetric keys are ever made from a
//! JWKS (a file with an `oct` key is refused), so no public key can serve as an HMAC secret.
//! The clock is an argument: the crate's own time checks are off.

use std::collections::HashMap;

use base64::Engine as _;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, KeyAlgorithm, PublicKeyUse};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use palisade_policy::digest::Sha256Digest;
use palisade_policy::{ErrorCode, Refusal};

/// Longest token accepted (a JWT with a few `authorization_details` is well under 4 KiB).
pub const MAX_TOKEN: usize = 16 << 10;
/// Smallest RSA modulus accepted in a JWKS, in bits.
pub const MIN_RSA_BITS: usize = 2048;

/// An algorithm the configuration may allow.
pub fn algorithm(name: &str) -> Option<Algorithm> {
    match name {
        "EdDSA" => Some(Algorithm::EdDSA),
        "ES256" => Some(Algorithm::ES256),
        "RS256" => Some(Algorithm::RS256),
        _ => None,
    }
}

struct Key {
    decoding: DecodingKey,
    /// The one algorithm this key verifies (its type, and its own `alg` if it names one).
    alg: Algorithm,
}

/// The issuers' public keys, by `kid`.
#[derive(Default)]
pub struct Keys {
    by_kid: HashMap<String, Key>,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kids: Vec<&String> = self.by_kid.keys().collect();
        kids.sort();
        f.debug_struct("Keys").field("kids", &kids).finish()
    }
}

impl Keys {
    /// Reads JWKS documents (`{"keys": […]}`), named for the problems they report. Every
    /// key needs a `kid`, unique across the files; private members, symmetric keys, curves
    /// other than Ed25519 and P-256, and RSA under 2048 bits are refused.
    pub fn from_jwks(files: &[(String, Vec<u8>)]) -> Result<Keys, Vec<String>> {
        let mut keys = Keys::default();
        let mut problems = Vec::new();
        for (name, bytes) in files {
            let doc: Value = match palisade_policy::json::parse(bytes, 16) {
                Ok(v) => v,
                Err(e) => {
                    problems.push(format!("{name}: not one I-JSON document: {e}"));
                    continue;
                }
            };
            let Some(list) = doc.get("keys").and_then(Value::as_array) else {
                problems.push(format!("{name}: expected {{\"keys\": [...]}}"));
                continue;
            };
            for (i, raw) in list.iter().enumerate() {
                match key_of(raw) {
                    Ok((kid, key)) => {
                        if keys.by_kid.insert(kid.clone(), key).is_some() {
                            problems.push(format!("{name}: keys[{i}]: kid {kid:?} appears twice"));
                        }
                    }
                    Err(why) => problems.push(format!("{name}: keys[{i}]: {why}")),
                }
            }
        }
        if problems.is_empty() {
            Ok(keys)
        } else {
            Err(problems)
        }
    }

    pub fn len(&self) -> usize {
        self.by_kid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_kid.is_empty()
    }
}

fn key_of(raw: &Value) -> Result<(String, Key), String> {
    let obj = raw.as_object().ok_or("a key must be an object")?;
    for private in ["d", "p", "q", "dp", "dq", "qi", "k"] {
        if obj.contains_key(private) {
            return Err(format!(
                "has the private member {private:?}: a JWKS here holds public keys only"
            ));
        }
    }
    let jwk: Jwk = serde_json::from_value(raw.clone()).map_err(|e| format!("not a JWK: {e}"))?;
    let kid = jwk
        .common
        .key_id
        .clone()
        .filter(|k| !k.is_empty())
        .ok_or("every key needs a kid (tokens name their key by it)")?;
    if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
        return Err("its use is not \"sig\"".into());
    }
    let alg = match &jwk.algorithm {
        AlgorithmParameters::OctetKeyPair(p) if p.curve == EllipticCurve::Ed25519 => {
            Algorithm::EdDSA
        }
        AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => Algorithm::ES256,
        AlgorithmParameters::RSA(p) => {
            let n = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p.n.as_bytes())
                .map_err(|_| "n is not base64url")?;
            let bits = n.len() * 8 - n.first().map_or(8, |b| b.leading_zeros() as usize);
            if bits < MIN_RSA_BITS {
                return Err(format!(
                    "an RSA modulus of {bits} bits (at least {MIN_RSA_BITS})"
                ));
            }
            Algorithm::RS256
        }
        AlgorithmParameters::OctetKey(_) => {
            return Err("a symmetric (oct) key: tokens are verified with public keys only".into())
        }
        _ => return Err("only Ed25519 (OKP), P-256 (EC) and RSA keys are accepted".into()),
    };
    if let Some(own) = &jwk.common.key_algorithm {
        let same = matches!(
            (own, alg),
            (KeyAlgorithm::EdDSA, Algorithm::EdDSA)
                | (KeyAlgorithm::ES256, Algorithm::ES256)
                | (KeyAlgorithm::RS256, Algorithm::RS256)
        );
        if !same {
            return Err(format!("its alg {own:?} does not fit its key type"));
        }
    }
    let decoding = DecodingKey::from_jwk(&jwk).map_err(|e| format!("unusable key: {e}"))?;
    Ok((kid, Key { decoding, alg }))
}

/// What the configuration requires of every token.
#[derive(Debug, Clone)]
pub struct Rules {
    pub issuers: Vec<String>,
    /// This sidecar's resource identifier: the token's `aud` must name it.
    pub audience: String,
    pub algorithms: Vec<Algorithm>,
    pub skew_s: u64,
}

/// A verified token's claims that admission and receipts use.
#[derive(Debug, Clone)]
pub struct Verified {
    pub issuer: String,
    /// `sub`, when the token has one.
    pub subject: Option<String>,
    pub client_id: Option<String>,
    /// Unix seconds.
    pub expires_at: u64,
    /// The `authorization_details` claim, as the token carries it (absent: `Null`).
    pub authorization_details: Value,
    /// SHA-256 of the token's text: its name in caches, receipts and events (never the
    /// token itself).
    pub digest: Sha256Digest,
}

impl Verified {
    /// Who acted, as receipts and drift events name them: `sub:sha256:…` over the issuer and
    /// the subject (or the `client_id` when there is no subject), never the token; a token
    /// with neither is named by its own digest (`token:sha256:…`).
    pub fn caller(&self) -> String {
        match self.subject.as_deref().or(self.client_id.as_deref()) {
            Some(who) => format!(
                "sub:{}",
                Sha256Digest::of(format!("{}\0{who}", self.issuer).as_bytes())
            ),
            None => format!("token:{}", self.digest),
        }
    }
}

fn invalid(detail: impl Into<std::borrow::Cow<'static, str>>) -> Refusal {
    Refusal::new(ErrorCode::TokenInvalid, detail)
}

/// The `kid` a token's header names, read without verifying anything: whether the keys in
/// force know it decides if an issuer's JWKS URL is worth fetching again.
pub fn kid_of(token: &str) -> Option<String> {
    if token.len() > MAX_TOKEN {
        return None;
    }
    jsonwebtoken::decode_header(token).ok()?.kid
}

impl Keys {
    /// Whether a key of this `kid` is in force.
    pub fn has(&self, kid: &str) -> bool {
        self.by_kid.contains_key(kid)
    }
}

/// Verifies `token` (the bearer credential, without `Bearer `) at `now_s`.
pub fn verify(token: &str, keys: &Keys, rules: &Rules, now_s: u64) -> Result<Verified, Refusal> {
    if token.len() > MAX_TOKEN {
        return Err(invalid("the token is longer than 16 KiB"));
    }
    let header =
        jsonwebtoken::decode_header(token).map_err(|_| invalid("the token is not a JWT"))?;
    // RFC 9068 §4: an access token says so, so an ID token cannot be replayed as one.
    let typ_ok = header.typ.as_deref().is_some_and(|t| {
        t.eq_ignore_ascii_case("at+jwt") || t.eq_ignore_ascii_case("application/at+jwt")
    });
    if !typ_ok {
        return Err(invalid("the token's typ is not at+jwt (RFC 9068)"));
    }
    if !rules.algorithms.contains(&header.alg) {
        return Err(invalid(
            "the token's alg is not one admission.algorithms allows",
        ));
    }
    let kid = header
        .kid
        .as_deref()
        .ok_or_else(|| invalid("the token names no kid"))?;
    let key = keys
        .by_kid
        .get(kid)
        .ok_or_else(|| invalid("the token's kid is not in the issuers' keys"))?;
    if key.alg != header.alg {
        return Err(invalid("the token's alg does not fit its key"));
    }
    let mut validation = Validation::new(header.alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<Value>(token, &key.decoding, &validation)
        .map_err(|_| invalid("the token's signature does not verify"))?;
    judge_claims(&data.claims, token, rules, now_s)
}

/// An opaque token, as its issuer's RFC 7662 introspection endpoint answered for it at
/// `now_s`: `active`, then the same claims a JWT's are held to (`iss` one of the issuers, `aud`
/// naming this resource, `exp`, `nbf`, `iat`), so a token is admitted the same way whichever
/// form it takes.
pub fn from_introspection(
    answer: &Value,
    token: &str,
    rules: &Rules,
    now_s: u64,
) -> Result<Verified, Refusal> {
    if answer.get("active") != Some(&Value::Bool(true)) {
        return Err(invalid(
            "the token is not active (its issuer's introspection says so)",
        ));
    }
    judge_claims(answer, token, rules, now_s)
}

/// Whether `token` is a JWT (three segments, a header that reads), rather than an opaque
/// token only its issuer can tell about.
pub fn is_jwt(token: &str) -> bool {
    token.len() <= MAX_TOKEN && jsonwebtoken::decode_header(token).is_ok()
}

fn judge_claims(
    claims: &Value,
    token: &str,
    rules: &Rules,
    now_s: u64,
) -> Result<Verified, Refusal> {
    let issuer = claims
        .get("iss")
        .and_then(Value::as_str)
        .filter(|i| rules.issuers.iter().any(|c| c == i))
        .ok_or_else(|| invalid("the token's iss is not one of admission.issuers"))?
        .to_owned();
    let aud_ok = match claims.get("aud") {
        Some(Value::String(a)) => *a == rules.audience,
        Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(&rules.audience)),
        _ => false,
    };
    if !aud_ok {
        return Err(invalid("the token's aud does not name this resource"));
    }
    let time = |name: &str| claims.get(name).and_then(Value::as_u64);
    let expires_at = time("exp").ok_or_else(|| invalid("the token has no exp"))?;
    if now_s > expires_at.saturating_add(rules.skew_s) {
        return Err(invalid("the token expired"));
    }
    if time("nbf").is_some_and(|nbf| nbf > now_s.saturating_add(rules.skew_s)) {
        return Err(invalid("the token is not valid yet (nbf)"));
    }
    if time("iat").is_some_and(|iat| iat > now_s.saturating_add(rules.skew_s)) {
        return Err(invalid("the token was issued in the future (iat)"));
    }
    for name in ["exp", "nbf", "iat"] {
        if claims.get(name).is_some_and(|v| v.as_u64().is_none()) {
            return Err(invalid("exp, nbf and iat must be whole seconds"));
        }
    }
    let text = |name: &str| claims.get(name).and_then(Value::as_str).map(str::to_owned);
    Ok(Verified {
        issuer,
        subject: text("sub"),
        client_id: text("client_id"),
        expires_at,
        authorization_details: claims
            .get("authorization_details")
            .cloned()
            .unwrap_or(Value::Null),
        digest: Sha256Digest::of(token.as_bytes()),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn file(keys: Value) -> Vec<(String, Vec<u8>)> {
        vec![(
            "jwks.json".into(),
            serde_json::to_vec(&json!({ "keys": keys })).unwrap(),
        )]
    }

    use serde_json::json;

    const ED_X: &str = "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo";

    #[test]
    fn jwks_files_hold_public_signing_keys_only() {
        let ok = Keys::from_jwks(&file(json!([
            {"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "a", "use": "sig", "alg": "EdDSA"}
        ])))
        .unwrap();
        assert_eq!(ok.len(), 1);
        let small_n = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode([0xc1u8; 128]);
        for (bad, why) in [
            (
                json!({"kty": "oct", "k": "c2VjcmV0", "kid": "h"}),
                "private member",
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X, "d": ED_X, "kid": "p"}),
                "private",
            ),
            (json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X}), "kid"),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "e", "use": "enc"}),
                "use",
            ),
            (
                json!({"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "m", "alg": "ES256"}),
                "alg",
            ),
            (
                json!({"kty": "RSA", "n": small_n, "e": "AQAB", "kid": "r"}),
                "1024 bits",
            ),
        ] {
            let problems = Keys::from_jwks(&file(json!([bad]))).unwrap_err();
            assert!(problems[0].contains(why), "{why}: {problems:?}");
        }
        let twice = file(json!([
            {"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "a"},
            {"kty": "OKP", "crv": "Ed25519", "x": ED_X, "kid": "a"}
        ]));
        assert!(Keys::from_jwks(&twice).unwrap_err()[0].contains("twice"));
        assert!(Keys::from_jwks(&[("x".into(), b"{".to_vec())]).is_err());
    }

    #[test]
    fn only_the_three_algorithms_are_configurable() {
        assert!(algorithm("EdDSA").is_some() && algorithm("ES256").is_some());
        for a in ["none", "HS256", "RS512", "eddsa"] {
            assert!(algorithm(a).is_none(), "{a}");
        }
    }

    #[test]
    fn garbage_is_refused_before_any_key_is_looked_at() {
        let rules = Rules {
            issuers: vec!["https://as".into()],
            audience: "https://rs".into(),
            algorithms: vec![Algorithm::EdDSA],
            skew_s: 60,
        };
        let keys = Keys::default();
        for t in ["", "a.b", "a.b.c", &"x".repeat(MAX_TOKEN + 1)] {
            assert_eq!(
                verify(t, &keys, &rules, 0).unwrap_err().code,
                ErrorCode::TokenInvalid
            );
        }
    }

    #[test]
    fn an_introspection_answer_is_held_to_what_a_jwt_is() {
        let rules = Rules {
            issuers: vec!["https://as".into()],
            audience: "https://rs".into(),
            algorithms: vec![Algorithm::EdDSA],
            skew_s: 60,
        };
        let good = json!({"active": true, "iss": "https://as", "aud": ["https://rs"],
            "exp": 2_000, "sub": "agent-7", "authorization_details": [{"type": "rich_binding"}]});
        let v = from_introspection(&good, "opaque-1", &rules, 1_000).unwrap();
        assert_eq!(
            (v.expires_at, v.subject.as_deref()),
            (2_000, Some("agent-7"))
        );
        assert_eq!(v.authorization_details[0]["type"], "rich_binding");
        assert!(!is_jwt("opaque-1") && !is_jwt("a.b.c"));
        for (answer, why) in [
            (json!({"active": false}), "not active"),
            (
                json!({"active": "true", "iss": "https://as", "aud": "https://rs", "exp": 2_000}),
                "not active",
            ),
            (
                json!({"active": true, "iss": "https://other", "aud": "https://rs", "exp": 2_000}),
                "iss",
            ),
            (
                json!({"active": true, "iss": "https://as", "exp": 2_000}),
                "aud",
            ),
            (
                json!({"active": true, "iss": "https://as", "aud": "https://rs", "exp": 900}),
                "expired",
            ),
            (
                json!({"active": true, "iss": "https://as", "aud": "https://rs"}),
                "no exp",
            ),
        ] {
            let e = from_introspection(&answer, "opaque-1", &rules, 1_000).unwrap_err();
            assert!(e.detail.contains(why), "{answer}: {}", e.detail);
        }
    }
}
