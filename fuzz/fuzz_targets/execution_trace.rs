//! cargo fuzz run execution_trace: see `tensight::fuzzing::execution_trace`.
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| tensight::fuzzing::execution_trace(data));
