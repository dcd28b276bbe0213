//! What the JSON tools read: stdin whole, bounded, and its canonical form.

use std::io::Read as _;

use palisade_policy::canon;

use super::failure::Failure;

/// Bound on what the JSON tools read from stdin.
const MAX_STDIN: u64 = 64 << 20;
pub(crate) const MAX_DEPTH: usize = 128;

pub(crate) fn read_stdin() -> Result<Vec<u8>, Failure> {
    let mut buf = Vec::new();
    std::io::stdin()
        .take(MAX_STDIN + 1)
        .read_to_end(&mut buf)
        .map_err(|e| Failure::usage(format!("stdin: {e}")))?;
    if buf.len() as u64 > MAX_STDIN {
        return Err(Failure::refused(format!(
            "stdin: input exceeds {MAX_STDIN} bytes"
        )));
    }
    Ok(buf)
}

pub(crate) fn canonical_stdin() -> Result<Vec<u8>, Failure> {
    let input = read_stdin()?;
    canon::canonicalize(&input, MAX_DEPTH).map_err(|e| Failure::refused(format!("stdin: {e}")))
}
