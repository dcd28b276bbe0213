//! What is wrong with a bundle ([`Problem`]), and the rule every bundle file is named by.

/// One thing wrong with a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where: `lockfile#/capabilities/x/contractDigest`, `contracts/<hex>.json#/structural`,
    /// or a JSON pointer within the document being compiled.
    pub pointer: String,
    pub message: String,
}

impl Problem {
    pub fn new(pointer: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            message: message.into(),
        }
    }
}

/// A bundle file is named by its content (`<hex SHA-256 of its JCS form>.json`): the problem
/// when `name` is not `doc`'s, and `doc`'s digest either way.
pub(crate) fn content_named(
    name: &str,
    doc: &serde_json::Value,
) -> (palisade_policy::digest::Sha256Digest, Option<Problem>) {
    let digest = palisade_policy::digest::Sha256Digest::of_json(doc);
    let problem = (format!("{}.json", digest.to_hex()) != name).then(|| {
        Problem::new(
            format!("contracts/{name}#"),
            format!(
                "file name does not match its content (the SHA-256 of its JCS form is {})",
                digest.to_hex()
            ),
        )
    });
    (digest, problem)
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.pointer, self.message)
    }
}
