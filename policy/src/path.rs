//! The canonical form of a request path: the one value routing, bindings, the lease's target,
//! fence and pre-image keys, reserved prefixes, receipts *and the request line sent upstream*
//! are all derived from (ARCHITECTURE.md, "Decide on what you forward").
//!
//! RFC 3986 §6.2.2 normalisation, done once:
//! - a percent-encoded unreserved character (`ALPHA DIGIT - . _ ~`) is decoded, every other
//!   escape keeps its encoding with upper-case hex (`%2f` → refused, `%3a` → `%3A`);
//! - a raw byte outside the URI character set is percent-encoded (hyper lets some through);
//! - empty segments are merged (`//a` → `/a`; a trailing `/` is kept: `/a/` is not `/a`);
//! - dot segments are removed, after decoding (`/a/%2e%2e/b` → `/b`).
//!
//! Refused, because no canonical form exists without guessing what the application does (the
//! same choices as Envoy's `normalize_path` with `path_with_escaped_slashes_action:
//! REJECT_REQUEST`, which made them after its own path-confusion advisories):
//! - an encoded `/` or `\` (`%2F`, `%5C`): some applications decode them into separators;
//! - a raw `\`: some servers (IIS, and Python's `http.server` on Windows) treat it as `/`;
//! - a NUL or other control character, raw or encoded;
//! - an escape that does not decode to valid UTF-8 once the unreserved ones are decoded, or a
//!   malformed escape (`%zz`, `%4`);
//! - a dot segment with a path parameter (`..;x`, `.;x`): Tomcat and Jetty read it as `..`;
//! - a path that climbs above the root (`/../x`): RFC 3986 clamps it, many servers do not.
//!
//! The query is not touched here: applications parse queries in too many ways to rewrite one.

use std::borrow::Cow;
use std::fmt::Write as _;

/// Why a path has no canonical form.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path does not start with '/'")]
    NotOriginForm,
    #[error("the path has a malformed percent-encoding")]
    BadEscape,
    #[error("the path has an encoded '/' or '\\' (%2F, %5C)")]
    EncodedSeparator,
    #[error("the path has a backslash")]
    Backslash,
    #[error("the path has a NUL or control character")]
    Control,
    #[error("the path does not decode to UTF-8")]
    NotUtf8,
    #[error("the path has a dot segment with parameters (';')")]
    DotSegmentParameters,
    #[error("the path climbs above the root")]
    AboveRoot,
    #[error("the path is longer than {MAX_PATH} bytes")]
    TooLong,
}

/// Longest path accepted (hyper's own request-line limit is larger; a path this long is an
/// attack or a mistake, and every segment is copied once).
pub const MAX_PATH: usize = 8 * 1024;

fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// Characters RFC 3986 allows raw in a path segment (`pchar` minus `%`), besides unreserved.
fn is_pchar_other(b: u8) -> bool {
    matches!(
        b,
        b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+' | b',' | b';' | b'=' | b':' | b'@'
    )
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// One segment, escapes normalised; also checks that its decoded bytes are UTF-8.
fn canonical_segment(seg: &[u8], out: &mut String) -> Result<(), PathError> {
    let mut decoded = Vec::with_capacity(seg.len());
    let mut i = 0;
    while i < seg.len() {
        let b = seg[i];
        if b == b'%' {
            let (Some(h), Some(l)) = (
                seg.get(i + 1).copied().and_then(hex),
                seg.get(i + 2).copied().and_then(hex),
            ) else {
                return Err(PathError::BadEscape);
            };
            let v = h << 4 | l;
            match v {
                b'/' | b'\\' => return Err(PathError::EncodedSeparator),
                0..=0x1f | 0x7f => return Err(PathError::Control),
                _ if is_unreserved(v) => out.push(v as char),
                _ => {
                    let _ = write!(out, "%{v:02X}");
                }
            }
            decoded.push(v);
            i += 3;
            continue;
        }
        match b {
            b'\\' => return Err(PathError::Backslash),
            0..=0x1f | 0x7f => return Err(PathError::Control),
            _ if is_unreserved(b) || is_pchar_other(b) => out.push(b as char),
            // Anything else raw (space, quotes, non-ASCII, …) gets its one encoded spelling.
            _ => {
                let _ = write!(out, "%{b:02X}");
            }
        }
        decoded.push(b);
        i += 1;
    }
    if std::str::from_utf8(&decoded).is_err() {
        return Err(PathError::NotUtf8);
    }
    Ok(())
}

/// The canonical form of an origin-form path (no query). Canonicalising a canonical path
/// gives it back unchanged.
pub fn canonical_path(raw: &str) -> Result<String, PathError> {
    canonical(raw).map(Cow::into_owned)
}

/// [`canonical_path`], borrowing `raw` when it is canonical already — what almost every
/// request's path is, and what the data plane checks on every request (issue 19).
pub fn canonical(raw: &str) -> Result<Cow<'_, str>, PathError> {
    if is_canonical(raw) {
        return Ok(Cow::Borrowed(raw));
    }
    rebuild(raw).map(Cow::Owned)
}

