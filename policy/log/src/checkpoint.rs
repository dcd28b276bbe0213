//! Checkpoints: C2SP tlog-checkpoint bodies in C2SP signed notes, signed with the sidecar's
//! Ed25519 key under the log's origin (SPEC §5.5), through `signed_note` (a port of Go's
//! `golang.org/x/mod/sumdb/note`). Verification here is strict Ed25519 (the same
//! `verify_strict` as leases), not the library's default verifier.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use signed_note::{Note, Signature, Signer, Verifier, VerifierList};

use super::error::LogError;
use super::merkle::Hash;
use palisade_core::keys::{KeyPair, TrustedKey};

/// A tree head: the log's origin, its size and its root.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub origin: String,
    pub size: u64,
    pub root: Hash,
}

impl Checkpoint {
    /// The note's text: `<origin>\n<size>\n<base64 root>\n`.
    pub fn body(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root.0)
        )
    }

    /// Reads a body as C2SP tlog-checkpoint defines it: a non-empty origin, a decimal size
    /// without leading zeros, the base64 of a 32-byte root, then optional extension lines
    /// (kept by the note, not interpreted here).
    pub fn parse_body(text: &str) -> Result<Self, LogError> {
        let bad = |why: &str| LogError::Checkpoint(why.to_owned());
        let mut lines = text.split('\n');
        let origin = lines
            .next()
            .filter(|o| !o.is_empty())
            .ok_or_else(|| bad("no origin line"))?;
        let size = lines.next().ok_or_else(|| bad("no tree size line"))?;
        if size.is_empty()
            || (size.len() > 1 && size.starts_with('0'))
            || !size.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(bad(
                "the tree size is not a decimal number without leading zeros",
            ));
        }
        let size: u64 = size
            .parse()
            .map_err(|_| bad("the tree size is out of range"))?;
        let root = lines.next().ok_or_else(|| bad("no root hash line"))?;
        let root = super::merkle::decode_hash(root).map_err(|e| bad(&format!("root hash: {e}")))?;
        if !text.ends_with('\n') {
            return Err(bad("the body does not end with a newline"));
        }
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// The log's public key as signed notes name it: the origin (key name), the key ID and the
/// Ed25519 key; written as the C2SP verifier key `<origin>+<hex id>+<base64(0x01 ‖ key)>`.
#[derive(Debug, Clone)]
pub struct LogKey {
    origin: String,
    id: u32,
    key: TrustedKey,
    raw: [u8; 32],
}

const ALG_ED25519: u8 = 0x01;

fn typed(raw: &[u8; 32]) -> Vec<u8> {
    let mut k = Vec::with_capacity(33);
    k.push(ALG_ED25519);
    k.extend_from_slice(raw);
    k
}

impl LogKey {
    /// The key of a log named `origin` whose checkpoints `raw` verifies.
    pub fn new(origin: &str, raw: [u8; 32]) -> Result<Self, LogError> {
        if !signed_note::is_key_name_valid(origin) {
            return Err(LogError::Signature(format!(
                "{origin:?} cannot name a signed-note key (no spaces or '+')"
            )));
        }
        let key = TrustedKey::from_bytes(&raw, origin)
            .map_err(|e| LogError::Signature(format!("the log's public key: {e}")))?;
        Ok(Self {
            id: signed_note::key_id(origin, &typed(&raw)),
            origin: origin.to_owned(),
            key,
            raw,
        })
    }

    /// The key of the log `origin` signed by `key`.
    pub fn of_pair(origin: &str, key: &KeyPair) -> Result<Self, LogError> {
        Self::new(origin, key.public().to_bytes())
    }

    /// Reads a verifier key `<name>+<hex id>+<base64(0x01 ‖ key)>`, checking its key ID.
    pub fn parse(vkey: &str) -> Result<Self, LogError> {
        let (name, raw) = parse_vkey(vkey, ALG_ED25519)?;
        Self::new(&name, raw)
    }

    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The verifier key string.
    pub fn vkey(&self) -> String {
        format!(
            "{}+{:08x}+{}",
            self.origin,
            self.id,
            STANDARD.encode(typed(&self.raw))
        )
    }
}

/// A witness's C2SP verifier key: type 0x04, a timestamped Ed25519 cosignature
/// (C2SP tlog-cosignature), `<name>+<hex id>+<base64(0x04 ‖ key)>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessKey {
    pub name: String,
    pub id: u32,
    pub key: [u8; 32],
}

const ALG_COSIGNATURE_V1: u8 = 0x04;

impl WitnessKey {
    pub fn parse(vkey: &str) -> Result<Self, LogError> {
        let (name, key) = parse_vkey(vkey, ALG_COSIGNATURE_V1)?;
        let mut typed = vec![ALG_COSIGNATURE_V1];
        typed.extend_from_slice(&key);
        Ok(Self {
            id: signed_note::key_id(&name, &typed),
            name,
            key,
        })
    }
}

/// A verifier key of key type `alg` with a 32-byte key: its name and key, once its key ID is
/// checked against them (`SHA-256(name ‖ 0x0A ‖ alg ‖ key)[:4]`).
fn parse_vkey(vkey: &str, alg: u8) -> Result<(String, [u8; 32]), LogError> {
    let bad = |why: &str| LogError::Signature(format!("verifier key: {why}"));
    let mut parts = vkey.trim().splitn(3, '+');
    let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(bad("not <name>+<hex id>+<base64 key>"));
    };
    if !signed_note::is_key_name_valid(name) {
        return Err(bad("its name is empty or holds a space or '+'"));
    }
    let bytes = STANDARD
        .decode(key)
        .map_err(|_| bad("the key is not base64"))?;
    let raw: [u8; 32] = match bytes.split_first() {
        Some((&a, rest)) if a == alg => rest
            .try_into()
            .map_err(|_| bad("not a 32-byte Ed25519 key"))?,
        _ => return Err(bad(&format!("not a key of type 0x{alg:02x}"))),
    };
    if id.len() != 8 || u32::from_str_radix(id, 16).ok() != Some(signed_note::key_id(name, &bytes))
    {
        return Err(bad("its key ID does not match its name and key"));
    }
    Ok((name.to_owned(), raw))
}

