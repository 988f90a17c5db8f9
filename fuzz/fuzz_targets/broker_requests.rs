#![no_main]
//! See kaas_fuzz::targets::broker_requests and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_fuzz::broker_requests(data));
