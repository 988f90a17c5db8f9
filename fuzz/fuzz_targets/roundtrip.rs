#![no_main]
//! See kaas_fuzz::targets::roundtrip and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_fuzz::roundtrip(data));