/// A path the rebuild would give back byte for byte, decided without allocating: it starts
/// with `/`, fits [`MAX_PATH`], has only unreserved and other raw `pchar` bytes (so no escape,
/// nothing to encode, no `\`, no control), no empty segment but a trailing one (`/a/` keeps
/// its `/`), and no segment whose part before a `;` is `.` or `..`. Anything else takes the
/// rebuild, which also owns every refusal. `false` for some canonical paths (those with
/// escapes); [`canonical_path`] decides those.
pub fn is_canonical(raw: &str) -> bool {
    let b = raw.as_bytes();
    if b.first() != Some(&b'/') || b.len() > MAX_PATH {
        return false;
    }
    // One pass, segment by segment; `i` is at a segment's first byte.
    let mut i = 1;
    while i < b.len() {
        let start = i;
        let mut params = None;
        while i < b.len() && b[i] != b'/' {
            let c = b[i];
            if !(is_unreserved(c) || is_pchar_other(c)) {
                return false;
            }
            if c == b';' && params.is_none() {
                params = Some(i);
            }
            i += 1;
        }
        // An empty segment before another `/` is a `//`; only the last one may be empty.
        if i == start && i < b.len() {
            return false;
        }
        if matches!(&b[start..params.unwrap_or(i)], b"." | b"..") {
            return false;
        }
        i += 1;
    }
    true
}

fn rebuild(raw: &str) -> Result<String, PathError> {
    if raw.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    let Some(rest) = raw.strip_prefix('/') else {
        return Err(PathError::NotOriginForm);
    };
    let mut segments: Vec<String> = Vec::new();
    // Whether the last segment names a directory (`/a/`, `/a/.`, `/a/b/..` all end in `/`).
    let mut trailing_slash = false;
    for part in rest.split('/') {
        let mut seg = String::with_capacity(part.len());
        canonical_segment(part.as_bytes(), &mut seg)?;
        trailing_slash = matches!(seg.as_str(), "" | "." | "..");
        match seg.as_str() {
            // Empty segments merge (`//`); `.` is this directory.
            "" | "." => {}
            ".." => {
                if segments.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
            }
            s if s.split(';').next().is_some_and(|d| d == "." || d == "..") => {
                return Err(PathError::DotSegmentParameters)
            }
            _ => segments.push(seg),
        }
    }
    let mut out = String::with_capacity(raw.len());
    for s in &segments {
        out.push('/');
        out.push_str(s);
    }
    if segments.is_empty() || trailing_slash {
        out.push('/');
    }
    // Encoding raw bytes can triple a path: the canonical form must fit the same bound, or
    // the path that is forwarded (and re-read, e.g. as an inverse) would be refused later.
    if out.len() > MAX_PATH {
        return Err(PathError::TooLong);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
