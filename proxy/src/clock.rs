//! Time, as the sidecar reads it: defined in `palisade-store` (the store sets and judges
//! expiries by it, and sweeps), named here where every stage has always found it.

pub use palisade_store::clock::*;
