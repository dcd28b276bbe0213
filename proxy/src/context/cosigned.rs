//! The witness cosignatures collected for the log's checkpoints (SPEC §5.5): the submitter
//! (`control::witnesses`) adds them, the admin listener appends those of the checkpoint it
//! serves. Kept in memory: after a restart they are collected again at the next submission.

use std::sync::RwLock;

/// Cosignature lines by the checkpoint note they cosign (only the newest note's are kept).
#[derive(Default)]
pub struct Cosigned {
    inner: RwLock<(String, Vec<String>)>,
}

impl Cosigned {
    /// Adds `line` (one witness's cosignature, a full signature line) for `note`, replacing
    /// that witness's earlier line; lines of an older note are dropped.
    pub fn add(&self, note: &str, witness: &str, line: String) {
        let Ok(mut g) = self.inner.write() else {
            return;
        };
        if g.0 != note {
            *g = (note.to_owned(), Vec::new());
        }
        let prefix = format!("\u{2014} {witness} ");
        g.1.retain(|l| !l.starts_with(&prefix));
        g.1.push(line);
    }

    /// `note` with the cosignatures collected for it appended (signed-note signature lines).
    pub fn served(&self, note: &str) -> String {
        let mut out = note.to_owned();
        if let Ok(g) = self.inner.read() {
            if g.0 == note {
                for l in &g.1 {
                    out.push_str(l);
                }
            }
        }
        out
    }
}
