//! The names of the metrics the stores record (SPEC §9 and its additions). The sidecar's
//! `telemetry` describes and exports them; they are named here so that a backend records
//! them without depending on the sidecar.

pub const STORE_OP_DURATION: &str = "palisade_store_op_duration_seconds";
pub const FENCE_ADVANCES: &str = "palisade_fence_advances_total";
/// Jobs per store transaction (group commit at work); not in SPEC §9, an addition.
pub const STORE_BATCH_JOBS: &str = "palisade_store_batch_jobs";
/// Entries integrated into the receipt log, and checkpoints signed for them (one per store
/// batch): their ratio is the receipts a checkpoint signature covers. Additions to SPEC §9.
pub const LOG_ENTRIES: &str = "palisade_log_entries_total";
pub const LOG_CHECKPOINTS: &str = "palisade_log_checkpoints_total";
/// The receipt log's size after this sidecar's newest batch, and when it signed that batch's
/// checkpoint (Unix seconds): the log's growth and its newest checkpoint's age, for a
/// dashboard (the largest of the replicas' is the shared log's). Additions to SPEC §9.
pub const LOG_SIZE: &str = "palisade_log_size";
pub const LOG_CHECKPOINT_TIME: &str = "palisade_log_checkpoint_timestamp_seconds";

/// Counts one sealed batch of `entries` receipts (one checkpoint). Counted when the batch is
/// sealed, before its commit: a PostgreSQL batch rolled back and run again counts twice.
pub fn count_sealed(entries: usize, size: u64) {
    metrics::counter!(LOG_ENTRIES).increment(entries as u64);
    metrics::counter!(LOG_CHECKPOINTS).increment(1);
    metrics::gauge!(LOG_SIZE).set(size as f64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    metrics::gauge!(LOG_CHECKPOINT_TIME).set(now);
}
