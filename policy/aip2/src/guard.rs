//! The quote-channel decision (seed §8.2) for one `POST …/{chainId}/{txId}` body:
//!
//! ```text
//! envelope {type, message} → message against its JSON Schema            400 ERR_QUOTE_MALFORMED
//!   → path binding: chainId, txId equal the path's; a DID's chain too    400 ERR_QUOTE_CHANNEL
//!   → chain accepted (a kernel configured for it)                        400 ERR_QUOTE_CHAIN_UNKNOWN
//!   → TTL: now ≤ expiresAt + grace, expiresAt ≤ created + max_ttl       410 ERR_QUOTE_EXPIRED / 400
//!   → EIP-712 signer = the claimed provider (consumer for counters)      401 ERR_QUOTE_SIGNATURE
//! ```
//! Cheap checks first: no signature is recovered for a message the schema, the path or the
//! clock already refuses. What is left for the caller is the dedup key and the fingerprint
//! ([`Checked`]): the nonce store is state, and state is not decided here.
//!
//! The negotiation relay (seed §6.3) posts to `/api/v1/negotiations/{txId}/messages`: the
//! same checks with the path binding the txId only ([`Channel::Relay`]); the chain is the
//! message's own and must have a kernel. The relay also takes messages in the form the
//! `agirails` Python SDK's `RelayChannel` sends them (its dataclasses as dicts: a quote's
//! snake_case member names, `justification: null`): mapped for the checks, stored as they
//! came (docs/decisions.md).

use std::collections::BTreeMap;

use serde_json::Value;

use super::eip712::{self, RecoverError};
use super::message::{self, Kind};
use palisade_core::digest::Sha256Digest;
use palisade_core::{ErrorCode, Refusal};

/// Deepest nesting a channel message may have (the schemas need 3: envelope, message,
/// justification, and its free-form `breakdown` a few more).
pub const MAX_DEPTH: usize = 16;
/// A creation time may run this far ahead of the receiver's clock (the SDK's skew
/// tolerance for `quotedAt`, `counteredAt`, `acceptedAt`).
pub const MAX_FUTURE_SKEW_S: u64 = 300;

/// What the operator configured.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The EIP-712 `verifyingContract` (the ACTP kernel) per accepted chain id.
    pub kernels: BTreeMap<u64, [u8; 20]>,
    pub grace_s: u64,
    pub max_ttl_s: u64,
}

/// Where a message was posted, and so what its members must agree with.
#[derive(Debug, Clone, Copy)]
pub enum Channel<'a> {
    /// `{quote_channel}/{chainId}/{txId}` in front of an agent.
    Quote { chain: &'a str, tx: &'a str },
    /// `/api/v1/negotiations/{txId}/messages` on the relay.
    Relay { tx: &'a str },
}

/// A `did:ethr` party of a message: its chain (the message's, when the DID names none) and
/// its address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Party {
    pub chain: u64,
    pub address: [u8; 20],
}

/// A message that may be delivered, with what the dedup store needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub kind: Kind,
    pub chain_id: u64,
    /// The message's txId, lowercase.
    pub tx_id: String,
    pub provider: Party,
    pub consumer: Party,
    /// The 65-byte signature, as `0x` + lowercase hex with `v` as 27 or 28: the relay's dedup
    /// key (seed §6.2), one per signed message however its `v` and hex were spelled.
    pub signature: String,
    /// The signer, normalised: `did:ethr:{chainId}:{lowercase address}`, so one signer's
    /// spellings (`did:ethr:0xAB…`, `did:ethr:84532:0xab…`) share one nonce space.
    pub signer: String,
    pub nonce: u64,
    /// The EIP-712 digest the signer signed.
    pub digest: [u8; 32],
    /// SHA-256 of the JCS of the whole envelope, its signature in the form above: equal for a
    /// repeat of the same message, different for any other message under the same key.
    pub fingerprint: Sha256Digest,
    /// Unix seconds after which a repeat is refused as expired anyway.
    pub expires_at: u64,
}

impl Checked {
    /// The dedup key (SPEC §13): message type, signer DID, nonce.
    /// The signed digest as receipts name it: `eip712:0x…`.
    pub fn digest_uri(&self) -> String {
        format!("eip712:0x{}", hex::encode(self.digest))
    }

