//! The words a recipe and a proposal are written in (seed 000 §3.6 steps 1–2, RFC 6749
//! §3.3): method tokens, endpoint paths, scope tokens. Pure string checks, shared by the
//! recipe compiler and the proposal evaluator.

/// Whether `s` is a scope token: 1–128 visible ASCII characters, no space or quote (RFC 6749
/// §3.3's `scope-token`, which Authority-Scope lists the same way).
pub fn is_scope_token(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b == 0x21 || (0x23..=0x5b).contains(&b) || (0x5d..=0x7e).contains(&b))
}

/// A method token (seed 000 §3.6 step 1; AGTP-METHODS names verbs in upper case).
pub fn is_method(m: &str) -> bool {
    let b = m.as_bytes();
    (1..=32).contains(&b.len())
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-')
}

/// The path grammar a proposed endpoint must keep to (seed 000 §3.6 step 2): absolute,
/// 1–32 non-empty segments of unreserved characters (RFC 3986 §2.3) or `{name}`
/// parameters, at most 256 bytes; no `.`/`..` segment, query or fragment.
pub fn is_path(p: &str) -> bool {
    let Some(rest) = p.strip_prefix('/') else {
        return false;
    };
    if p.len() > 256 || rest.is_empty() {
        return false;
    }
    let segments: Vec<&str> = rest.split('/').collect();
    segments.len() <= 32
        && segments.iter().all(|s| {
            let param = s
                .strip_prefix('{')
                .and_then(|s| s.strip_suffix('}'))
                .is_some_and(|n| {
                    !n.is_empty() && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                });
            let plain = !s.is_empty()
                && *s != "."
                && *s != ".."
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-._~".contains(&b));
            param || plain
        })
}
