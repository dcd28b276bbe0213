//! The three AIP-2.1 message types, their JSON Schemas and EIP-712 struct types, and how a
//! message that passed its schema becomes the fields its signature covers.
//!
//! Field names, types and order come from the `agirails` SDK's builders (`QuoteBuilder`,
//! `CounterOfferBuilder`, `CounterAcceptBuilder`), which are the reference signers; the
//! quote's schema is AIP-2's own (`schemas/quote.schema.json`, unedited), the other two are
//! written from the SDK's validators (their `description` says so).

use std::sync::OnceLock;

use jsonschema::{Draft, PatternOptions, Validator};
use serde_json::Value;

use super::eip712::{keccak256, Atomic, Field, StructType};

/// A message type of the quote channel and the relay (seed §6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `agirails.quote.v1`, signed by the provider.
    Quote,
    /// `agirails.counteroffer.v1`, signed by the consumer.
    CounterOffer,
    /// `agirails.counteraccept.v1`, signed by the provider.
    CounterAccept,
}

pub const PRICE_QUOTE: StructType = StructType {
    name: "PriceQuote",
    fields: &[
        ("txId", Atomic::Bytes32),
        ("provider", Atomic::String),
        ("consumer", Atomic::String),
        ("quotedAmount", Atomic::String),
        ("originalAmount", Atomic::String),
        ("maxPrice", Atomic::String),
        ("currency", Atomic::String),
        ("decimals", Atomic::Uint8),
        ("quotedAt", Atomic::Uint256),
        ("expiresAt", Atomic::Uint256),
        ("justificationHash", Atomic::Bytes32),
        ("chainId", Atomic::Uint256),
        ("nonce", Atomic::Uint256),
    ],
};

pub const COUNTER_OFFER: StructType = StructType {
    name: "CounterOffer",
    fields: &[
        ("txId", Atomic::Bytes32),
        ("consumer", Atomic::String),
        ("provider", Atomic::String),
        ("quoteAmount", Atomic::String),
        ("counterAmount", Atomic::String),
        ("maxPrice", Atomic::String),
        ("currency", Atomic::String),
        ("decimals", Atomic::Uint8),
        ("inReplyTo", Atomic::Bytes32),
        ("counteredAt", Atomic::Uint256),
        ("expiresAt", Atomic::Uint256),
        ("justificationHash", Atomic::Bytes32),
        ("chainId", Atomic::Uint256),
        ("nonce", Atomic::Uint256),
    ],
};

pub const COUNTER_ACCEPT: StructType = StructType {
    name: "CounterAccept",
    fields: &[
        ("txId", Atomic::Bytes32),
        ("provider", Atomic::String),
        ("consumer", Atomic::String),
        ("acceptedAmount", Atomic::String),
        ("inReplyTo", Atomic::Bytes32),
        ("acceptedAt", Atomic::Uint256),
        ("chainId", Atomic::Uint256),
        ("nonce", Atomic::Uint256),
    ],
};

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Quote, Kind::CounterOffer, Kind::CounterAccept];

    pub fn wire(self) -> &'static str {
        match self {
            Kind::Quote => "agirails.quote.v1",
            Kind::CounterOffer => "agirails.counteroffer.v1",
            Kind::CounterAccept => "agirails.counteraccept.v1",
        }
    }

    pub fn from_wire(s: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.wire() == s)
    }

    pub fn struct_type(self) -> &'static StructType {
        match self {
            Kind::Quote => &PRICE_QUOTE,
            Kind::CounterOffer => &COUNTER_OFFER,
            Kind::CounterAccept => &COUNTER_ACCEPT,
        }
    }

    /// The member naming who must have signed: the provider quotes and accepts, the consumer
    /// counters (seed §8.2).
    pub fn signer_member(self) -> &'static str {
        match self {
            Kind::Quote | Kind::CounterAccept => "provider",
            Kind::CounterOffer => "consumer",
        }
    }

    /// The member holding the signer's own timestamp.
    pub fn created_member(self) -> &'static str {
        match self {
            Kind::Quote => "quotedAt",
            Kind::CounterOffer => "counteredAt",
            Kind::CounterAccept => "acceptedAt",
        }
    }

    /// The message's `expiresAt`; a counter-accept has none (it expires with what it accepts).
    pub fn expires_member(self) -> Option<&'static str> {
        match self {
            Kind::Quote | Kind::CounterOffer => Some("expiresAt"),
            Kind::CounterAccept => None,
        }
    }

    fn schema_text(self) -> &'static str {
        match self {
            Kind::Quote => include_str!("schemas/quote.schema.json"),
            Kind::CounterOffer => include_str!("schemas/counteroffer.schema.json"),
            Kind::CounterAccept => include_str!("schemas/counteraccept.schema.json"),
        }
    }

    /// The compiled schema (compiled once per process; the texts are part of the binary, and
    /// a test compiles all three, so `None` is unreachable in a tested build).
    pub fn schema(self) -> Option<&'static Validator> {
        static SCHEMAS: OnceLock<Vec<Option<Validator>>> = OnceLock::new();
        let all = SCHEMAS.get_or_init(|| {
            Kind::ALL
                .iter()
                .map(|k| {
                    let v: Value = serde_json::from_str(k.schema_text()).ok()?;
                    jsonschema::options()
                        .with_draft(Draft::Draft7)
                        .with_pattern_options(PatternOptions::regex())
                        .build(&v)
                        .ok()
                })
                .collect()
        });
        all.get(self as usize)?.as_ref()
    }
}

