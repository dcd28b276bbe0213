//! Ed25519 keys, key ids and the trust store of lease issuers.
//!
//! A key id (`kid`) is `sha256:` + the hex SHA-256 of the raw 32-byte public key (SPEC §5.1), so
//! it can be recomputed from the key and never has to be trusted on its own. All verification in
//! Palisade goes through [`TrustedKey::verify`], which uses `verify_strict`: malleable signatures
//! (non-canonical `S`), small-order `R` and small-order ("weak") public keys are refused.
//!
//! Reading the PEM and issuer files is the caller's job; this module only parses their bytes.

use std::collections::HashMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};

use crate::digest::Sha256Digest;

pub mod batch;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("not an Ed25519 PKCS#8 PEM private key")]
    BadPrivateKeyPem,
    #[error("public key must be 32 bytes of base64url")]
    BadPublicKeyEncoding,
    #[error("public key is not a valid Ed25519 point")]
    InvalidPoint,
    #[error("public key has small order (weak key)")]
    WeakKey,
    #[error("kid does not match the SHA-256 of the public key")]
    KidMismatch,
    #[error("issuers file: {0}")]
    IssuersFile(String),
    #[error("two issuers share the kid {0}")]
    DuplicateKid(String),
}

/// The `kid` of a public key: `sha256:<hex of SHA-256(raw key)>`.
pub fn kid_of(key: &VerifyingKey) -> String {
    Sha256Digest::of(key.as_bytes()).to_string()
}

/// A private key able to sign leases and receipts, with its `kid` computed once.
pub struct KeyPair {
    signing: SigningKey,
    kid: String,
}

impl KeyPair {
    pub fn from_seed(seed: [u8; 32]) -> Self {
        let signing = SigningKey::from_bytes(&seed);
        let kid = kid_of(&signing.verifying_key());
        Self { signing, kid }
    }

    /// Parses a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`) Ed25519 key.
    pub fn from_pkcs8_pem(pem: &str) -> Result<Self, KeyError> {
        let signing = SigningKey::from_pkcs8_pem(pem).map_err(|_| KeyError::BadPrivateKeyPem)?;
        Ok(Self::from_seed(signing.to_bytes()))
    }

    /// PKCS#8 v1 (RFC 5208; RFC 8410 §7), as `openssl genpkey -algorithm ed25519` writes it:
    /// the private key alone. ed25519-dalek's own encoding is v2 (RFC 5958, the public key
    /// attached), which OpenSSL 3 and pyca/cryptography refuse ("extra data"). Both forms are
    /// read.
    pub fn to_pkcs8_pem(&self) -> String {
        ed25519_dalek::pkcs8::KeypairBytes {
            secret_key: self.signing.to_bytes(),
            public_key: None,
        }
        .to_pkcs8_pem(Default::default())
        .expect("encoding a valid Ed25519 key as PKCS#8 cannot fail")
        .to_string()
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn public(&self) -> VerifyingKey {
        self.signing.verifying_key()
    }

    /// The public key as unpadded base64url, the form issuer files and `keygen` use.
    pub fn public_b64(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.public().as_bytes())
    }

    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.signing.sign(message).to_bytes()
    }

    /// This key as a trusted verifier (the sidecar trusts its own grants and receipts).
    pub fn trusted(&self, name: &str) -> TrustedKey {
        TrustedKey {
            key: self.public(),
            kid: self.kid.clone(),
            name: name.to_owned(),
        }
    }
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("KeyPair")
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// A public key allowed to sign leases.
#[derive(Debug, Clone)]
pub struct TrustedKey {
    key: VerifyingKey,
    kid: String,
    pub name: String,
}

impl TrustedKey {
    /// Builds a trusted key from raw bytes, refusing invalid and small-order points.
    pub fn from_bytes(raw: &[u8; 32], name: &str) -> Result<Self, KeyError> {
        let key = VerifyingKey::from_bytes(raw).map_err(|_| KeyError::InvalidPoint)?;
        if key.is_weak() {
            return Err(KeyError::WeakKey);
        }
        Ok(Self {
            kid: kid_of(&key),
            key,
            name: name.to_owned(),
        })
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// Strict Ed25519 verification (RFC 8032 §5.1.7 plus the cofactorless, canonical-encoding
    /// rules of `verify_strict`).
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let sig = Signature::from_bytes(signature);
        self.key.verify_strict(message, &sig).is_ok()
    }
}

