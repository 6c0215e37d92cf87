//! `tensight analyze TRACE --ncu FILE`: a synthetic trace of the H200 probe's kernels
//! with the real Nsight Compute CSV recorded on the H200.

use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::Command;
use tensight::testing::TraceBuilder;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(rel)
}

/// `x + 1` (kernel 1) and, with `copy`, `x.t().contiguous()` (kernel 3).
fn trace(copy: bool) -> Vec<u8> {
    let mut b = TraceBuilder::new();
    b.step(1, 0.0, 1_000.0);
    let add = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul> >(int, at::native::CUDAFunctorOnSelf_add<float>, std::array<char*, 2ul>)";
    let a = b.op_with(
        "aten::add",
        100.0,
        10.0,
        json!({"Input Dims": [[4096, 4096], []], "Input Strides": [[4096, 1], []]}),
    );
    b.kernel(add, a, 102.0, 110.0, 31.5, [16384, 1, 1], [128, 1, 1]);
    if copy {
        b.frame("probe.py(9): <module>", 300.0, 40.0);
        b.op_with("aten::t", 300.0, 3.0, json!({"Input Dims": [[4096, 4096]]}));
        let c = b.op_with(
            "aten::copy_",
            310.0,
            20.0,
            json!({"Input Dims": [[4096, 4096], [4096, 4096], []], "Input Strides": [[4096, 1], [1, 4096], []]}),
        );
        b.kernel("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda(float)#1}>(at::TensorIteratorBase&)::{lambda(int)#1}>(int, float)", c, 312.0, 200.0, 125.2, [65536, 1, 1], [128, 1, 1]);
    }
    b.build()
}

fn analyze(copy: bool, ncu: bool) -> serde_json::Value {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path().join("trace.json");
    std::fs::write(&t, trace(copy)).expect("write trace");
    let mut c = Command::new(env!("CARGO_BIN_EXE_tensight"));
    c.arg("analyze").arg(&t).args(["--format", "json"]);
    if ncu {
        c.arg("--ncu").arg(fixture("h200-probe/ncu_raw.csv.gz"));
    }
    let o = c.output().expect("runs");
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("json report")
}

fn codes(v: &serde_json::Value) -> Vec<String> {
    v.pointer("/diagnosis/bottlenecks")
        .and_then(|f| f.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|f| f.get("code").and_then(|c| c.as_str()).map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn v001_fires_on_the_transposed_copy_with_the_real_csv() {
    let v = analyze(true, true);
    assert!(codes(&v).contains(&"V001".to_string()), "{:?}", codes(&v));
    let skipped = v
        .pointer("/diagnosis/skipped_rules")
        .cloned()
        .unwrap_or_default();
    assert!(!skipped.to_string().contains("V001"), "{skipped}");
}

#[test]
fn v001_silent_on_the_dense_add_and_skipped_without_ncu() {
    let v = analyze(false, true);
    assert!(!codes(&v).contains(&"V001".to_string()), "{:?}", codes(&v));
    let v = analyze(true, false);
    assert!(!codes(&v).contains(&"V001".to_string()));
    let skipped = v
        .pointer("/diagnosis/skipped_rules")
        .cloned()
        .unwrap_or_default();
    assert!(
        skipped.to_string().contains("needs a hardware pass"),
        "{skipped}"
    );
}

#[test]
fn a_bad_ncu_file_is_one_error_with_a_hint() {
    let tmp = tempfile::tempdir().expect("tmp");
    let t = tmp.path().join("trace.json");
    std::fs::write(&t, trace(false)).expect("write");
    let bad = tmp.path().join("ncu.csv");
    std::fs::write(&bad, "not,a,csv\n").expect("write");
    let o = Command::new(env!("CARGO_BIN_EXE_tensight"))
        .arg("analyze")
        .arg(&t)
        .arg("--ncu")
        .arg(&bad)
        .output()
        .expect("runs");
    assert_eq!(o.status.code(), Some(2));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(
        e.starts_with("error: failed to read Nsight Compute CSV"),
        "{e}"
    );
    assert!(e.contains("\nhint: "), "{e}");
}
