#![no_main]
//! See kaas_fuzz::targets::state_files and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|data: &[u8]| kaas_fuzz::state_files(data));
