//! RICH admission (seed 002 §12, SPEC §13): a call to a bound operation is admitted only under
//! an access token whose `authorization_details` name the operation and the digest of the
//! contract in force, and whose granted bound the call's input keeps to.
//!
//! - [`token`]: JWT access tokens (RFC 9068) against the issuers' JWKS.
//! - [`grant`]: the `rich_binding` entries, the decidable fragment of bounds, the decision.

pub mod grant;
pub mod token;

pub use grant::{admit, check_input, needed, Bound, Call, Grant, Operation};
pub use token::{from_introspection, is_jwt, kid_of, verify, Keys, Rules, Verified};

/// Whether a query string names `access_token` (RFC 6750 §2.3), in any spelling a form parser
/// decodes to it (`access%5Ftoken`, `%61ccess_token`). Every pair is read, however many: a
/// sidecar that takes tokens from `Authorization` only refuses these (RFC 9700 §2.4.2: a
/// bearer token in a URL ends up in logs), and a prefix would let one through (issue 44).
pub fn token_in_query(query: &str) -> bool {
    // Most queries have neither an escape nor the name: no decoding for them.
    if !query.contains('%') && !query.contains("access_token") {
        return false;
    }
    url::form_urlencoded::parse(query.as_bytes()).any(|(k, _)| k == "access_token")
}

#[cfg(test)]
mod query_tests {
    use super::token_in_query;

    #[test]
    fn every_spelling_of_the_name_is_found_anywhere_in_the_query() {
        for q in [
            "access_token=x",
            "a=1&access_token=",
            "access%5Ftoken=x",
            "access%5ftoken=x",
            "%61ccess_token=x",
            "access_token",
            "a=1&&access_token=x&b=2",
        ] {
            assert!(token_in_query(q), "{q}");
        }
        let far = format!("{}access_token=x", "f=1&".repeat(5000));
        assert!(token_in_query(&far));
        for q in [
            "",
            "token=x",
            "access_token_x=1",
            "x=access_token",
            "access+token=1",
            "accesstoken=1",
        ] {
            assert!(!token_in_query(q), "{q}");
        }
    }
}