    pub fn dedup_key(&self) -> String {
        format!("{}:{}:{}", self.kind.wire(), self.signer, self.nonce)
    }
}

fn malformed(detail: &'static str) -> Refusal {
    Refusal::new(ErrorCode::QuoteMalformed, detail)
}

/// Parses and checks the envelope `{type, message}` posted to `/{path_chain}/{path_tx}`.
pub fn check(
    body: &[u8],
    path_chain: &str,
    path_tx: &str,
    rules: &Rules,
    now_s: u64,
) -> Result<Checked, Refusal> {
    check_on(
        body,
        Channel::Quote {
            chain: path_chain,
            tx: path_tx,
        },
        rules,
        now_s,
    )
}

/// Parses and checks the envelope `{type, message}` posted to `channel`.
pub fn check_on(
    body: &[u8],
    channel: Channel<'_>,
    rules: &Rules,
    now_s: u64,
) -> Result<Checked, Refusal> {
    let envelope = palisade_core::json::parse(body, MAX_DEPTH)
        .map_err(|_| malformed("the body is not one I-JSON value"))?;
    let (kind, posted) = envelope_parts(&envelope)?;
    let mapped;
    let msg = match (channel, kind) {
        (Channel::Relay { .. }, _) if message::is_sdk_dataclass_form(kind, posted) => {
            mapped = message::from_sdk_dataclass(kind, posted);
            &mapped
        }
        _ => posted,
    };
    let (path_chain, path_tx) = match channel {
        Channel::Quote { chain, tx } => (Some(chain), tx),
        Channel::Relay { tx } => (None, tx),
    };
    let schema = kind
        .schema()
        .ok_or_else(|| Refusal::new(ErrorCode::Internal, "message schema unavailable"))?;
    if let Some(e) = schema.iter_errors(msg).next() {
        return Err(
            malformed("the message does not match its type's JSON Schema")
                .with_location(format!("/message{}", e.instance_path())),
        );
    }
    // The schema guarantees presence and shape of everything read below.
    let str_of = |m: &str| msg.get(m).and_then(Value::as_str).unwrap_or_default();
    let u64_of = |m: &str| msg.get(m).and_then(Value::as_u64);

    // Path binding (T2, T5).
    let chain_id = u64_of("chainId").ok_or_else(|| malformed("chainId must be an integer"))?;
    // Canonical decimal only: `084532` is another spelling, not this channel.
    if path_chain.is_some_and(|p| chain_id.to_string() != p) {
        return Err(Refusal::new(
            ErrorCode::QuoteChannel,
            "the message's chainId differs from the channel path's",
        )
        .with_location("/message/chainId"));
    }
    if !str_of("txId").eq_ignore_ascii_case(path_tx) {
        return Err(Refusal::new(
            ErrorCode::QuoteChannel,
            "the message's txId differs from the channel path's",
        )
        .with_location("/message/txId"));
    }
    let signer_member = kind.signer_member();
    let mut signer_address = None;
    let mut parties = [Party {
        chain: chain_id,
        address: [0; 20],
    }; 2];
    for (i, member) in ["provider", "consumer"].into_iter().enumerate() {
        let (did_chain, addr) = message::did_ethr(str_of(member))
            .ok_or_else(|| malformed("a DID is not did:ethr").with_location(member))?;
        if did_chain.is_some_and(|c| c != chain_id) {
            return Err(Refusal::new(
                ErrorCode::QuoteChannel,
                "a DID names another chain than the message's chainId",
            )
            .with_location(format!("/message/{member}")));
        }
        if member == signer_member {
            signer_address = Some(addr);
        }
        if let Some(p) = parties.get_mut(i) {
            p.address = addr;
        }
    }
    let [provider, consumer] = parties;
    let signer_address = signer_address.ok_or_else(|| malformed("no signer DID"))?;
    let Some(kernel) = rules.kernels.get(&chain_id) else {
        return Err(Refusal::new(
            ErrorCode::QuoteChainUnknown,
            "no kernel is configured for the message's chainId (aip2.kernels)",
        ));
    };

    // TTL (T3), before any signature work.
    let created = u64_of(kind.created_member())
        .ok_or_else(|| malformed("the creation time must be an integer"))?;
    if created > now_s.saturating_add(MAX_FUTURE_SKEW_S) {
        return Err(malformed(
            "the creation time is further in the future than the clock skew allows",
        )
        .with_location(format!("/message/{}", kind.created_member())));
    }
    let expires_at = match kind.expires_member() {
        Some(m) => {
            let e = u64_of(m).ok_or_else(|| malformed("expiresAt must be an integer"))?;
            if e > created.saturating_add(rules.max_ttl_s) {
                return Err(malformed(
                    "expiresAt is further after the creation time than aip2.max_ttl allows",
                )
                .with_location("/message/expiresAt"));
            }
            e
        }
        // A counter-accept has no expiry of its own: it lives as long as a quote may.
        None => created.saturating_add(rules.max_ttl_s),
    };
    if now_s > expires_at.saturating_add(rules.grace_s) {
        return Err(Refusal::new(
            ErrorCode::QuoteExpired,
            "the message expired (expiresAt plus aip2.grace is past)",
        ));
    }

    // Signature.
    let values = message::struct_values(kind, msg)
        .map_err(|_| malformed("a signed member cannot be encoded for EIP-712"))?;
    let struct_hash = kind
        .struct_type()
        .hash(&values)
        .ok_or_else(|| malformed("a signed member is out of range for its EIP-712 type"))?;
    let domain = eip712::domain_separator("AGIRAILS", "1", chain_id, *kernel);
    let digest = eip712::signing_digest(&domain, &struct_hash);
    let signature: [u8; 65] = hex::decode(str_of("signature").trim_start_matches("0x"))
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| malformed("signature must be 65 bytes of hex"))?;
    let sig_refusal = |detail: &'static str| {
        Refusal::new(ErrorCode::QuoteSignature, detail).with_location("/message/signature")
    };
    let recovered = eip712::recover(&digest, &signature).map_err(|e| match e {
        RecoverError::HighS => sig_refusal("a high-s (malleable) signature is refused"),
        RecoverError::RecoveryId => sig_refusal("the signature's v is not 27 or 28"),
        RecoverError::Malformed | RecoverError::NoKey => {
            sig_refusal("no signer recovers from the signature")
        }
    })?;
    if recovered != signer_address {
        return Err(sig_refusal(match kind {
            Kind::CounterOffer => "the signature does not recover to the consumer DID",
            Kind::Quote | Kind::CounterAccept => {
                "the signature does not recover to the provider DID"
            }
        }));
    }
    let nonce = u64_of("nonce").ok_or_else(|| malformed("nonce must be an integer"))?;
    let tx_id = str_of("txId").to_ascii_lowercase();
    // One spelling per signature (issue 44): `v` as 27/28 and lowercase hex, so the relay's
    // dedup key and the fingerprint of a repeat do not split on `v` = 0/1 or hex case.
    let signature = format!("0x{}", hex::encode(eip712::with_canonical_v(&signature)));
    let mut envelope = envelope;
    if let Some(Value::Object(m)) = envelope.get_mut("message") {
        m.insert("signature".into(), Value::String(signature.clone()));
    }
    Ok(Checked {
        kind,
        chain_id,
        tx_id,
        provider,
        consumer,
        signature,
        signer: format!("did:ethr:{chain_id}:0x{}", hex::encode(signer_address)),
        nonce,
        digest,
        fingerprint: Sha256Digest::of(&palisade_core::canon::to_vec(&envelope)),
        expires_at,
    })
}

/// `{type, message}` and nothing else.
fn envelope_parts(envelope: &Value) -> Result<(Kind, &Value), Refusal> {
    let obj = envelope
        .as_object()
        .ok_or_else(|| malformed("the body must be an object {type, message}"))?;
    if obj.keys().any(|k| k != "type" && k != "message") {
        return Err(malformed(
            "the envelope has members besides type and message",
        ));
    }
    let kind = obj
        .get("type")
        .and_then(Value::as_str)
        .and_then(Kind::from_wire)
        .ok_or_else(|| {
            malformed("type must be agirails.quote.v1, agirails.counteroffer.v1 or agirails.counteraccept.v1")
                .with_location("/type")
        })?;
    let msg = obj
        .get("message")
        .filter(|m| m.is_object())
        .ok_or_else(|| malformed("message must be an object").with_location("/message"))?;
    if msg.get("type").and_then(Value::as_str) != Some(kind.wire()) {
        return Err(malformed("the message's type differs from the envelope's")
            .with_location("/message/type"));
    }
    Ok((kind, msg))
}
