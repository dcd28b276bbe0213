//! How much of each imported operation's input its contract checks, and the summary line
//! `lock import-openapi` ends with (issue 37).

/// How much of an operation's input its imported contract checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Coverage {
    /// Its body (when it has one) and its parameters, whole.
    Full,
    /// Checked, but something was replaced by `{}`: the first reason.
    Partly(String),
    /// A write whose body is not checked at all: why.
    Unchecked(String),
}

/// `imported N operations: A checked fully, B checked partly (why), C unchecked (why)`.
pub fn summary(coverage: &[(String, Coverage)]) -> String {
    let count = |f: fn(&Coverage) -> bool| coverage.iter().filter(|(_, c)| f(c)).count();
    let reasons = |f: fn(&Coverage) -> Option<&String>| {
        let mut why: Vec<String> = coverage
            .iter()
            .filter_map(|(name, c)| f(c).map(|w| format!("{name}: {w}")))
            .collect();
        why.truncate(5);
        if why.is_empty() {
            String::new()
        } else {
            format!(" ({})", why.join("; "))
        }
    };
    format!(
        "imported {} operations: {} checked fully, {} checked partly{}, {} unchecked{}",
        coverage.len(),
        count(|c| matches!(c, Coverage::Full)),
        count(|c| matches!(c, Coverage::Partly(_))),
        reasons(|c| match c {
            Coverage::Partly(w) => Some(w),
            _ => None,
        }),
        count(|c| matches!(c, Coverage::Unchecked(_))),
        reasons(|c| match c {
            Coverage::Unchecked(w) => Some(w),
            _ => None,
        }),
    )
}
