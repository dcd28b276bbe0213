//! The state store's contract (`palisade::store::Store`), one scenario a function, run against
//! every backend: the embedded store here (`store.rs`), PostgreSQL in `tests/postgres.rs`.
//! A backend passes when it gives the same answers; each scenario names what it checks.
//!
//! Every store runs on a `SetClock`, so expiry is tested by moving the clock, not by sleeping.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use palisade::clock::SetClock;
use palisade::store::log_read;
use palisade::store::{
    Advance, Attachments, Compensation, EscrowRecord, EscrowState, EscrowUpdate, IdempotencyRecord,
    KeyState, LeaseRecord, LeaseState, RcnsKind, RcnsPut, RcnsPutMode, RcnsRecord, RelayLimits,
    RelayMessage, RelayPosted, RelayQuery, Store, StoredOutcome, WriteIntent,
};
use palisade_policy::keys::KeyPair;
use palisade_policy::log::{audit, Envelope, Signer};
use palisade_policy::receipt::{ReceiptBody, ReceiptKind};

#[path = "store_contract/export.rs"]
mod export;
#[path = "store_contract/negotiation.rs"]
mod negotiation;
#[path = "store_contract/records.rs"]
mod records;
// The checks, named where `contract_tests!` calls them.
pub use export::*;
pub use negotiation::*;
pub use records::*;

/// The time every store starts at: 2026-12-03T12:00:00Z.
pub const T0: i64 = 1_796_299_200_000;
const HOUR: i64 = 3_600_000;

/// The key the stores under test sign the log's checkpoints with (a test key).
pub fn key() -> Arc<Signer> {
    Arc::new(
        Signer::new(
            "contract.example/palisade",
            Arc::new(KeyPair::from_seed([7; 32])),
        )
        .unwrap(),
    )
}

fn intent(resource: &str, epoch: u64, lease: &str) -> WriteIntent {
    WriteIntent {
        resource: resource.into(),
        epoch,
        lease_id: lease.into(),
        expires_at_ms: T0 + HOUR,
        lease_record: LeaseRecord::committed(lease, resource, epoch, T0 + HOUR),
        inverse: Some(format!(r#"{{"method":"DELETE","path":"{resource}"}}"#).into_bytes()),
        snapshot: Some(br#"{"before":true}"#.to_vec()),
    }
}

fn body(n: u64, lease: Option<&str>, kind: ReceiptKind) -> ReceiptBody {
    ReceiptBody {
        lease_id: lease.map(str::to_owned),
        cas_fence_epoch: Some(n),
        ..ReceiptBody::new(
            format!("urn:uuid:contract-{n}"),
            kind,
            "2026-12-03T12:00:00.000Z".into(),
        )
    }
}

fn outcome(fingerprint: &str) -> StoredOutcome {
    StoredOutcome {
        fingerprint: fingerprint.into(),
        status: 201,
        headers: vec![("content-type".into(), "application/json".into())],
        body_b64: "e30=".into(),
        receipt: None,
        expires_ms: 0,
    }
}

macro_rules! contract_tests {
    ($open:path) => {
        $crate::store_contract::contract_tests!(
            @ $open,
            fences_only_move_forward,
            receipts_are_entries_of_one_verifiable_log,
            idempotency_keys_are_reserved_stored_and_expire,
            escrow_updates_are_compare_and_set,
            a_lease_is_compensated_at_most_once,
            relay_messages_dedup_cap_page_and_expire,
            rcns_records_keep_caps_and_expire,
            budgets_slide_and_freezes_are_stored_with_their_receipts,
            audit_export_walks_the_log_without_gap_or_repeat
        );
    };
    (@ $open:path, $($name:ident),*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let (store, clock, _guard) = $open().await;
                $crate::store_contract::$name(&*store, &clock).await;
            }
        )*
    };
}
pub(crate) use contract_tests;
