//! `receipts = true` (SPEC §16): each receipt this replica seals goes out as an OTLP log
//! record whose body is the receipt's JCS (the log entry's bytes), for SIEMs that read OTLP.
//! The receipt stays in the log whatever becomes of the record.

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::trace::{SpanId, TraceFlags, TraceId};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::Resource;
use palisade_policy::receipt::SealedReceipt;

use super::queue;

pub struct Records {
    logger: SdkLogger,
    _provider: SdkLoggerProvider,
}

impl Records {
    pub(super) fn start(mut exporter: opentelemetry_otlp::LogExporter, resource: Resource) -> Self {
        opentelemetry_sdk::logs::LogExporter::set_resource(&mut exporter, &resource);
        let dropped = queue::Dropped::register(queue::RECORDS_DROPPED);
        let (feed, drain) = queue::channel(dropped.queue_full);
        tokio::spawn(queue::export_records(
            exporter,
            drain,
            dropped.export_failed,
        ));
        let provider = SdkLoggerProvider::builder()
            .with_log_processor(queue::RecordQueue(feed))
            .with_resource(resource)
            .build();
        Self {
            logger: provider.logger("palisade.receipts"),
            _provider: provider,
        }
    }

    /// Hands `sealed` to the queue as a log record: the JCS as the body; its index, kind and
    /// code as attributes; its trace as the record's trace context.
    pub fn emit(&self, sealed: &SealedReceipt) {
        let receipt = sealed.receipt();
        let mut record = self.logger.create_log_record();
        record.set_event_name("palisade.receipt");
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        let at = receipt["at"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            .unwrap_or_else(std::time::SystemTime::now);
        record.set_timestamp(at);
        record.set_observed_timestamp(std::time::SystemTime::now());
        record.set_body(AnyValue::String(
            String::from_utf8_lossy(&sealed.entry).into_owned().into(),
        ));
        record.add_attribute("palisade.receipt_index", sealed.index as i64);
        for (key, field) in [
            ("palisade.receipt_kind", "kind"),
            ("palisade.code", "code"),
            ("palisade.operation", "operation"),
        ] {
            if let Some(v) = receipt[field].as_str() {
                record.add_attribute(key, v.to_owned());
            }
        }
        if let Some(trace) = receipt["trace_id"]
            .as_str()
            .and_then(|t| TraceId::from_hex(t).ok())
        {
            record.set_trace_context(trace, SpanId::INVALID, Some(TraceFlags::default()));
        }
        self.logger.emit(record);
    }
}
