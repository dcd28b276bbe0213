//! Spans as an OTLP `ExportTraceServiceRequest` (opentelemetry-proto's
//! `collector/trace/v1/trace_service.proto`), written straight from [`Span`] records into one
//! buffer: no message objects, one allocation a batch. The field numbers are the protocol's;
//! `tests/otlp/decode.py` reads what this writes with the official `opentelemetry-proto`
//! package.

use super::span::{Span, Value};

/// Protobuf wire types.
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn tag(out: &mut Vec<u8>, field: u32, wire: u8) {
    varint(out, u64::from(field << 3 | u32::from(wire)));
}

fn bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    tag(out, field, LEN);
    varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// A length-delimited field whose body `f` writes: written in place, its length put before it
/// after (the batch's two outer messages, once a batch).
fn message(out: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
    tag(out, field, LEN);
    let start = out.len();
    f(out);
    let mut len = (out.len() - start) as u64;
    let mut head = [0u8; 10];
    let mut n = 0;
    while len >= 0x80 {
        head[n] = (len as u8 & 0x7f) | 0x80;
        len >>= 7;
        n += 1;
    }
    head[n] = len as u8;
    out.splice(start..start, head[..=n].iter().copied());
}

fn varint_len(v: u64) -> usize {
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

/// A length-delimited field of `len` bytes: its tag and length, the caller writes the rest.
fn head(out: &mut Vec<u8>, field: u32, len: usize) {
    tag(out, field, LEN);
    varint(out, len as u64);
}

/// `AnyValue { string_value = 1; int_value = 3 }`'s length.
fn any_len(value: &Value) -> usize {
    match value {
        Value::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Value::String(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Value::Shared(s) => 1 + varint_len(s.len() as u64) + s.len(),
        Value::Int(i) => 1 + varint_len(*i as u64),
    }
}

/// `KeyValue { key = 1; AnyValue value = 2 }`'s length.
fn attribute_len(key: &str, value: &Value) -> usize {
    let any = any_len(value);
    1 + varint_len(key.len() as u64) + key.len() + 1 + varint_len(any as u64) + any
}

/// A `KeyValue` as field `field`, its lengths computed first: written once, never shifted.
fn attribute(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    head(out, field, attribute_len(key, value));
    bytes(out, 1, key.as_bytes());
    head(out, 2, any_len(value));
    match value {
        Value::Str(s) => bytes(out, 1, s.as_bytes()),
        Value::String(s) => bytes(out, 1, s.as_bytes()),
        Value::Shared(s) => bytes(out, 1, s.as_bytes()),
        Value::Int(i) => {
            tag(out, 3, VARINT);
            varint(out, *i as u64);
        }
    }
}

/// `Span`'s length: trace_id 1 (16), span_id 2 (8), parent_span_id 4 (8), name 5, kind 6,
/// start 7 and end 8 (fixed64), attributes 9, status 15 (`code` 3).
fn span_len(s: &Span) -> usize {
    let mut n = 2 + 16 + 2 + 8;
    if s.parent != [0; 8] {
        n += 2 + 8;
    }
    n += 1 + varint_len(s.name.len() as u64) + s.name.len();
    n += 2 + 9 + 9;
    for (k, v) in &s.attributes {
        let a = attribute_len(k, v);
        n += 1 + varint_len(a as u64) + a;
    }
    if s.error {
        n += 2 + 2;
    }
    n
}

/// A `Span` as field 2 of `ScopeSpans`, written once from its computed length.
fn span(out: &mut Vec<u8>, s: &Span) {
    head(out, 2, span_len(s));
    bytes(out, 1, &s.trace);
    bytes(out, 2, &s.id);
    if s.parent != [0; 8] {
        bytes(out, 4, &s.parent);
    }
    bytes(out, 5, s.name.as_bytes());
    tag(out, 6, VARINT);
    varint(out, s.kind as u64);
    tag(out, 7, FIXED64);
    out.extend_from_slice(&s.start_ns.to_le_bytes());
    tag(out, 8, FIXED64);
    out.extend_from_slice(&s.end_ns.to_le_bytes());
    for (k, v) in &s.attributes {
        attribute(out, 9, k, v);
    }
    if s.error {
        head(out, 15, 2);
        tag(out, 3, VARINT);
        varint(out, 2);
    }
}

/// `ExportTraceServiceRequest { resource_spans = 1 }` of one resource (`service.name`,
/// `service.version`) and one scope (`palisade`) holding `batch`.
pub fn request(batch: &[Vec<Span>]) -> Vec<u8> {
    let n: usize = batch.iter().map(Vec::len).sum();
    let mut out = Vec::with_capacity(64 + n * 256);
    message(&mut out, 1, |rs| {
        message(rs, 1, |resource| {
            attribute(resource, 1, "service.name", &Value::Str("palisade"));
            attribute(
                resource,
                1,
                "service.version",
                &Value::Str(env!("CARGO_PKG_VERSION")),
            );
        });
        message(rs, 2, |ss| {
            message(ss, 1, |scope| {
                bytes(scope, 1, b"palisade");
                bytes(scope, 2, env!("CARGO_PKG_VERSION").as_bytes());
            });
            for spans in batch {
                for s in spans {
                    span(ss, s);
                }
            }
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn computed_lengths_are_the_written_ones() {
        let s = Span {
            trace: [1; 16],
            id: [2; 8],
            parent: [3; 8],
            name: "PUT",
            kind: super::super::span::Kind::Server,
            start_ns: 1,
            end_ns: u64::MAX,
            attributes: vec![
                ("url.path", Value::String("/a".repeat(100))),
                ("palisade.fence_epoch", Value::Int(-1)),
                ("palisade.decision", Value::Str("forwarded")),
            ],
            error: true,
        };
        let mut out = Vec::new();
        span(&mut out, &s);
        // Field 2's tag (1 byte), the length's varint, then exactly that many bytes.
        let n = span_len(&s);
        assert_eq!(out.len(), 1 + varint_len(n as u64) + n);
        for v in [0u64, 1, 127, 128, 300, u64::MAX] {
            let mut b = Vec::new();
            varint(&mut b, v);
            assert_eq!(b.len(), varint_len(v), "{v}");
        }
    }

    #[test]
    fn varints_and_lengths_are_protobufs() {
        let mut out = Vec::new();
        varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        message(&mut out, 1, |m| m.extend_from_slice(&[7u8; 200]));
        // tag 1/LEN, then 200 as a varint (0xc8 0x01), then the body.
        assert_eq!(&out[..3], &[0x0a, 0xc8, 0x01]);
        assert_eq!(out.len(), 203);
    }
}
