//! SHA-256 digests and their three spellings.
//!
//! PTCL writes `sha256:<hex>`, RICH writes `sha-256:<hex>`, and RFC 6920 names the same bytes
//! `ni:///sha-256;<base64url>`. One type holds the 32 bytes; parsing accepts every spelling and
//! formatting picks one explicitly, so two spellings of one digest always compare equal.

use std::fmt;
use std::str::FromStr;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use sha2::{Digest as _, Sha256};

/// The 32 bytes of a SHA-256 digest.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256Digest(pub [u8; 32]);

/// How a digest is written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spelling {
    /// `sha256:<hex>` (PTCL leases and receipts).
    Sha256,
    /// `sha-256:<hex>` (RICH lockfiles and drift events).
    ShaDash256,
    /// `ni:///sha-256;<base64url>` (RFC 6920).
    Ni,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DigestError {
    #[error("digest must start with `sha256:`, `sha-256:` or `ni:///sha-256;`")]
    UnknownAlgorithm,
    #[error("digest hex must be 64 lowercase hexadecimal characters")]
    BadHex,
    #[error("ni digest value must be 43 base64url characters without padding")]
    BadBase64,
}

impl Sha256Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self(Sha256::digest(bytes).into())
    }

    /// The digest of zero bytes: PTCL's "absent" pre-image and the first receipt's `prev`.
    pub fn empty() -> Self {
        Self::of(b"")
    }

    /// The digest of the JCS form of `value` (RFC 8785 then SHA-256).
    pub fn of_json(value: &serde_json::Value) -> Self {
        Self::of(&crate::canon::to_vec(value))
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    pub fn spelled(&self, spelling: Spelling) -> String {
        match spelling {
            Spelling::Sha256 => format!("sha256:{}", self.to_hex()),
            Spelling::ShaDash256 => format!("sha-256:{}", self.to_hex()),
            Spelling::Ni => format!("ni:///sha-256;{}", URL_SAFE_NO_PAD.encode(self.0)),
        }
    }

    /// Parses only the `sha256:` spelling with lowercase hex, as PTCL lease fields require.
    pub fn parse_ptcl(s: &str) -> Result<Self, DigestError> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or(DigestError::UnknownAlgorithm)?;
        Self::from_lower_hex(hex)
    }

    fn from_lower_hex(h: &str) -> Result<Self, DigestError> {
        if h.len() != 64 || !h.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(DigestError::BadHex);
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(h, &mut out).map_err(|_| DigestError::BadHex)?;
        Ok(Self(out))
    }
}

impl FromStr for Sha256Digest {
    type Err = DigestError;

    /// Accepts `sha256:<hex>`, `sha-256:<hex>` and `ni://[authority]/sha-256;<base64url>`.
    fn from_str(s: &str) -> Result<Self, DigestError> {
        if let Some(h) = s
            .strip_prefix("sha256:")
            .or_else(|| s.strip_prefix("sha-256:"))
        {
            return Self::from_lower_hex(h);
        }
        if let Some(rest) = s.strip_prefix("ni://") {
            // RFC 6920 §3: ni://[authority]/alg;val[?query]. The authority only says where
            // the object may be found; it does not change the digest.
            let (_, path) = rest.split_once('/').ok_or(DigestError::UnknownAlgorithm)?;
            let path = path.split('?').next().unwrap_or(path);
            let b64 = path
                .strip_prefix("sha-256;")
                .ok_or(DigestError::UnknownAlgorithm)?;
            let bytes = URL_SAFE_NO_PAD
                .decode(b64)
                .map_err(|_| DigestError::BadBase64)?;
            let arr: [u8; 32] = bytes.try_into().map_err(|_| DigestError::BadBase64)?;
            return Ok(Self(arr));
        }
        Err(DigestError::UnknownAlgorithm)
    }
}

/// `sha256:<hex>`, the PTCL spelling.
impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.to_hex())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SHA-256("") from FIPS 180-2 examples.
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn every_spelling_parses_to_the_same_digest() {
        let d = Sha256Digest::empty();
        assert_eq!(d.to_hex(), EMPTY);
        for spelling in [Spelling::Sha256, Spelling::ShaDash256, Spelling::Ni] {
            let s = d.spelled(spelling);
            assert_eq!(s.parse::<Sha256Digest>().unwrap(), d, "{s}");
        }
        assert_eq!(
            d.spelled(Spelling::Ni),
            "ni:///sha-256;47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        // RFC 6920 allows an authority and query parameters.
        assert_eq!(
            "ni://example.com/sha-256;47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU?ct=text/plain"
                .parse::<Sha256Digest>()
                .unwrap(),
            d
        );
    }

    #[test]
    fn malformed_digests_are_refused() {
        let rows = [
            ("md5:abcd", DigestError::UnknownAlgorithm),
            ("sha256:abc", DigestError::BadHex),
            (
                &*format!("sha256:{}", EMPTY.to_uppercase()),
                DigestError::BadHex,
            ),
            ("ni:///sha-256;AAAA", DigestError::BadBase64),
            ("ni:///md5;AAAA", DigestError::UnknownAlgorithm),
        ];
        for (input, want) in rows {
            assert_eq!(input.parse::<Sha256Digest>(), Err(want), "{input}");
        }
        assert_eq!(
            Sha256Digest::parse_ptcl(&format!("sha-256:{EMPTY}")),
            Err(DigestError::UnknownAlgorithm)
        );
    }
}