/// `0x` + 64 hex digits as bytes.
pub fn bytes32(s: &str) -> Option<[u8; 32]> {
    let hex_part = s.strip_prefix("0x")?;
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// `0x` + 40 hex digits as bytes (any letter case: EIP-55 checksums are not required).
pub fn address(s: &str) -> Option<[u8; 20]> {
    let hex_part = s.strip_prefix("0x")?;
    let mut out = [0u8; 20];
    hex::decode_to_slice(hex_part, &mut out).ok()?;
    Some(out)
}

/// A `did:ethr:[chainId:]0x…` DID: its chain, when it names one, and its address.
pub fn did_ethr(did: &str) -> Option<(Option<u64>, [u8; 20])> {
    let rest = did.strip_prefix("did:ethr:")?;
    match rest.split_once(':') {
        Some((chain, addr)) => Some((Some(chain.parse().ok()?), address(addr)?)),
        None => Some((None, address(rest)?)),
    }
}

/// `justificationHash`: the keccak256 of the canonical JSON of the justification, or zero
/// when there is none or it is empty (as the SDK computes it; its canonical JSON is JCS for
/// every value the schemas admit: sorted keys, no whitespace, ECMAScript numbers).
pub fn justification_hash(message: &Value) -> [u8; 32] {
    match message.get("justification") {
        Some(Value::Object(m)) if !m.is_empty() => {
            keccak256(&palisade_core::canon::to_vec(&Value::Object(m.clone())))
        }
        _ => [0u8; 32],
    }
}

/// Whether `message` is in the form the `agirails` Python SDK's `RelayChannel` posts (its
/// message dataclass as a dict): a quote with snake_case member names, or any message with
/// `justification: null` for an absent justification.
pub fn is_sdk_dataclass_form(kind: Kind, message: &Value) -> bool {
    message.get("justification").is_some_and(Value::is_null)
        || (kind == Kind::Quote && message.get("tx_id").is_some())
}

/// A message in the Python SDK's dataclass form ([`is_sdk_dataclass_form`]) as AIP-2's
/// camelCase message: a quote's member names mapped, values untouched, a null justification
/// left out (the SDK hashes an absent one as zero, as [`justification_hash`] does).
pub fn from_sdk_dataclass(kind: Kind, message: &Value) -> Value {
    const NAMES: [(&str, &str); 7] = [
        ("tx_id", "txId"),
        ("quoted_amount", "quotedAmount"),
        ("original_amount", "originalAmount"),
        ("max_price", "maxPrice"),
        ("chain_id", "chainId"),
        ("quoted_at", "quotedAt"),
        ("expires_at", "expiresAt"),
    ];
    let names: &[(&str, &str)] = if kind == Kind::Quote { &NAMES } else { &[] };
    let Some(members) = message.as_object() else {
        return message.clone();
    };
    // Both names of one field is two values for it: left as it is, the closed schema refuses
    // the snake_case names.
    if names.iter().any(|(_, camel)| members.contains_key(*camel)) {
        return message.clone();
    }
    let mut out = serde_json::Map::new();
    for (k, v) in members {
        if k == "justification" && v.is_null() {
            continue;
        }
        let name = names
            .iter()
            .find(|(snake, _)| snake == k)
            .map_or(k.as_str(), |(_, camel)| camel);
        out.insert(name.to_owned(), v.clone());
    }
    Value::Object(out)
}

/// The struct's values from a message that passed its schema, in field order; `None` names
/// the first member that cannot be encoded (an integer with a fraction or past 64 bits).
pub fn struct_values(kind: Kind, message: &Value) -> Result<Vec<Field<'_>>, &'static str> {
    let t = kind.struct_type();
    let mut out = Vec::with_capacity(t.fields.len());
    for (name, atomic) in t.fields {
        if *name == "justificationHash" {
            out.push(Field::Bytes32(justification_hash(message)));
            continue;
        }
        let v = message.get(*name).ok_or(*name)?;
        out.push(match atomic {
            Atomic::String => Field::Str(v.as_str().ok_or(*name)?),
            Atomic::Bytes32 => Field::Bytes32(v.as_str().and_then(bytes32).ok_or(*name)?),
            Atomic::Uint8 | Atomic::Uint256 => Field::Uint(v.as_u64().ok_or(*name)?),
            Atomic::Address => Field::Address(v.as_str().and_then(address).ok_or(*name)?),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_schema_compiles_and_type_strings_match_the_sdk() {
        for k in Kind::ALL {
            assert!(k.schema().is_some(), "{k:?}");
            assert_eq!(Kind::from_wire(k.wire()), Some(k));
        }
        // AIP-2's own type definition (testdata/aip2/aip-2-quote.eip712.json, typeHash).
        assert_eq!(
            PRICE_QUOTE.encode_type(),
            "PriceQuote(bytes32 txId,string provider,string consumer,string quotedAmount,\
             string originalAmount,string maxPrice,string currency,uint8 decimals,\
             uint256 quotedAt,uint256 expiresAt,bytes32 justificationHash,uint256 chainId,\
             uint256 nonce)"
        );
    }

    #[test]
    fn dids_and_hex() {
        let a = "0x742d35Cc6634C0532925a3b844Bc9e7595f0bEb0";
        assert_eq!(did_ethr(&format!("did:ethr:{a}")).unwrap().0, None);
        assert_eq!(
            did_ethr(&format!("did:ethr:84532:{a}")).unwrap().0,
            Some(84532)
        );
        assert!(did_ethr("did:ethr:x:0x00").is_none());
        assert!(did_ethr("did:web:example.com").is_none());
        assert!(bytes32("0x12").is_none());
        assert!(address("742d35Cc6634C0532925a3b844Bc9e7595f0bEb0").is_none());
    }

    #[test]
    fn the_python_sdk_dataclass_form_maps_names_only() {
        let snake = serde_json::json!({"tx_id": "0xab", "quoted_amount": "1", "chain_id": 84532,
            "expires_at": 9, "justification": null, "provider": "p", "signature": "0x00"});
        assert!(is_sdk_dataclass_form(Kind::Quote, &snake));
        let camel = from_sdk_dataclass(Kind::Quote, &snake);
        assert_eq!(
            camel,
            serde_json::json!({"txId": "0xab", "quotedAmount": "1", "chainId": 84532,
                "expiresAt": 9, "provider": "p", "signature": "0x00"})
        );
        // Both spellings of one field: left alone, for the closed schema to refuse.
        let twin = serde_json::json!({"tx_id": "0xab", "txId": "0xcd"});
        assert_eq!(from_sdk_dataclass(Kind::Quote, &twin), twin);
        // A counter-offer's names are camelCase already; only a null justification goes.
        let counter = serde_json::json!({"txId": "0xab", "tx_id": "x", "justification": null});
        assert!(is_sdk_dataclass_form(Kind::CounterOffer, &counter));
        assert_eq!(
            from_sdk_dataclass(Kind::CounterOffer, &counter),
            serde_json::json!({"txId": "0xab", "tx_id": "x"})
        );
        assert!(!is_sdk_dataclass_form(
            Kind::CounterOffer,
            &serde_json::json!({"txId": "0xab"})
        ));
    }

    #[test]
    fn an_empty_justification_hashes_to_zero() {
        let m = serde_json::json!({"justification": {}});
        assert_eq!(justification_hash(&m), [0u8; 32]);
        let m = serde_json::json!({"justification": {"reason": "r", "computeCost": 2.5}});
        // keccak256('{"computeCost":2.5,"reason":"r"}')
        assert_eq!(
            justification_hash(&m),
            keccak256(br#"{"computeCost":2.5,"reason":"r"}"#)
        );
    }
}
