#![no_main]
//! See kaas_fuzz::producer_machine, kaas_fuzz::group_machine and docs/fuzzing.md.

libfuzzer_sys::fuzz_target!(|script: kaas_fuzz::Script| kaas_fuzz::state_machines(script));
