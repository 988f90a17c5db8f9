#![no_main]
//! See kaas_fuzz::targets::record_batch and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_fuzz::record_batch(data));
