//! A strict I-JSON (RFC 7493) parser producing `serde_json::Value`.
//!
//! Why not `serde_json::from_slice`: serde_json keeps the last of duplicate member names and
//! turns an integer literal too large for `u64` into a float, so two parsers could disagree on
//! what a signed document says. Everything Palisade signs, verifies or hashes is parsed here
//! instead, and refused when it is not I-JSON:
//! - the input must be UTF-8 (RFC 8259 §8.1; no byte-order mark);
//! - member names must be unique within an object (RFC 7493 §2.3);
//! - strings must not contain lone surrogates, also not as `\uD800` escapes (§2.1);
//! - integer literals must lie within ±(2^53−1) (§2.2) and no number may overflow a double;
//! - nesting is bounded by `max_depth`, so hostile input cannot exhaust the stack.
//!
//! The parser builds a borrowed [`Node`] tree: strings without escapes point into the input,
//! and object members are sorted into RFC 8785 order (UTF-16 code units) as each object closes,
//! which is also where duplicates are found (they end up adjacent). [`crate::canon`] writes
//! that tree straight out; [`parse`] converts it to a `serde_json::Value` (integer literals
//! as `u64`/`i64`, others as `f64`) for code that wants one.

mod strings;

use std::borrow::Cow;
use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// The largest integer I-JSON lets a receiver treat as exact: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why an input is not acceptable I-JSON. Offsets are byte offsets into the input; no variant
/// carries any part of the input itself (it may be a secret).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    #[error("input is not valid UTF-8 (at byte {0})")]
    InvalidUtf8(usize),
    #[error("syntax error at byte {offset}: expected {expected}")]
    Syntax {
        offset: usize,
        expected: &'static str,
    },
    #[error("duplicate member name in object (at byte {0})")]
    DuplicateMember(usize),
    #[error("lone surrogate in string (at byte {0})")]
    LoneSurrogate(usize),
    #[error("unescaped control character in string (at byte {0})")]
    ControlCharacter(usize),
    #[error("integer outside ±(2^53−1) (at byte {0})")]
    UnsafeInteger(usize),
    #[error("number out of the IEEE 754 double range (at byte {0})")]
    NumberOutOfRange(usize),
    #[error("nesting deeper than {0} levels")]
    TooDeep(usize),
    #[error("data after the JSON value (at byte {0})")]
    TrailingData(usize),
}

