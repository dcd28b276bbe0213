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
//! The produced value keeps numbers as serde_json does (`u64`/`i64` for integer literals,
//! `f64` otherwise), which is what [`crate::canon`] and schema validation expect.

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

/// Parses `input` as one I-JSON value with at most `max_depth` nested arrays/objects.
pub fn parse(input: &[u8], max_depth: usize) -> Result<Value, JsonError> {
    let text = std::str::from_utf8(input).map_err(|e| JsonError::InvalidUtf8(e.valid_up_to()))?;
    let mut p = Parser {
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

struct Parser<'a> {
    /// Known to be valid UTF-8: slicing between ASCII delimiters always yields a `str`.
    src: &'a [u8],
    pos: usize,
    depth: usize,
    max_depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
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

    fn value(&mut self) -> Result<Value, JsonError> {
        match self.peek() {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self
                .expect_literal(b"true", "true")
                .map(|_| Value::Bool(true)),
            Some(b'f') => self
                .expect_literal(b"false", "false")
                .map(|_| Value::Bool(false)),
            Some(b'n') => self.expect_literal(b"null", "null").map(|_| Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number().map(Value::Number),
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

    fn object(&mut self) -> Result<Value, JsonError> {
        self.enter()?;
        self.pos += 1; // '{'
        let mut map = Map::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Object(map));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("a member name"));
            }
            let name_at = self.pos;
            let name = self.string()?;
            self.skip_ws();
            if self.peek() != Some(b':') {
                return Err(self.syntax("':'"));
            }
            self.pos += 1;
            self.skip_ws();
            let value = self.value()?;
            if map.insert(name, value).is_some() {
                return Err(JsonError::DuplicateMember(name_at));
            }
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
        Ok(Value::Object(map))
    }

    fn array(&mut self) -> Result<Value, JsonError> {
        self.enter()?;
        self.pos += 1; // '['
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            self.depth -= 1;
            return Ok(Value::Array(items));
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
        Ok(Value::Array(items))
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1; // opening quote
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The run lies between ASCII delimiters of valid UTF-8, so it is a whole `str`.
            out.push_str(
                std::str::from_utf8(&self.src[run_start..self.pos])
                    .expect("input was validated as UTF-8 and runs end on ASCII bytes"),
            );
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => self.escape(&mut out)?,
                Some(_) => return Err(JsonError::ControlCharacter(self.pos)),
                None => return Err(self.syntax("'\"' closing the string")),
            }
        }
    }

    fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        let at = self.pos;
        self.pos += 1; // backslash
        let c = self
            .peek()
            .ok_or_else(|| self.syntax("an escape character"))?;
        self.pos += 1;
        match c {
            b'"' => out.push('"'),
            b'\\' => out.push('\\'),
            b'/' => out.push('/'),
            b'b' => out.push('\u{8}'),
            b'f' => out.push('\u{c}'),
            b'n' => out.push('\n'),
            b'r' => out.push('\r'),
            b't' => out.push('\t'),
            b'u' => {
                let first = self.hex4()?;
                let ch = match first {
                    0xD800..=0xDBFF => {
                        if !self.src[self.pos..].starts_with(b"\\u") {
                            return Err(JsonError::LoneSurrogate(at));
                        }
                        self.pos += 2;
                        let second = self.hex4()?;
                        if !(0xDC00..=0xDFFF).contains(&second) {
                            return Err(JsonError::LoneSurrogate(at));
                        }
                        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
                    }
                    0xDC00..=0xDFFF => return Err(JsonError::LoneSurrogate(at)),
                    other => other,
                };
                out.push(char::from_u32(ch).ok_or(JsonError::LoneSurrogate(at))?);
            }
            _ => {
                self.pos = at;
                return Err(self.syntax("a valid escape sequence"));
            }
        }
        Ok(())
    }

    fn hex4(&mut self) -> Result<u32, JsonError> {
        let digits = self
            .src
            .get(self.pos..self.pos + 4)
            .ok_or_else(|| self.syntax("four hex digits"))?;
        let mut v = 0u32;
        for &d in digits {
            let n = (d as char)
                .to_digit(16)
                .ok_or_else(|| self.syntax("four hex digits"))?;
            v = v * 16 + n;
        }
        self.pos += 4;
        Ok(v)
    }

    fn digits(&mut self) -> usize {
        let start = self.pos;
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
        self.pos - start
    }

    fn number(&mut self) -> Result<Number, JsonError> {
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
        let text =
            std::str::from_utf8(&self.src[start..self.pos]).expect("a number literal is ASCII");
        if is_integer {
            // 2^53 − 1 has 16 digits: anything longer is out of range without parsing.
            let magnitude_digits = &self.src[int_start..int_end];
            if magnitude_digits.len() > 16 {
                return Err(JsonError::UnsafeInteger(start));
            }
            let magnitude: u64 = std::str::from_utf8(magnitude_digits)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or(JsonError::UnsafeInteger(start))?;
            if magnitude > MAX_SAFE_INTEGER {
                return Err(JsonError::UnsafeInteger(start));
            }
            return Ok(if negative {
                // `magnitude` ≤ 2^53 − 1, so the negation cannot overflow.
                Number::from(-(magnitude as i64))
            } else {
                Number::from(magnitude)
            });
        }
        let v: f64 = text.parse().map_err(|_| self.syntax("a number"))?;
        Number::from_f64(v).ok_or(JsonError::NumberOutOfRange(start))
    }
}

#[cfg(test)]
mod tests;
