//! A command's failure: the lines it prints on stderr and its exit code (1 the input was
//! refused, 2 usage or configuration).

/// A failed command: the lines to print and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub lines: Vec<String>,
}

impl Failure {
    pub(crate) fn refused(line: impl Into<String>) -> Self {
        Self {
            code: 1,
            lines: vec![line.into()],
        }
    }

    /// An error's whole chain, as a usage failure (exit 2).
    pub(crate) fn chain(e: anyhow::Error) -> Self {
        Self::usage(format!("{e:#}"))
    }

    pub(crate) fn usage(line: impl Into<String>) -> Self {
        Self {
            code: 2,
            lines: vec![line.into()],
        }
    }
}