impl Verifier for LogKey {
    fn name(&self) -> &str {
        &self.origin
    }

    fn key_id(&self) -> u32 {
        self.id
    }

    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        <&[u8; 64]>::try_from(sig).is_ok_and(|s| self.key.verify(msg, s))
    }
}

struct NoteSigner<'a> {
    key: &'a LogKey,
    pair: &'a KeyPair,
}

impl Signer for NoteSigner<'_> {
    fn name(&self) -> &str {
        &self.key.origin
    }

    fn key_id(&self) -> u32 {
        self.key.id
    }

    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, ed25519_dalek::SignatureError> {
        Ok(self.pair.sign(msg).to_vec())
    }
}

/// Signs `checkpoint` as the log `key` names (its origin must be the checkpoint's), with
/// `pair`: the signed note's bytes.
pub fn sign(checkpoint: &Checkpoint, key: &LogKey, pair: &KeyPair) -> Result<String, LogError> {
    if checkpoint.origin != key.origin {
        return Err(LogError::Origin {
            expected: key.origin.clone(),
            found: checkpoint.origin.clone(),
        });
    }
    let body = checkpoint.body();
    let mut note =
        Note::new(body.as_bytes(), &[]).map_err(|e| LogError::Checkpoint(e.to_string()))?;
    note.add_sigs(&[&NoteSigner { key, pair }])
        .map_err(|e| LogError::Signature(e.to_string()))?;
    String::from_utf8(note.to_bytes()).map_err(|e| LogError::Checkpoint(e.to_string()))
}

/// A checkpoint whose note `key` signed, with the signatures of other keys it carried (a
/// witness's cosignatures), unverified here.
#[derive(Debug, Clone)]
pub struct Opened {
    pub checkpoint: Checkpoint,
    pub others: Vec<Signature>,
}

/// Verifies a signed note against `key`: its text, and the signatures of other keys it
/// carried (unverified).
pub fn verify_note(note: &[u8], key: &LogKey) -> Result<(String, Vec<Signature>), LogError> {
    let parsed = Note::from_bytes(note).map_err(|e| LogError::Checkpoint(e.to_string()))?;
    let known = VerifierList::new(vec![Box::new(key.clone())]);
    let (_, others) = parsed
        .verify(&known)
        .map_err(|e| LogError::Signature(e.to_string()))?;
    let text = String::from_utf8(parsed.text().to_vec())
        .map_err(|e| LogError::Checkpoint(e.to_string()))?;
    Ok((text, others))
}

/// Verifies a signed checkpoint against the log's key and reads its body.
pub fn open(note: &[u8], key: &LogKey) -> Result<Opened, LogError> {
    let (text, others) = verify_note(note, key)?;
    let checkpoint = Checkpoint::parse_body(&text)?;
    if checkpoint.origin != key.origin {
        return Err(LogError::Origin {
            expected: key.origin.clone(),
            found: checkpoint.origin,
        });
    }
    Ok(Opened { checkpoint, others })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pair() -> KeyPair {
        KeyPair::from_seed([9; 32])
    }

    #[test]
    fn a_signed_checkpoint_opens_and_a_changed_one_does_not() {
        let key = LogKey::of_pair("erp.example.com/palisade", &pair()).unwrap();
        let cp = Checkpoint {
            origin: key.origin().into(),
            size: 41880,
            root: super::super::merkle::leaf_hash(b"x"),
        };
        let note = sign(&cp, &key, &pair()).unwrap();
        assert!(note.starts_with(&cp.body()));
        assert!(note.contains("\n\n\u{2014} erp.example.com/palisade "));
        assert_eq!(open(note.as_bytes(), &key).unwrap().checkpoint, cp);
        // The verifier key round-trips and names the same key ID.
        let again = LogKey::parse(&key.vkey()).unwrap();
        assert_eq!(again.id(), key.id());
        // Another size under the same signature.
        let forged = note.replacen("41880", "41881", 1);
        assert!(matches!(
            open(forged.as_bytes(), &key),
            Err(LogError::Signature(_))
        ));
        // Another key of the same name.
        let other =
            LogKey::of_pair("erp.example.com/palisade", &KeyPair::from_seed([8; 32])).unwrap();
        assert!(open(note.as_bytes(), &other).is_err());
        // A body that is not a checkpoint.
        assert!(Checkpoint::parse_body("o\n01\nAAAA\n").is_err());
        // A witness key is type 0x04 and checks its key ID the same way; a log key is not one.
        let raw = [7u8; 32];
        let mut typed = vec![0x04];
        typed.extend_from_slice(&raw);
        let id = signed_note::key_id("witness.example", &typed);
        let vkey = format!("witness.example+{id:08x}+{}", STANDARD.encode(&typed));
        let w = WitnessKey::parse(&vkey).unwrap();
        assert_eq!((w.name.as_str(), w.id, w.key), ("witness.example", id, raw));
        assert!(
            WitnessKey::parse(&key.vkey()).is_err(),
            "a log key is not a witness key"
        );
        assert!(WitnessKey::parse(&vkey.replacen("witness", "witnesz", 1)).is_err());
    }
}
