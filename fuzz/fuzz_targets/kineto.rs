//! cargo fuzz run kineto: see `tensight::fuzzing::kineto`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tensight::fuzzing::kineto(data));
