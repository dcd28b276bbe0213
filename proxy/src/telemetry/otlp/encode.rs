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
/// after (a body is a span or smaller, so the shift is short).
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

/// `KeyValue { key = 1; AnyValue value = 2 }`, `AnyValue { string_value = 1; int_value = 3 }`.
fn attribute(out: &mut Vec<u8>, field: u32, key: &str, value: &Value) {
    message(out, field, |kv| {
        bytes(kv, 1, key.as_bytes());
        message(kv, 2, |any| match value {
            Value::Str(s) => bytes(any, 1, s.as_bytes()),
            Value::String(s) => bytes(any, 1, s.as_bytes()),
            Value::Int(i) => {
                tag(any, 3, VARINT);
                varint(any, *i as u64);
            }
        });
    });
}

/// `Span`: trace_id 1, span_id 2, parent_span_id 4, flags 16 (not written), name 5, kind 6,
/// start 7, end 8 (fixed64), attributes 9, status 15 (`code` 3: 2 is an error).
fn span(out: &mut Vec<u8>, s: &Span) {
    message(out, 2, |m| {
        bytes(m, 1, &s.trace);
        bytes(m, 2, &s.id);
        if s.parent != [0; 8] {
            bytes(m, 4, &s.parent);
        }
        bytes(m, 5, s.name.as_bytes());
        tag(m, 6, VARINT);
        varint(m, s.kind as u64);
        tag(m, 7, FIXED64);
        m.extend_from_slice(&s.start_ns.to_le_bytes());
        tag(m, 8, FIXED64);
        m.extend_from_slice(&s.end_ns.to_le_bytes());
        for (k, v) in &s.attributes {
            attribute(m, 9, k, v);
        }
        if s.error {
            message(m, 15, |st| {
                tag(st, 3, VARINT);
                varint(st, 2);
            });
        }
    });
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
