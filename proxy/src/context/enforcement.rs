//! The handles write enforcement needs, built once at start.

use std::sync::Arc;

use palisade_policy::receipt::{ReceiptBody, SealedReceipt};

use crate::store::{Attachments, StoreError};
use crate::telemetry::otlp::span;

use palisade_policy::keys::{KeyPair, TrustStore};
use palisade_policy::lease;
use palisade_policy::log::Signer;

use crate::clock::SharedClock;
use crate::config::Config;
use crate::store::Store;
use crate::telemetry::drift::DriftSink;

use super::locks::FirstSeen;

/// Everything write enforcement needs, built once at start.
pub struct Enforcement {
    pub key: Arc<KeyPair>,
    /// The receipt log's signer: the sidecar key under `receipts.origin` (SPEC §5.5).
    pub log: Arc<Signer>,
    /// Witness cosignatures on the log's newest checkpoint.
    pub cosigned: Arc<super::Cosigned>,
    pub trust: TrustStore,
    pub store: Arc<dyn Store>,
    /// The one clock the checks and the store read (a `SetClock` in tests that move time).
    pub clock: SharedClock,
    pub first_seen: FirstSeen,
    pub drift: DriftSink,
    /// Lease signatures waiting to be verified together (check 4, issue 36).
    pub signatures: super::SignatureQueue,
    /// The operators' freezes in force (SPEC §14).
    pub freezes: super::Freezes,
    /// `[budgets] rules` (SPEC §14).
    pub budgets: Vec<palisade_policy::budget::Rule>,
    /// `escrow.webhook`: where each held write is announced (SPEC §9), delivered as the drift
    /// webhook sink delivers.
    pub escrow_hook: Option<crate::telemetry::webhook::Webhook>,
    /// `[telemetry] otlp` with `receipts = true`: every receipt sealed here also goes out as
    /// an OTLP log record (SPEC §16).
    pub otlp: Option<Arc<crate::telemetry::otlp::Exporters>>,
}

impl Enforcement {
    /// Loads the sidecar key and the issuers, opens the store, starts the drift sink. Must run
    /// inside the runtime (the drift sink spawns its writer task).
    pub async fn load(
        config: &Config,
        otlp: Option<&Arc<crate::telemetry::otlp::Exporters>>,
        clock: SharedClock,
    ) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        let key_path = config
            .signing_key
            .clone()
            .unwrap_or_else(|| crate::config::DEFAULT_SIGNING_KEY.into());
        let pem = std::fs::read_to_string(&key_path)
            .with_context(|| format!("signing.key: cannot read {}", key_path.display()))?;
        let key = Arc::new(
            KeyPair::from_pkcs8_pem(&pem)
                .with_context(|| format!("signing.key: {}", key_path.display()))?,
        );
        let log =
            Arc::new(Signer::new(&config.receipts.origin, key.clone()).context("receipts.origin")?);
        let mut trust = TrustStore::new();
        trust.insert(key.trusted("sidecar"))?;
        if let Some(path) = &config.trust_issuers {
            let bytes = std::fs::read(path)
                .with_context(|| format!("trust.issuers: cannot read {}", path.display()))?;
            trust
                .extend_from_issuers_json(&bytes)
                .with_context(|| format!("trust.issuers: {}", path.display()))?;
        }
        // One clock for the checks and the store, so that both judge an expiry alike.
        let store: Arc<dyn Store> = match config.store.kind {
            crate::config::StoreKind::Embedded => Arc::new(
                crate::store::embedded::EmbeddedStore::open_with(
                    &config.store.path,
                    log.clone(),
                    config.store.retention,
                    clock.clone(),
                )
                .context("store")?,
            ),
            crate::config::StoreKind::Postgres => Arc::new(
                crate::store::open_postgres(config, log.clone(), clock.clone())
                    .await
                    .context("store")?,
            ),
        };
        // A freeze made before a restart holds from the first request after it.
        let freezes = super::Freezes::default();
        freezes.changed(super::Freezes::decode(
            &store.freezes().await.context("store: the freezes")?,
        ));
        let escrow_hook = match &config.escrow.webhook {
            Some(url) => {
                metrics::describe_counter!(
                    "palisade_escrow_notifications_dropped_total",
                    "Held-write announcements (escrow.webhook) dropped: queue full or not delivered."
                );
                let dropped = metrics::counter!("palisade_escrow_notifications_dropped_total");
                Some(
                    crate::telemetry::webhook::Webhook::start_shaped(
                        url,
                        dropped,
                        config.escrow.webhook_slack,
                    )
                    .map_err(|e| {
                        anyhow::anyhow!(e.replace("drift.sinks.webhook", "escrow.webhook"))
                    })?,
                )
            }
            None => None,
        };
        Ok(Self {
            otlp: otlp.filter(|o| o.records().is_some()).cloned(),
            escrow_hook,
            freezes,
            budgets: config.budgets.clone(),
            key,
            log,
            cosigned: Arc::default(),
            trust,
            store,
            clock,
            first_seen: FirstSeen::default(),
            drift: DriftSink::start(&config.drift_sinks),
            signatures: Default::default(),
        })
    }
}

impl Enforcement {
    /// Now on the sidecar's clock, as receipts and events write it (RFC 3339, milliseconds).
    pub fn now_rfc3339(&self) -> String {
        lease::format_rfc3339_ms(self.clock.now_ms())
    }

    /// Appends a receipt, with what is stored in the same transaction: every receipt the
    /// sidecar makes goes through here. The store's wait is timed and is a child span of the
    /// request's; the receipt's facts (index, epoch, operation, code, rule) are noted for the
    /// request's span; with `receipts = true` it is queued as an OTLP log record. `Ok(None)`:
    /// an escrow's expected state did not hold, and nothing was stored.
    pub async fn seal(
        &self,
        body: ReceiptBody,
        attach: Attachments,
    ) -> Result<Option<SealedReceipt>, StoreError> {
        let waited = tokio::time::Instant::now();
        let appended = span::within(
            "palisade.store.receipt",
            self.store.append_receipt_with(body, attach),
        )
        .await;
        metrics::histogram!(crate::telemetry::STORE_OP_DURATION, "op" => "receipt")
            .record(waited.elapsed().as_secs_f64());
        if let Ok(Some(sealed)) = &appended {
            span::note_receipt(sealed.index, sealed.receipt());
            if let Some(records) = self.otlp.as_ref().and_then(|o| o.records()) {
                records.emit(sealed);
            }
        }
        appended
    }

    /// [`Enforcement::seal`] with nothing attached.
    pub async fn seal_plain(&self, body: ReceiptBody) -> Result<SealedReceipt, StoreError> {
        self.seal(body, Attachments::default())
            .await?
            .ok_or_else(|| StoreError::Unavailable("receipt without attachments refused".into()))
    }
}
