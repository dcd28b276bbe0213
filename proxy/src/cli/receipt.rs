//! `palisade receipt verify --key VKEY [--file F]` (SPEC §1): one receipt, as a client
//! received it (an `Agent-Commit-Receipt` value, base64url or JSON), checked offline against
//! the log's verifier key: the checkpoint's signature, the leaf hash of `JCS(receipt)`, the
//! inclusion proof up to the checkpoint's root.

use std::io::Read as _;
use std::path::Path;

use palisade_log::{Envelope, LogKey};

use super::Failure;

/// The verifier key: the C2SP string itself, or a file holding it.
pub(crate) fn log_key(vkey: &str) -> Result<LogKey, Failure> {
    let text = if Path::new(vkey).is_file() {
        std::fs::read_to_string(vkey).map_err(|e| Failure::usage(format!("--key {vkey}: {e}")))?
    } else {
        vkey.to_owned()
    };
    LogKey::parse(&text).map_err(|e| Failure::usage(format!("--key: {e}")))
}

pub(crate) fn verify(vkey: &str, file: Option<&Path>) -> Result<(), Failure> {
    let key = log_key(vkey)?;
    let mut bytes = Vec::new();
    let limit = palisade_log::envelope::MAX_ENVELOPE as u64 + 1;
    match file {
        Some(f) => std::fs::File::open(f)
            .and_then(|h| h.take(limit).read_to_end(&mut bytes))
            .map_err(|e| Failure::usage(format!("--file {}: {e}", f.display())))?,
        None => std::io::stdin()
            .take(limit)
            .read_to_end(&mut bytes)
            .map_err(|e| Failure::usage(format!("stdin: {e}")))?,
    };
    let envelope = Envelope::from_wire(&bytes).map_err(|e| Failure::refused(e.to_string()))?;
    let checkpoint = envelope
        .verify(&key)
        .map_err(|e| Failure::refused(e.to_string()))?;
    println!(
        "ok: entry {} of {} is in its tree of size {} ({})",
        envelope.index,
        checkpoint.origin,
        checkpoint.size,
        envelope.receipt["receipt_id"]
            .as_str()
            .unwrap_or("no receipt_id")
    );
    Ok(())
}
