//! cargo fuzz run ncu: see `tensight::fuzzing::ncu`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tensight::fuzzing::ncu(data));
