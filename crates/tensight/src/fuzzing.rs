//! Entry points for the fuzz targets (`fuzz/fuzz_targets/*.rs`, cargo-fuzz) and for the
//! stable test that replays their committed corpus (`tests/fuzz_corpus.rs`): the same
//! function runs in both, so CI exercises every input the fuzzers kept without a nightly
//! toolchain. Each takes arbitrary bytes and must return without panicking, hanging or
//! allocating without bound, whatever they are; errors are fine.
//!
//! Not for production use.

use crate::report::{self, terminal, RenderOptions, Report};

/// A tiny trace with one op, launch and kernel, for the targets that need a profile to
/// attach to (execution trace, ncu CSV, manifest).
pub const BASE_TRACE: &str = r#"{"deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 150000000000, "computeMajor": 9, "computeMinor": 0, "numSms": 132, "maxThreadsPerMultiprocessor": 2048, "regsPerMultiprocessor": 65536, "sharedMemPerMultiprocessor": 233472, "warpSize": 32}],
"traceEvents": [
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 1700000000000, "dur": 100, "args": {"External id": 1, "Record function id": 1}},
{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1700000000010, "dur": 20, "args": {"External id": 2, "Record function id": 2, "Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1700000000012, "dur": 5, "args": {"correlation": 3, "External id": 2}},
{"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 1700000000020, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 3, "External id": 2, "grid": [1, 1, 1], "block": [128, 1, 1]}},
{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "pid": 1, "tid": 1, "ts": 1700000000100, "dur": 100, "args": {"External id": 4, "Record function id": 4}},
{"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 1700000000110, "dur": 20, "args": {"External id": 5, "Record function id": 5, "Input Dims": [[4, 4], [4, 4]], "Input type": ["float", "float"]}},
{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 1700000000112, "dur": 5, "args": {"correlation": 6, "External id": 5}},
{"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "pid": 0, "tid": 7, "ts": 1700000000120, "dur": 3, "args": {"device": 0, "stream": 7, "correlation": 6, "External id": 5, "grid": [1, 1, 1], "block": [128, 1, 1]}}
]}"#;

/// Render a report every way a user can see it.
fn render_all(r: &Report) {
    for (color, width) in [(false, 80), (true, 60)] {
        let _ = terminal::render(r, RenderOptions { color, width });
    }
    let _ = report::json::render(r);
    if let Some(f) = &r.metrics.tensors {
        let _ = report::forest::dot(f);
        let _ = report::forest::text(f, &r.input, 80);
    }
}

/// The Kineto reader alone: bytes (plain or gzip JSON) to a finished profile.
pub fn kineto(data: &[u8]) {
    let _ = crate::read::load_bytes("fuzz", data);
}

/// The whole pipeline over a trace that parses: analyses, every rule, every renderer.
/// This is where absurd but parseable values meet the rules.
pub fn diagnose(data: &[u8]) {
    if let Ok(r) = crate::analyze_bytes("fuzz", data) {
        render_all(&r);
    }
}

/// The execution-trace reader, linked to [`BASE_TRACE`], then diagnosed.
pub fn execution_trace(data: &[u8]) {
    let Ok(mut loaded) = crate::read::load_bytes("base", BASE_TRACE.as_bytes()) else {
        return;
    };
    if crate::read::execution_trace::attach_bytes(&mut loaded, "fuzz", data).is_ok() {
        render_all(&crate::diagnose(loaded, "fuzz".into()));
    }
}

/// The Nsight Compute CSV reader, aligned with [`BASE_TRACE`]'s kernels, then diagnosed.
pub fn ncu(data: &[u8]) {
    let Ok(hw) = crate::read::ncu::parse_bytes("fuzz", data) else {
        return;
    };
    let Ok(mut loaded) = crate::read::load_bytes("base", BASE_TRACE.as_bytes()) else {
        return;
    };
    crate::read::ncu::attach(&mut loaded.profile, hw);
    render_all(&crate::diagnose(loaded, "fuzz".into()));
}

/// A bundle manifest, with [`BASE_TRACE`] as its trace, diagnosed and rendered (the
/// header prints the manifest's strings).
pub fn manifest(data: &[u8]) {
    if let Ok(r) = crate::analyze_bundle_bytes("fuzz", data, BASE_TRACE.as_bytes(), None, None) {
        render_all(&r);
    }
}

/// A fuzz target's body.
pub type Target = fn(&[u8]);

/// The targets by name, as the corpus folders are named.
pub const TARGETS: [(&str, Target); 5] = [
    ("kineto", kineto),
    ("execution_trace", execution_trace),
    ("ncu", ncu),
    ("manifest", manifest),
    ("diagnose", diagnose),
];

#[cfg(test)]
mod tests {
    #[test]
    fn the_base_trace_reads() {
        let l = crate::read::load_bytes("base", super::BASE_TRACE.as_bytes()).expect("reads");
        assert_eq!(l.profile.gpu.len(), 2);
        for (_, f) in super::TARGETS {
            f(b"");
            f(b"{}");
        }
    }
}
