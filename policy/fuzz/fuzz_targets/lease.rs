//! Lease header decoding and verification: no input may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palisade_policy::lease::fuzz_decode_and_verify(data);
});
