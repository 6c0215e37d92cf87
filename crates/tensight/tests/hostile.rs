//! Hostile input (issue #14): every example the issue names, as a regression test.
//! Each one crashed, hung or printed raw control characters before its fix.

use tensight::read::limits;
use tensight::report::{terminal, RenderOptions};

fn analyze(trace: &str) -> tensight::report::Report {
    tensight::analyze_bytes("hostile", trace.as_bytes()).expect("the trace reads")
}

fn text(r: &tensight::report::Report) -> String {
    terminal::render(
        r,
        RenderOptions {
            color: false,
            width: 80,
        },
    )
}

/// `model/steps.rs`: a step lasting 1e16 µs (past `i64` nanoseconds once added to its
/// start) after a runtime call used to overflow and panic.
#[test]
fn a_step_of_1e16_us_after_a_runtime_call_is_counted_not_a_panic() {
    let r = analyze(
        r#"{"traceEvents": [
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"correlation": 1}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 5, "dur": 1e16},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 6, "dur": 2},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 20, "dur": 1e16},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 21, "dur": 1, "args": {"correlation": 2}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 22, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 2, "grid": [1, 1, 1], "block": [32, 1, 1]}}
    ]}"#,
    );
    assert_eq!(r.profile.counters.get(limits::TIME_OUT_OF_RANGE.0), 2);
    let _ = text(&r);
}

/// `rules/small_grids.rs`: a kernel with a negative `ts` and a huge `dur` used to make an
/// inverted slice range and panic.
#[test]
fn a_negative_ts_with_a_huge_dur_is_counted_not_a_panic() {
    let r = analyze(
        r#"{"deviceProperties": [{"id": 0, "name": "H200", "numSms": 132, "totalGlobalMem": 150000000000, "computeMajor": 9, "computeMinor": 0, "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472, "warpSize": 32}],
        "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1, "dur": 40, "args": {"External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"correlation": 1, "External id": 1}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 3, "dur": 1, "args": {"correlation": 2, "External id": 1}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": -9000000000000000, "dur": 9223372036854775, "args": {"device": 0, "stream": 7, "correlation": 1, "External id": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 8, "ts": 10, "dur": 5, "args": {"device": 0, "stream": 8, "correlation": 2, "External id": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}}
    ]}"#,
    );
    assert_eq!(r.profile.counters.get(limits::TIME_OUT_OF_RANGE.0), 1);
    assert_eq!(r.profile.gpu.len(), 1);
    let _ = text(&r);
}

/// Times at the very edges of `i64` never reach a later stage.
#[test]
fn extreme_times_are_counted_at_the_reader() {
    let r = analyze(
        r#"{"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "ok", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "late", "pid": 1, "tid": 1, "ts": 1e300, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "early", "pid": 1, "tid": 1, "ts": -9223372036854775, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "long", "pid": 1, "tid": 1, "ts": 10, "dur": 604800000001},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1e17, "args": {"Bytes": 4}}
    ]}"#,
    );
    assert_eq!(r.profile.counters.get(limits::TIME_OUT_OF_RANGE.0), 4);
    assert_eq!(r.profile.ops.len(), 1);
    assert!(r.profile.memory.is_empty());
}
