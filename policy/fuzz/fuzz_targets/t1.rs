//! The T1 connector profile (issue 23): no expression and no payload may panic or get past
//! the limits. The input is an expression, a NUL byte, then a JSON payload.
#![no_main]

use libfuzzer_sys::fuzz_target;
use palisade_rich::connector::t1::{Limits, T1};

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(2, |b| *b == 0);
    let Some(Ok(expr)) = parts.next().map(std::str::from_utf8) else {
        return;
    };
    let Ok(t) = T1::compile(expr, Limits::default()) else {
        return;
    };
    assert!(t.fanout() <= Limits::default().max_fanout);
    let payload = parts.next().unwrap_or(b"null");
    let Ok(input) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return;
    };
    let _ = t.apply(&input);
});
