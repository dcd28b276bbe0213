//! Strings, as the parser reads them (RFC 8259 §7, RFC 7493 §2.1): escapes decoded, lone
//! surrogates and invalid UTF-8 refused, borrowed from the input when nothing was escaped.

use std::borrow::Cow;

use super::{JsonError, Parser, ASTRAL_LEAD, BYTE_CLASS, PLAIN};

impl<'a> Parser<'a> {
    /// A string and whether it holds a supplementary-plane character. Borrowed when the
    /// input has no escapes in it.
    pub(super) fn string(&mut self) -> Result<(Cow<'a, str>, bool), JsonError> {
        self.pos += 1; // opening quote
        let start = self.pos;
        // Fast path: one table lookup per byte finds the end of a run without escapes and
        // notes supplementary-plane characters (their UTF-8 lead bytes are 0xF0..=0xF4).
        let rest = &self.src[start..];
        let mut run = 0;
        let mut astral = false;
        while let Some(&b) = rest.get(run) {
            match BYTE_CLASS[b as usize] {
                PLAIN => run += 1,
                ASTRAL_LEAD => {
                    astral = true;
                    run += 1;
                }
                _ => break,
            }
        }
        self.pos = start + run;
        match rest.get(run) {
            Some(b'"') => {
                let s = &self.text[start..self.pos];
                self.pos += 1;
                return Ok((Cow::Borrowed(s), astral));
            }
            Some(b'\\') => {}
            Some(_) => return Err(JsonError::ControlCharacter(self.pos)),
            None => return Err(self.syntax("'\"' closing the string")),
        }
        let mut out = String::from(&self.text[start..self.pos]);
        loop {
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                astral |= b >= 0xF0;
                self.pos += 1;
            }
            out.push_str(&self.text[run_start..self.pos]);
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok((Cow::Owned(out), astral));
                }
                Some(b'\\') => astral |= self.escape(&mut out)?,
                Some(_) => return Err(JsonError::ControlCharacter(self.pos)),
                None => return Err(self.syntax("'\"' closing the string")),
            }
        }
    }

    /// Decodes one escape into `out`; returns whether it was a supplementary-plane character.
    fn escape(&mut self, out: &mut String) -> Result<bool, JsonError> {
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
                return Ok(ch >= 0x10000);
            }
            _ => {
                self.pos = at;
                return Err(self.syntax("a valid escape sequence"));
            }
        }
        Ok(false)
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
}
