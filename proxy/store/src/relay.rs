//! What the AIP-2.1 negotiation relay (seed 001 §6.3) keeps: signed messages, each under a
//! cursor that only grows, findable by transaction and by party, gone after `aip2.relay_ttl`.
//! Both backends keep them, so replicas sharing a database serve one relay.

/// One message to store: the envelope exactly as it was posted (the relay never alters a
/// signed body), and what it is found by.
#[derive(Debug, Clone)]
pub struct RelayMessage {
    /// The message's txId, lowercase.
    pub tx_id: String,
    /// `0x` + lowercase hex of the inner signature: the dedup key (seed §6.2).
    pub signature: String,
    /// (chain, address) of the provider and of the consumer.
    pub parties: [(u64, [u8; 20]); 2],
    /// The posted body, `{type, message}`: I-JSON, checked and verified.
    pub envelope: Vec<u8>,
    /// Unix seconds, as the relay's `receivedAt`.
    pub received_at_s: u64,
    /// Unix ms after which the message is gone.
    pub expires_ms: i64,
}

/// The caps a post is held to, checked in the transaction that stores it.
#[derive(Debug, Clone, Copy)]
pub struct RelayLimits {
    /// Messages kept per transaction (`aip2.relay_max_per_tx`).
    pub per_tx: u64,
    /// Messages kept in all (`aip2.relay_max_messages`).
    pub total: u64,
}

/// The answer to [`super::Relay::relay_post`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayPosted {
    Stored {
        cursor: u64,
    },
    /// A message with this signature is already kept (under `cursor`); nothing changed.
    Duplicate {
        cursor: u64,
    },
    /// The transaction has [`RelayLimits::per_tx`] messages.
    TxFull,
    /// The relay has [`RelayLimits::total`] messages.
    Full,
}

/// Which messages a page lists.
#[derive(Debug, Clone)]
pub enum RelayQuery {
    /// One transaction's (txId lowercase).
    Tx(String),
    /// Those whose provider or consumer has this address, on `chain` when given (an inbox).
    Party {
        address: [u8; 20],
        chain: Option<u64>,
    },
}

/// One kept message, as a page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayEntry {
    pub cursor: u64,
    pub tx_id: String,
    pub envelope: Vec<u8>,
    pub received_at_s: u64,
}

/// A stored message's record: what the listing needs and what its removal must find.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct Record {
    pub tx: String,
    pub sig: String,
    /// `[[chain, "hex address"], …]`
    pub parties: Vec<(u64, String)>,
    pub at: u64,
    pub exp: i64,
    /// The envelope, as posted (it is UTF-8: it passed the I-JSON parser).
    pub env: String,
}

impl Record {
    pub(crate) fn of(m: &RelayMessage) -> Self {
        Self {
            tx: m.tx_id.clone(),
            sig: m.signature.clone(),
            parties: m
                .parties
                .iter()
                .map(|(c, a)| (*c, hex::encode(a)))
                .collect(),
            at: m.received_at_s,
            exp: m.expires_ms,
            env: String::from_utf8_lossy(&m.envelope).into_owned(),
        }
    }

    pub(crate) fn entry(self, cursor: u64) -> RelayEntry {
        RelayEntry {
            cursor,
            tx_id: self.tx,
            envelope: self.env.into_bytes(),
            received_at_s: self.at,
        }
    }

    /// The distinct party addresses, with their chains.
    pub(crate) fn party_keys(&self) -> Vec<(u64, [u8; 20])> {
        let mut out: Vec<(u64, [u8; 20])> = Vec::with_capacity(2);
        for (chain, addr) in &self.parties {
            let mut a = [0u8; 20];
            if hex::decode_to_slice(addr, &mut a).is_ok() && !out.iter().any(|(_, b)| *b == a) {
                out.push((*chain, a));
            }
        }
        out
    }
}
