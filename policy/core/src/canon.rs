//! RFC 8785 JSON Canonicalization Scheme (JCS).
//!
//! Serialises a parsed value the one way RFC 8785 allows: no whitespace, object members sorted
//! by the UTF-16 code units of their names (§3.2.3), numbers in ECMAScript's
//! `Number.prototype.toString` form (§3.2.2.3, via `ryu-js`), strings with the minimal escaping
//! of §3.2.2.2. Input is parsed by [`crate::json`], so what is canonicalised is always I-JSON.
//!
//! Not here: any notion of which members to leave out before signing; callers remove the
//! `signature` member themselves, so that what is signed is visible at the call site.

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::json::{self, JsonError, Node};

/// Parses `input` as I-JSON (nesting bounded by `max_depth`) and returns its canonical form.
pub fn canonicalize(input: &[u8], max_depth: usize) -> Result<Vec<u8>, JsonError> {
    let tree = json::parse_tree(input, max_depth)?;
    let mut out = Vec::with_capacity(input.len());
    write_node(&mut out, &tree);
    Ok(out)
}

/// Appends the canonical form of a parsed tree (whose members are already in JCS order).
pub fn write_node(out: &mut Vec<u8>, node: &Node<'_>) {
    match node {
        Node::Null => out.extend_from_slice(b"null"),
        Node::Bool(true) => out.extend_from_slice(b"true"),
        Node::Bool(false) => out.extend_from_slice(b"false"),
        Node::Int(i) => out.extend_from_slice(itoa::Buffer::new().format(*i).as_bytes()),
        Node::Float(f) => write_f64(out, *f),
        Node::Str(s) => write_str_cow(out, s),
        Node::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_node(out, item);
            }
            out.push(b']');
        }
        Node::Object(members) => {
            write_members_noting(out, members, None);
        }
    }
}

// The `Cow` itself is the information: `Borrowed` means the input had no escapes.
#[allow(clippy::ptr_arg)]
fn write_str_cow(out: &mut Vec<u8>, s: &Cow<'_, str>) {
    match s {
        // A borrowed string had no escapes in the input, so it has no character that needs
        // one: no quote, backslash or control character.
        Cow::Borrowed(s) => {
            out.push(b'"');
            out.extend_from_slice(s.as_bytes());
            out.push(b'"');
        }
        Cow::Owned(s) => write_string(out, s),
    }
}

/// Writes an object and returns the byte range to cut out of `out` to get the canonical form
/// of the same object without member `skip` (JCS concatenates members in order, so dropping
/// one member and its separating comma leaves the canonical form of the rest). Signed
/// documents use this to get "JCS of the whole" and "JCS without `signature`" from one pass.
pub fn write_members_noting(
    out: &mut Vec<u8>,
    members: &[json::Member<'_>],
    skip: Option<&str>,
) -> Option<std::ops::Range<usize>> {
    let mut cut = None;
    out.push(b'{');
    for (i, m) in members.iter().enumerate() {
        let start = out.len();
        if i > 0 {
            out.push(b',');
        }
        write_str_cow(out, &m.name);
        out.push(b':');
        write_node(out, &m.value);
        if Some(m.name.as_ref()) == skip {
            // The first member has no leading comma: take the next member's instead.
            let end = if i == 0 && members.len() > 1 {
                out.len() + 1
            } else {
                out.len()
            };
            cut = Some(start..end);
        }
    }
    out.push(b'}');
    cut
}

/// `full` with `cut` removed.
pub fn without(full: &[u8], cut: std::ops::Range<usize>) -> Vec<u8> {
    let mut v = Vec::with_capacity(full.len() - cut.len());
    v.extend_from_slice(&full[..cut.start]);
    v.extend_from_slice(&full[cut.end..]);
    v
}

/// The canonical form of an already-parsed value.
pub fn to_vec(value: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write_value(&mut out, value);
    out
}

/// Appends the canonical form of `value` to `out`.
pub fn write_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_value(out, item);
            }
            out.push(b']');
        }
        Value::Object(map) => write_object(out, map),
    }
}

fn write_object(out: &mut Vec<u8>, map: &Map<String, Value>) {
    out.push(b'{');
    // serde_json's map iterates in code-point order. UTF-16 order differs from it only when a
    // name holds a supplementary-plane character (surrogates sort below U+E000..U+FFFF), which
    // is rare: sort only then.
    if map.keys().any(|k| k.bytes().any(|b| b >= 0xF0)) {
        let mut members: Vec<(&String, &Value)> = map.iter().collect();
        members.sort_by(|a, b| a.0.encode_utf16().cmp(b.0.encode_utf16()));
        write_members(out, members.into_iter());
    } else {
        write_members(out, map.iter());
    }
    out.push(b'}');
}

fn write_members<'a>(out: &mut Vec<u8>, members: impl Iterator<Item = (&'a String, &'a Value)>) {
    for (i, (name, value)) in members.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_string(out, name);
        out.push(b':');
        write_value(out, value);
    }
}

fn write_number(out: &mut Vec<u8>, n: &serde_json::Number) {
    if let Some(u) = n.as_u64() {
        if u <= json::MAX_SAFE_INTEGER {
            out.extend_from_slice(itoa::Buffer::new().format(u).as_bytes());
            return;
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= json::MAX_SAFE_INTEGER {
            out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes());
            return;
        }
    }
    // Doubles, and integers built elsewhere beyond 2^53 (which ECMAScript would round).
    write_f64(
        out,
        n.as_f64()
            .expect("serde_json numbers always convert to f64"),
    );
}

/// ECMAScript `Number.prototype.toString` of a finite double (RFC 8785 §3.2.2.3).
fn write_f64(out: &mut Vec<u8>, f: f64) {
    if f == 0.0 {
        // ECMAScript prints −0 as "0".
        out.push(b'0');
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.extend_from_slice(buf.format_finite(f).as_bytes());
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut run_start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let escape: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\x08' => b"\\b",
            b'\x0c' => b"\\f",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[run_start..i]);
        if escape.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(escape);
        }
        run_start = i + 1;
    }
    out.extend_from_slice(&bytes[run_start..]);
    out.push(b'"');
}

/// Formats one double as RFC 8785 requires (used by the ES6 number vectors).
#[doc(hidden)]
pub fn format_f64(f: f64) -> Option<String> {
    let n = serde_json::Number::from_f64(f)?;
    let mut out = Vec::new();
    write_number(&mut out, &n);
    String::from_utf8(out).ok()
}

/// Fuzzing entry point: parse and canonicalise arbitrary bytes; what is accepted must reach a
/// fixed point. Panics (for the fuzzer to report) only if that property breaks.
#[doc(hidden)]
pub fn fuzz_canonical_fixed_point(data: &[u8]) {
    let Ok(once) = canonicalize(data, 64) else {
        return;
    };
    match canonicalize(&once, 64) {
        Ok(twice) => assert_eq!(once, twice, "canonicalisation is not idempotent"),
        // The one documented exception: an integral double in [2^53, 1e21) prints as a
        // digit string that I-JSON refuses as an unsafe integer.
        Err(JsonError::UnsafeInteger(_)) => {}
        Err(e) => panic!("canonical output does not re-parse: {e}"),
    }
}

#[cfg(test)]
mod tests;
