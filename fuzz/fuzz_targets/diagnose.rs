//! cargo fuzz run diagnose: see `tensight::fuzzing::diagnose`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tensight::fuzzing::diagnose(data));
