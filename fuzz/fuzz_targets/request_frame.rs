#![no_main]
//! See kaas_fuzz::targets::request_frame and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_fuzz::request_frame(data));
