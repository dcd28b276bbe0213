//! EIP-712 typed-data hashing for structs of atomic fields, and signer recovery.
//!
//! The AIP-2 and AIP-2.1 messages are flat structs of `string`, `bytes32`, `uint8`, `uint256`
//! and (in the domain) `address` fields, so this encoder covers exactly those and refuses any
//! other type at compile time of the type table (a `const` list), not at request time:
//!
//! ```text
//! typeHash   = keccak256("Name(type1 name1,type2 name2,…)")
//! hashStruct = keccak256(typeHash ‖ enc(v1) ‖ enc(v2) ‖ …)      enc: 32 bytes per field
//! digest     = keccak256(0x19 ‖ 0x01 ‖ hashStruct(domain) ‖ hashStruct(message))
//! ```
//! `string` encodes as the keccak256 of its UTF-8 bytes, `bytes32` as itself, `uintN` and
//! `address` left-padded big-endian. Recovery takes a 65-byte `r ‖ s ‖ v` signature, refuses
//! a high `s` (the malleable twin of every valid signature, EIP-2) and `v` other than 27/28
//! (or 0/1), and returns the signer's 20-byte address.

use k256::ecdsa::{RecoveryId, Signature, VerifyingKey};
use sha3::{Digest, Keccak256};

/// Keccak-256 (the pre-standard SHA-3 padding Ethereum uses).
pub fn keccak256(data: &[u8]) -> [u8; 32] {
    Keccak256::digest(data).into()
}

/// An EIP-712 atomic type this encoder supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomic {
    String,
    Bytes32,
    Uint8,
    Uint256,
    Address,
}

impl Atomic {
    fn name(self) -> &'static str {
        match self {
            Atomic::String => "string",
            Atomic::Bytes32 => "bytes32",
            Atomic::Uint8 => "uint8",
            Atomic::Uint256 => "uint256",
            Atomic::Address => "address",
        }
    }
}

/// A struct type: its name and its fields in declaration order.
#[derive(Debug)]
pub struct StructType {
    pub name: &'static str,
    pub fields: &'static [(&'static str, Atomic)],
}

/// A field's value, already parsed from the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field<'a> {
    Str(&'a str),
    Bytes32([u8; 32]),
    /// Any `uintN` up to 64 bits (timestamps, nonces, chain ids, decimals).
    Uint(u64),
    Address([u8; 20]),
}

impl StructType {
    /// `Name(type1 name1,…)`.
    pub fn encode_type(&self) -> String {
        let fields: Vec<String> = self
            .fields
            .iter()
            .map(|(n, t)| format!("{} {n}", t.name()))
            .collect();
        format!("{}({})", self.name, fields.join(","))
    }

    pub fn type_hash(&self) -> [u8; 32] {
        keccak256(self.encode_type().as_bytes())
    }

    /// `hashStruct`; `None` if `values` do not match the fields one for one in kind (a bug in
    /// the caller, never input: values are built from a checked message).
    pub fn hash(&self, values: &[Field<'_>]) -> Option<[u8; 32]> {
        if values.len() != self.fields.len() {
            return None;
        }
        let mut buf = Vec::with_capacity(32 * (values.len() + 1));
        buf.extend_from_slice(&self.type_hash());
        for ((_, kind), value) in self.fields.iter().zip(values) {
            let mut word = [0u8; 32];
            match (kind, value) {
                (Atomic::String, Field::Str(s)) => word = keccak256(s.as_bytes()),
                (Atomic::Bytes32, Field::Bytes32(b)) => word = *b,
                (Atomic::Uint8, Field::Uint(n)) if *n <= u64::from(u8::MAX) => {
                    word[24..].copy_from_slice(&n.to_be_bytes())
                }
                (Atomic::Uint256, Field::Uint(n)) => word[24..].copy_from_slice(&n.to_be_bytes()),
                (Atomic::Address, Field::Address(a)) => word[12..].copy_from_slice(a),
                _ => return None,
            }
            buf.extend_from_slice(&word);
        }
        Some(keccak256(&buf))
    }
}

/// `EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)`.
pub const DOMAIN: StructType = StructType {
    name: "EIP712Domain",
    fields: &[
        ("name", Atomic::String),
        ("version", Atomic::String),
        ("chainId", Atomic::Uint256),
        ("verifyingContract", Atomic::Address),
    ],
};

/// The domain separator of a `{name, version, chainId, verifyingContract}` domain.
pub fn domain_separator(name: &str, version: &str, chain_id: u64, contract: [u8; 20]) -> [u8; 32] {
    DOMAIN
        .hash(&[
            Field::Str(name),
            Field::Str(version),
            Field::Uint(chain_id),
            Field::Address(contract),
        ])
        .unwrap_or([0; 32])
}

/// The digest a signer signs: `keccak256(0x19 0x01 ‖ domainSeparator ‖ hashStruct)`.
pub fn signing_digest(domain_separator: &[u8; 32], struct_hash: &[u8; 32]) -> [u8; 32] {
    let mut buf = [0u8; 66];
    buf[0] = 0x19;
    buf[1] = 0x01;
    buf[2..34].copy_from_slice(domain_separator);
    buf[34..].copy_from_slice(struct_hash);
    keccak256(&buf)
}

/// Why a signature does not yield a signer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoverError {
    /// `r` or `s` is zero or not below the group order.
    Malformed,
    /// `s` is in the upper half of the order: the malleable twin of a valid signature.
    HighS,
    /// `v` is not 27, 28, 0 or 1.
    RecoveryId,
    /// No public key recovers from it.
    NoKey,
}

