//! The caller a credential names (SPEC §14): one credential is one caller, however its
//! `Authorization` header spells the scheme.
//!
//! Without an admission token or a client certificate, a caller is `authz:sha256:<hex>` over
//! its `Authorization` value normalised as RFC 9110 §11 reads it: the auth-scheme is
//! case-insensitive (§11.1), so it is lower-cased; the scheme and the credential are one
//! space apart however many the client sent; the credential stays exactly as sent (token68
//! and auth-params are case-sensitive). `Bearer X`, `bearer X`, `BEARER X` and `Bearer  X`
//! are one caller; `Bearer x` is another. Receipts, budgets, freezes, idempotency scopes and
//! lease ownership all read this one value, so none can be dodged by a respelling.

use crate::digest::Sha256Digest;

/// The normalised form of an `Authorization` value: `scheme` lower-cased, one space, the
/// credential as sent (leading and trailing blanks dropped).
pub fn normalized_authorization(value: &[u8]) -> Vec<u8> {
    let blank = |b: &u8| *b == b' ' || *b == b'\t';
    let start = value.iter().position(|b| !blank(b)).unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|b| !blank(b))
        .map_or(start, |i| i + 1);
    let value = &value[start..end];
    let scheme_end = value.iter().position(blank).unwrap_or(value.len());
    let (scheme, rest) = value.split_at(scheme_end);
    let credential = &rest[rest.iter().position(|b| !blank(b)).unwrap_or(rest.len())..];
    let mut out = Vec::with_capacity(value.len());
    out.extend(scheme.iter().map(u8::to_ascii_lowercase));
    if !credential.is_empty() {
        out.push(b' ');
        out.extend_from_slice(credential);
    }
    out
}

/// The caller an `Authorization` value names: `authz:sha256:<hex>` of its normalised form.
pub fn authorization_caller(value: &[u8]) -> String {
    format!(
        "authz:{}",
        Sha256Digest::of(&normalized_authorization(value))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_credential_is_one_caller_however_the_scheme_is_spelled() {
        let one = authorization_caller(b"Bearer X");
        for spelling in [
            &b"bearer X"[..],
            b"BEARER X",
            b"Bearer  X",
            b"Bearer\tX",
            b" Bearer X ",
            b"bEaReR   X",
        ] {
            assert_eq!(
                authorization_caller(spelling),
                one,
                "{}",
                String::from_utf8_lossy(spelling)
            );
        }
        assert_eq!(
            authorization_caller(b"Bearer X"),
            format!("authz:{}", Sha256Digest::of(b"bearer X"))
        );
        // The credential is as sent: another token, another caller.
        for other in [&b"Bearer x"[..], b"Basic X", b"Bearer XX", b"BearerX"] {
            assert_ne!(authorization_caller(other), one);
        }
        // Internal spacing of auth-params is the credential's own.
        assert_ne!(
            authorization_caller(b"Digest a=1,  b=2"),
            authorization_caller(b"Digest a=1, b=2")
        );
        assert_eq!(normalized_authorization(b"Negotiate"), b"negotiate");
        assert_eq!(normalized_authorization(b""), b"");
    }
}
