//! A permitted write on its way ([`Delivery`]), and what must be stored with its receipt
//! ([`Keep`]): what the engine hands the surface that sends it, or the escrow that holds it.

use crate::store::EscrowRecord;
use std::sync::Arc;

use bytes::Bytes;
use palisade_rich::Bundle;

use crate::context::WriteContext;
use crate::enforce::idempotency;
use crate::enforce::permit::Permit;
use crate::net::conn::ConnInfo;

/// What must be stored with a forwarded write's receipt. Anything but `Nothing` buffers the
/// response body (≤ `limits.max_response`), since it is stored.
pub(crate) enum Keep {
    Nothing,
    /// The idempotency key's outcome (SPEC §5.6).
    Key(idempotency::Pending),
    /// A released escrow: its final record (the held record without the request).
    Escrow {
        id: String,
        record: Box<EscrowRecord>,
    },
}

impl Keep {
    /// For a write refused before forwarding: its key, if any, is free again before the
    /// refusal is answered.
    pub(crate) async fn release(self) {
        if let Keep::Key(pending) = self {
            pending.release().await;
        }
    }
}

/// A permitted write on its way to the SoR, for a leg of the engine (`engine::Leg`) to send and commit, or for
/// `escrow::hold` to keep.
pub(crate) struct Delivery {
    pub permit: Permit,
    pub parts: http::request::Parts,
    pub body: Bytes,
    pub conn: Arc<ConnInfo>,
    pub cx: WriteContext,
    /// What is stored with the commit receipt (an idempotency key's outcome, an escrow's).
    pub keep: Keep,
    pub bundle: Option<Arc<Bundle>>,
}