/// The address that signed `digest` with the 65-byte `r ‖ s ‖ v` signature.
pub fn recover(digest: &[u8; 32], signature: &[u8; 65]) -> Result<[u8; 20], RecoverError> {
    let sig = Signature::from_slice(&signature[..64]).map_err(|_| RecoverError::Malformed)?;
    if sig.normalize_s().is_some() {
        return Err(RecoverError::HighS);
    }
    let v = match signature[64] {
        27 | 28 => signature[64] - 27,
        0 | 1 => signature[64],
        _ => return Err(RecoverError::RecoveryId),
    };
    let id = RecoveryId::from_byte(v).ok_or(RecoverError::RecoveryId)?;
    let key =
        VerifyingKey::recover_from_prehash(digest, &sig, id).map_err(|_| RecoverError::NoKey)?;
    Ok(address_of(&key))
}

/// `signature` with its recovery byte as 27 or 28: the one spelling of a signature that
/// [`recover`] accepts as 0/1 or 27/28 (with high-s refused, no other spelling of the same
/// signature recovers). Other bytes of `v` are left as they are ([`recover`] refuses them).
pub fn with_canonical_v(signature: &[u8; 65]) -> [u8; 65] {
    let mut out = *signature;
    if let v @ (0 | 1) = out[64] {
        out[64] = v + 27;
    }
    out
}

/// The Ethereum address of a public key: the last 20 bytes of the keccak256 of its
/// uncompressed point without the `0x04` prefix.
pub fn address_of(key: &VerifyingKey) -> [u8; 20] {
    let point = key.to_encoded_point(false);
    let hash = keccak256(&point.as_bytes()[1..]);
    let mut out = [0u8; 20];
    out.copy_from_slice(&hash[12..]);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k256::ecdsa::SigningKey;

    /// The EIP-712 reference example (`../shared/testdata/eip712/eip712_mail_example.json`):
    /// its domain separator, which covers every atomic kind here but `bytes32`.
    #[test]
    fn mail_example_domain_separator() {
        let contract: [u8; 20] = hex::decode("CcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC")
            .unwrap()
            .try_into()
            .unwrap();
        let sep = domain_separator("Ether Mail", "1", 1, contract);
        assert_eq!(
            hex::encode(sep),
            "f2cee375fa42b42143804025fc449deafd50cc031ca257e0b194a650a912090f"
        );
    }

    #[test]
    fn recovery_refuses_high_s_and_bad_v() {
        let key = SigningKey::from_slice(&keccak256(b"cow")).unwrap();
        let digest = keccak256(b"message");
        let (sig, id) = key.sign_prehash_recoverable(&digest).unwrap();
        let sig = sig.normalize_s().unwrap_or(sig);
        let mut raw = [0u8; 65];
        raw[..64].copy_from_slice(&sig.to_bytes());
        // The id belongs to the normalised signature only if normalisation did nothing.
        let v = if key.sign_prehash_recoverable(&digest).unwrap().0 == sig {
            id.to_byte()
        } else {
            id.to_byte() ^ 1
        };
        raw[64] = 27 + v;
        let expected = address_of(key.verifying_key());
        assert_eq!(recover(&digest, &raw).unwrap(), expected);
        assert_eq!(
            hex::encode(expected),
            "cd2a3d9f938e13cd947ec05abc7fe734df8dd826",
            "keccak256(\"cow\") is the Mail example's signer"
        );

        // The malleable twin: s' = n − s, v flipped. Same signer, refused.
        let high = Signature::from_scalars(sig.r().to_bytes(), (-*sig.s()).to_bytes()).unwrap();
        let mut twin = raw;
        twin[..64].copy_from_slice(&high.to_bytes());
        twin[64] = 27 + (v ^ 1);
        assert_eq!(recover(&digest, &twin), Err(RecoverError::HighS));

        let mut bad_v = raw;
        bad_v[64] = 29;
        assert_eq!(recover(&digest, &bad_v), Err(RecoverError::RecoveryId));
        let mut zero = raw;
        zero[..32].fill(0);
        assert_eq!(recover(&digest, &zero), Err(RecoverError::Malformed));
        // Another digest recovers someone else.
        assert_ne!(recover(&keccak256(b"other"), &raw).ok(), Some(expected));
    }

    #[test]
    fn field_kinds_must_match_the_type() {
        let t = StructType {
            name: "T",
            fields: &[("a", Atomic::Uint8)],
        };
        assert_eq!(t.encode_type(), "T(uint8 a)");
        assert!(t.hash(&[Field::Uint(255)]).is_some());
        assert!(t.hash(&[Field::Uint(256)]).is_none());
        assert!(t.hash(&[Field::Str("x")]).is_none());
        assert!(t.hash(&[]).is_none());
    }
}
