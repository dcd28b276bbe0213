//! Receipt-chain verification over untrusted store contents: no input may panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palisade_policy::receipt::fuzz_verify_chain(data);
});
