//! AGIRAILS AIP-2.1 (seed 001, SPEC §13): the quote-channel guard in front of an agent's
//! endpoint and the negotiation relay. The decisions are `palisade_policy::aip2`'s; this
//! module does the I/O around them: the client's rate limit, the body, the nonce store and
//! the relay's messages, the forward and the receipts.

pub mod quote_channel;
mod refusal;
pub mod relay;