/// The keys whose leases this sidecar accepts: its own plus `trust.issuers`.
#[derive(Debug, Clone, Default)]
pub struct TrustStore {
    by_kid: HashMap<String, TrustedKey>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IssuerEntry {
    kid: String,
    public_key: String,
    #[serde(default)]
    name: String,
}

impl TrustStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, key: TrustedKey) -> Result<(), KeyError> {
        if self.by_kid.contains_key(key.kid()) {
            return Err(KeyError::DuplicateKid(key.kid().to_owned()));
        }
        self.by_kid.insert(key.kid().to_owned(), key);
        Ok(())
    }

    pub fn get(&self, kid: &str) -> Option<&TrustedKey> {
        self.by_kid.get(kid)
    }

    pub fn len(&self) -> usize {
        self.by_kid.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_kid.is_empty()
    }

    /// Adds the issuers of a `trust.issuers` file:
    /// `[{"kid":"sha256:…","public_key":"<base64url 32 bytes>","name":"…"}]`.
    /// Each `kid` must be the digest of its key, so a typo cannot alias another key.
    pub fn extend_from_issuers_json(&mut self, bytes: &[u8]) -> Result<(), KeyError> {
        let entries: Vec<IssuerEntry> =
            serde_json::from_slice(bytes).map_err(|e| KeyError::IssuersFile(e.to_string()))?;
        for entry in entries {
            let raw = URL_SAFE_NO_PAD
                .decode(entry.public_key.trim_end_matches('='))
                .map_err(|_| KeyError::BadPublicKeyEncoding)?;
            let raw: [u8; 32] = raw.try_into().map_err(|_| KeyError::BadPublicKeyEncoding)?;
            let key = TrustedKey::from_bytes(&raw, &entry.name)?;
            if key.kid() != entry.kid {
                return Err(KeyError::KidMismatch);
            }
            self.insert(key)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trips_and_kid_is_the_key_digest() {
        let k = KeyPair::from_seed([7; 32]);
        let pem = k.to_pkcs8_pem();
        let back = KeyPair::from_pkcs8_pem(&pem).unwrap();
        // v1: version 0, no public key (RFC 8410 §10.3's example is this exact shape).
        let der = base64::engine::general_purpose::STANDARD
            .decode(
                pem.lines()
                    .filter(|l| !l.starts_with("-----"))
                    .collect::<String>(),
            )
            .unwrap();
        assert_eq!(der.len(), 48);
        assert_eq!(
            &der[..16],
            b"\x30\x2e\x02\x01\x00\x30\x05\x06\x03\x2b\x65\x70\x04\x22\x04\x20"
        );
        // A v2 key (public key attached, as earlier builds wrote) still loads.
        let v2 = k.signing.to_pkcs8_pem(Default::default()).unwrap();
        assert_eq!(KeyPair::from_pkcs8_pem(&v2).unwrap().kid(), k.kid());
        assert_eq!(back.kid(), k.kid());
        assert_eq!(k.kid(), Sha256Digest::of(k.public().as_bytes()).to_string());
        assert!(!format!("{k:?}").contains("signing"));
        assert_eq!(
            KeyPair::from_pkcs8_pem("not a pem").unwrap_err(),
            KeyError::BadPrivateKeyPem
        );
    }

    #[test]
    fn issuers_file_is_checked() {
        let k = KeyPair::from_seed([9; 32]);
        let good = format!(
            r#"[{{"kid":"{}","public_key":"{}","name":"agent-gw"}}]"#,
            k.kid(),
            k.public_b64()
        );
        let mut ts = TrustStore::new();
        ts.extend_from_issuers_json(good.as_bytes()).unwrap();
        assert_eq!(ts.get(k.kid()).unwrap().name, "agent-gw");
        assert_eq!(
            ts.extend_from_issuers_json(good.as_bytes()).unwrap_err(),
            KeyError::DuplicateKid(k.kid().to_owned())
        );

        let wrong_kid = format!(
            r#"[{{"kid":"sha256:{}","public_key":"{}"}}]"#,
            "0".repeat(64),
            k.public_b64()
        );
        assert_eq!(
            TrustStore::new()
                .extend_from_issuers_json(wrong_kid.as_bytes())
                .unwrap_err(),
            KeyError::KidMismatch
        );
        // The identity point (all-zero y = 1 encoding) has small order.
        let mut identity = [0u8; 32];
        identity[0] = 1;
        assert_eq!(
            TrustedKey::from_bytes(&identity, "x").unwrap_err(),
            KeyError::WeakKey
        );
    }
}
