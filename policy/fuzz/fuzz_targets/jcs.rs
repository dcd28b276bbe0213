//! The I-JSON parser and JCS serialiser: no input may panic, and whatever is accepted must
//! canonicalise to a fixed point (canonical output re-parses to the same canonical output),
//! except for integral doubles in [2^53, 1e21), which print as unsafe integers (see
//! docs/decisions.md).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    palisade_policy::canon::fuzz_canonical_fixed_point(data);
});
