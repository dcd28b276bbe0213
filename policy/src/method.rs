//! Which requests are writes, by method (SPEC §4, fail-closed).
//!
//! A method is a read only when it is listed as safe (`ptcl.reads`: `GET`, `HEAD`, `OPTIONS`
//! by default). Every other method is a write, whether `ptcl.writes` names it or not: WebDAV's
//! `MKCOL`, `MOVE`, `PROPPATCH`, a `PURGE` or a made-up `MERGE` all change state somewhere, and
//! a sidecar that forwarded what it did not recognise would be one spelling away from a bypass.
//!
//! Refused before anything else:
//! - `CONNECT` (a tunnel past every check) and `TRACE` (reflects headers, credentials among
//!   them): 405;
//! - a case variant of a known method (`put`, `Put`, `gEt`): method names are case-sensitive
//!   tokens (RFC 9110 §9.1), but many frameworks upper-case them or dispatch without regard
//!   to case, so `put` would be checked as an unknown method and run as `PUT`. Refused (400),
//!   not treated as its upper-case form: a client that sends it is broken or probing.

use crate::codes::{ErrorCode, Refusal};

/// What a method makes of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodClass {
    /// Listed as safe: forwarded (and streamed) without a lease.
    Read,
    /// Anything else: enforced.
    Write,
}

/// Methods a client might send in another case; their variants are refused.
const KNOWN: &[&str] = &[
    "GET",
    "HEAD",
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "OPTIONS",
    "CONNECT",
    "TRACE",
    "QUERY",
    "PROPFIND",
    "PROPPATCH",
    "MKCOL",
    "COPY",
    "MOVE",
    "LOCK",
    "UNLOCK",
    "MERGE",
    "PURGE",
    "SEARCH",
    "REPORT",
    "LINK",
    "UNLINK",
];

/// Classifies `method` given the safe methods `reads` and the configured `writes` (both
/// upper case). `Err` is the refusal to answer with.
pub fn classify<R: AsRef<str>, W: AsRef<str>>(
    method: &str,
    reads: &[R],
    writes: &[W],
) -> Result<MethodClass, Refusal> {
    if matches!(method, "CONNECT" | "TRACE") {
        return Err(Refusal::new(
            ErrorCode::MethodNotAllowed,
            "CONNECT and TRACE are not forwarded",
        ));
    }
    if method.bytes().any(|b| b.is_ascii_lowercase()) {
        let upper = method.to_ascii_uppercase();
        let named = |m: &str| m == upper;
        if KNOWN.iter().any(|m| named(m))
            || reads.iter().any(|m| named(m.as_ref()))
            || writes.iter().any(|m| named(m.as_ref()))
        {
            return Err(Refusal::new(
                ErrorCode::MethodNotCanonical,
                "the method is a case variant of a known method; send it in upper case",
            ));
        }
    }
    Ok(if reads.iter().any(|m| m.as_ref() == method) {
        MethodClass::Read
    } else {
        MethodClass::Write
    })
}

/// Headers that ask an application to run another method than the request line's. On a
/// write they are refused; on a read they are removed, so a `GET` can never become a
/// `DELETE` behind the sidecar.
pub const OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

#[cfg(test)]
mod tests {
    use super::*;

    const READS: &[&str] = &["GET", "HEAD", "OPTIONS"];
    const WRITES: &[&str] = &["POST", "PUT", "PATCH", "DELETE"];

    #[test]
    fn methods_are_classified_fail_closed() {
        let rows: &[(&str, Result<MethodClass, ErrorCode>)] = &[
            ("GET", Ok(MethodClass::Read)),
            ("HEAD", Ok(MethodClass::Read)),
            ("OPTIONS", Ok(MethodClass::Read)),
            ("PUT", Ok(MethodClass::Write)),
            ("DELETE", Ok(MethodClass::Write)),
            ("MERGE", Ok(MethodClass::Write)),
            ("PROPPATCH", Ok(MethodClass::Write)),
            ("MKCOL", Ok(MethodClass::Write)),
            ("MOVE", Ok(MethodClass::Write)),
            ("COPY", Ok(MethodClass::Write)),
            ("LOCK", Ok(MethodClass::Write)),
            ("PURGE", Ok(MethodClass::Write)),
            ("FROBNICATE", Ok(MethodClass::Write)),
            ("frobnicate", Ok(MethodClass::Write)),
            ("CONNECT", Err(ErrorCode::MethodNotAllowed)),
            ("TRACE", Err(ErrorCode::MethodNotAllowed)),
            ("put", Err(ErrorCode::MethodNotCanonical)),
            ("Put", Err(ErrorCode::MethodNotCanonical)),
            ("get", Err(ErrorCode::MethodNotCanonical)),
            ("connect", Err(ErrorCode::MethodNotCanonical)),
            ("merge", Err(ErrorCode::MethodNotCanonical)),
        ];
        for (m, want) in rows {
            let got = classify(m, READS, WRITES).map_err(|r| r.code);
            assert_eq!(got, *want, "{m}");
        }
    }

    #[test]
    fn configured_methods_count_as_known() {
        assert_eq!(
            classify("report2", READS, &["REPORT2"]).map_err(|r| r.code),
            Err(ErrorCode::MethodNotCanonical)
        );
        assert_eq!(
            classify("REPORT2", &["REPORT2"], WRITES),
            Ok(MethodClass::Read)
        );
    }
}