/// A parsed I-JSON value borrowing from its input.
#[derive(Debug, Clone, PartialEq)]
pub enum Node<'a> {
    Null,
    Bool(bool),
    /// An integer literal, within ±(2^53−1).
    Int(i64),
    /// Any other number literal (finite).
    Float(f64),
    /// `Borrowed` when the input held no escapes (so the text needs none when written back).
    Str(Cow<'a, str>),
    Array(Vec<Node<'a>>),
    /// Members sorted by the UTF-16 code units of their names, no two names equal.
    Object(Vec<Member<'a>>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Member<'a> {
    pub name: Cow<'a, str>,
    /// Whether `name` holds a supplementary-plane character (so byte order ≠ UTF-16 order).
    astral: bool,
    /// Byte offset of the name in the input (for error messages).
    at: usize,
    pub value: Node<'a>,
}

impl Node<'_> {
    /// Converts to a `serde_json::Value`.
    pub fn to_value(&self) -> Value {
        match self {
            Node::Null => Value::Null,
            Node::Bool(b) => Value::Bool(*b),
            Node::Int(i) => Value::Number(Number::from(*i)),
            Node::Float(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Node::Str(s) => Value::String(s.to_string()),
            Node::Array(items) => Value::Array(items.iter().map(Node::to_value).collect()),
            Node::Object(members) => Value::Object(
                members
                    .iter()
                    .map(|m| (m.name.to_string(), m.value.to_value()))
                    .collect::<Map<String, Value>>(),
            ),
        }
    }
}

/// RFC 8785 §3.2.3 member order: by UTF-16 code units. UTF-8 byte order equals code-point
/// order, which differs from UTF-16 order only when a supplementary-plane character meets
/// one in U+E000..U+FFFF, so the byte comparison is used unless a name is `astral`.
pub fn cmp_names(a: &str, a_astral: bool, b: &str, b_astral: bool) -> Ordering {
    if a_astral || b_astral {
        a.encode_utf16().cmp(b.encode_utf16())
    } else {
        a.as_bytes().cmp(b.as_bytes())
    }
}

/// Parses `input` as one I-JSON value with at most `max_depth` nested arrays/objects.
pub fn parse(input: &[u8], max_depth: usize) -> Result<Value, JsonError> {
    parse_tree(input, max_depth).map(|n| n.to_value())
}

/// Parses `input` into a borrowed tree (see [`Node`]).
pub fn parse_tree(input: &[u8], max_depth: usize) -> Result<Node<'_>, JsonError> {
    let text = std::str::from_utf8(input).map_err(|e| JsonError::InvalidUtf8(e.valid_up_to()))?;
    let mut p = Parser {
        text,
        src: text.as_bytes(),
        pos: 0,
        depth: 0,
        max_depth,
    };
    p.skip_ws();
    let value = p.value()?;
    p.skip_ws();
    if p.pos != p.src.len() {
        return Err(JsonError::TrailingData(p.pos));
    }
    Ok(value)
}

const PLAIN: u8 = 0;
const STOP: u8 = 1;
const ASTRAL_LEAD: u8 = 2;

/// For string scanning: `"`, `\\` and control characters end a plain run; bytes 0xF0.. lead
/// supplementary-plane characters.
static BYTE_CLASS: [u8; 256] = {
    let mut t = [PLAIN; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = STOP;
        i += 1;
    }
    t[b'"' as usize] = STOP;
    t[b'\\' as usize] = STOP;
    let mut i = 0xF0;
    while i < 256 {
        t[i] = ASTRAL_LEAD;
        i += 1;
    }
    t
};

struct Parser<'a> {
    /// The input, known to be UTF-8; slices are taken at ASCII delimiters only.
    text: &'a str,
    src: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        let n = self.src[self.pos..]
            .iter()
            .position(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .unwrap_or(self.src.len() - self.pos);
        self.pos += n;
    }

    fn syntax(&self, expected: &'static str) -> JsonError {
        JsonError::Syntax {
            offset: self.pos,
            expected,
        }
    }

    fn expect_literal(&mut self, lit: &'static [u8], what: &'static str) -> Result<(), JsonError> {
        if self.src[self.pos..].starts_with(lit) {
            self.pos += lit.len();
            Ok(())
        } else {
            Err(self.syntax(what))
        }
    }

    fn value(&mut self) -> Result<Node<'a>, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Node::Str(self.string()?.0)),
            Some(b't') => self
                .expect_literal(b"true", "true")
                .map(|_| Node::Bool(true)),
            Some(b'f') => self
                .expect_literal(b"false", "false")
                .map(|_| Node::Bool(false)),
            Some(b'n') => self.expect_literal(b"null", "null").map(|_| Node::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            _ => Err(self.syntax("a JSON value")),
        }
    }

    fn enter(&mut self) -> Result<(), JsonError> {
        self.depth += 1;
        if self.depth > self.max_depth {
            return Err(JsonError::TooDeep(self.max_depth));
        }
        Ok(())
    }

    fn object(&mut self) -> Result<Node<'a>, JsonError> {
        self.enter()?;
        self.pos += 1; // '{'
        let mut members: Vec<Member<'a>> = Vec::with_capacity(8);
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a member name"));
            }
            let at = self.pos;
            let (name, astral) = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            members.push(Member {
                name,
                astral,
                at,
                value,
            });
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("',' or '}'")),
            }
        }
        self.depth -= 1;
        // Sorting puts members in canonical order and duplicates next to each other. The
        // sort is stable, so the later of two duplicates is the one reported.
        members.sort_by(|a, b| cmp_names(&a.name, a.astral, &b.name, b.astral));
        if let Some(w) = members.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(JsonError::DuplicateMember(w[0].at.max(w[1].at)));
        }
        Ok(Node::Object(members))
    }

    fn array(&mut self) -> Result<Node<'a>, JsonError> {
        self.enter()?;
        self.pos += 1; // '['
        let mut items = Vec::with_capacity(8);
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Node::Array(items));
        }
        loop {
            self.skip_ws();
            items.push(self.value()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.syntax("',' or ']'")),
            }
        }
        self.depth -= 1;
        Ok(Node::Array(items))
    }

    fn digits(&mut self) -> usize {
        let n = self.src[self.pos..]
            .iter()
            .position(|b| !b.is_ascii_digit())
            .unwrap_or(self.src.len() - self.pos);
        self.pos += n;
        n
    }

    fn number(&mut self) -> Result<Node<'a>, JsonError> {
        let start = self.pos;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.pos += 1;
        }
        let int_start = self.pos;
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => {
                self.digits();
            }
            _ => return Err(self.syntax("a digit")),
        }
        let int_end = self.pos;
        let mut is_integer = true;
        if self.peek() == Some(b'.') {
            self.pos += 1;
            is_integer = false;
            if self.digits() == 0 {
                return Err(self.syntax("a digit after '.'"));
            }
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            is_integer = false;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if self.digits() == 0 {
                return Err(self.syntax("a digit in the exponent"));
            }
        }
        if is_integer {
            // 2^53 − 1 has 16 digits: anything longer is out of range without parsing.
            let digits = &self.src[int_start..int_end];
            if digits.len() > 16 {
                return Err(JsonError::UnsafeInteger(start));
            }
            let magnitude = digits
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            if magnitude > MAX_SAFE_INTEGER {
                return Err(JsonError::UnsafeInteger(start));
            }
            // `magnitude` ≤ 2^53 − 1, so it fits an i64 and its negation cannot overflow.
            let m = magnitude as i64;
            return Ok(Node::Int(if negative { -m } else { m }));
        }
        let v: f64 = self.text[start..self.pos]
            .parse()
            .map_err(|_| self.syntax("a number"))?;
        if !v.is_finite() {
            return Err(JsonError::NumberOutOfRange(start));
        }
        Ok(Node::Float(v))
    }
}

#[cfg(test)]
mod tests;
