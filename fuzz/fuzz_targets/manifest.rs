//! cargo fuzz run manifest: see `tensight::fuzzing::manifest`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tensight::fuzzing::manifest(data));
