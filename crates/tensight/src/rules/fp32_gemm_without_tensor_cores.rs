//! T001 fp32-gemm-without-tensor-cores: float32 matmuls and convolutions run on the CUDA
//! cores (SIMT FFMA) although the GPU has TF32 tensor cores.
//!
//! The FP32 GEMM/conv kernel model it shares with T003 (no-autocast), one account of
//! each kernel, is `analysis::gemm`: T001 estimates the TF32 time, T003 starts from it.

use super::{ev, fmt_ms, gemm_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::devices::Ceilings;
use crate::analysis::gemm::{
    fp32_kernels, group, peaks, tf32_ns, Fp32Kernel, GemmKind, COMPUTE_BOUND_EFF,
};
use crate::analysis::simulate::{self, Change, Durations};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "T001",
    name: "fp32-gemm-without-tensor-cores",
    category: Category::TensorCores,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Matrix multiplications and convolutions on `float32` tensors whose kernels do not use
tensor cores: SIMT kernels (`sgemm`, cutlass `simt`, `scudnn`, xmma `f32f32_f32f32` /
`ffma`) on a GPU that has TF32 tensor cores (Ampere and later). The dtype comes from the
op's recorded input types (`record_shapes=True`), or from the kernel name when shapes
were not recorded. Matmuls and convolutions are reported separately: their switches
differ.

## Why it costs time
FP32 FFMA runs at a fraction of the TF32 tensor-core rate: 67 vs 495 TFLOP/s on an
H100/H200, 19.5 vs 156 on an A100. PyTorch leaves TF32 off for matmuls by default
(`torch.backends.cuda.matmul.allow_tf32 = False`), so every `nn.Linear` and `@` in
float32 runs on the slow path. For convolutions cuDNN may use TF32 by default
(`torch.backends.cudnn.allow_tf32 = True`); an FFMA convolution then means it was turned
off, or cuDNN found no tensor-core kernel for the shape (e.g. 3 input channels).

## Example
`aten::addmm` on float32 runs `sm80_xmma_gemm_f32f32_f32f32_f32_..._ffma` for 84 µs per
step; with TF32 allowed the same op runs `sm80_xmma_gemm_f32f32_tf32f32_..._tensor16x8x8`
in 57 µs (measured on an H200). Checked on an H200: a 4-layer, 4096-wide MLP training
step at 8192 rows in float32 was estimated to save 50.8 ms of its 60.9 ms; with TF32 it
measured 11.7 ms (49.2 ms saved). A float32 ResNet-50 step (batch 32, TF32 off):
estimated 23.5 ms, measured 18.1 ms (its host got slower with TF32).

## Fix
```python
# before: float32 matmuls on CUDA cores
model = MyModel().cuda()
# after: TF32 tensor cores for float32 matmuls (10-bit mantissa inputs, fp32 accumulate)
torch.set_float32_matmul_precision("high")        # = torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True            # convolutions (the default)
torch.backends.cudnn.benchmark = True             # let cuDNN try tensor-core algorithms
# or run the model in bf16: with torch.autocast("cuda", dtype=torch.bfloat16): ...
```

## Thresholds
Reported when the GPU's TF32 peak beats its FP32 peak by at least 5% in the ceilings
table (`MIN_GAIN`; not on a V100 or T4) and these kernels take at least 5% of the
kernel time (`MIN_SHARE_PCT`). Per kernel, the TF32 time is the
largest of: FLOPs / TF32 peak, modelled bytes / memory bandwidth, 2 µs (`MIN_KERNEL_NS`),
and the kernel time scaled by FP32 peak / TF32 peak on its compute-bound share. That
share is the kernel's achieved FP32 rate over 30% of the FP32 peak (`COMPUTE_BOUND_EFF`),
at most 1: a kernel far from the FP32 peak is limited by latency or a small grid, and
tensor cores speed it up less (measured on an H200: an 84 µs FFMA GEMM at 1% of peak
became 57 µs; ResNet-50's convolutions near peak ran 6.5× faster). Without shapes, the
whole kernel is taken as compute-bound (an upper bound). The step-time saving replays
the trace with the TF32 times: only time on the GPU's critical path counts.

## References
- PyTorch docs: "TensorFloat-32 (TF32) on Ampere (and later) devices".
- NVIDIA A100 / H100 / H200 datasheets for FP32 and TF32 peak rates.
- NVIDIA Deep Learning Performance guide: "Matrix Multiplication Background".
"#,
};

/// Report when the kernels take at least this share of the kernel time (%).
const MIN_SHARE_PCT: f64 = 5.0;
/// TF32 must beat FP32 by this factor for the rule to apply (GPUs without TF32 list the
/// FP32 rate as their TF32 rate).
const MIN_GAIN: f64 = 1.05;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let Some(c) = peaks(ctx.profile, ctx.metrics) else {
        return Vec::new();
    };
    if c.tf32_tflops < c.fp32_tflops * MIN_GAIN || m.kernels.total_ns <= 0 {
        return Vec::new();
    }
    let kernels = fp32_kernels(p, &m.timeline.gpu_in_steps);
    let mut out = Vec::new();
    for kind in [GemmKind::Matmul, GemmKind::Conv] {
        let mine: Vec<&Fp32Kernel> = kernels
            .iter()
            .filter(|k| k.kind == kind && !k.tensor_cores)
            .collect();
        let time_ns: i64 = mine.iter().map(|k| p.gpu[k.gpu as usize].dur_ns).sum();
        if mine.is_empty() || 100.0 * time_ns as f64 / (m.kernels.total_ns as f64) < MIN_SHARE_PCT {
            continue;
        }
        out.push(finding(ctx, &c, kind, &mine, time_ns));
    }
    out
}

fn finding(
    ctx: &Context,
    c: &Ceilings,
    kind: GemmKind,
    mine: &[&Fp32Kernel],
    time_ns: i64,
) -> Finding {
    let p = ctx.profile;
    let n = ctx.steps();
    let new_dur: Durations = mine.iter().map(|k| (k.gpu, tf32_ns(p, k, c))).collect();
    let gpu_saved_ns: i64 = mine
        .iter()
        .map(|k| p.gpu[k.gpu as usize].dur_ns - new_dur[&k.gpu])
        .sum();
    let step_saved_ns =
        simulate::saving_ns(p, &Change::durations(new_dur.clone())).min(gpu_saved_ns);
    let saving_ms = step_saved_ns as f64 / 1e6 / n;
    let flops: f64 = mine.iter().filter_map(|k| k.flops).sum();
    let flops_ns: i64 = mine
        .iter()
        .filter(|k| k.flops.is_some())
        .map(|k| p.gpu[k.gpu as usize].dur_ns)
        .sum();
    let achieved = (flops_ns > 0).then(|| flops / flops_ns as f64 / 1e3);
    let without_shapes = mine.iter().filter(|k| k.flops.is_none()).count();
    let what = kind.label();
    let groups = group(p, mine, &new_dur);
    let total_kernel_ns = ctx.metrics.kernels.total_ns.max(1) as f64;

    let mut evidence = vec![
        ev(
            format!("FP32 {what} kernels without tensor cores per step"),
            format!(
                "{:.0} launches, {} ({:.1}% of kernel time)",
                mine.len() as f64 / n,
                fmt_ms(time_ns as f64 / 1e6 / n),
                100.0 * time_ns as f64 / total_kernel_ns
            ),
        ),
        ev(
            "achieved rate",
            achieved.map_or_else(
                || "unknown (shapes not recorded)".into(),
                |a| {
                    format!(
                        "{a:.1} TFLOP/s ({:.0}% of the FP32 peak)",
                        100.0 * a / c.fp32_tflops
                    )
                },
            ),
        ),
        ev(
            "peaks",
            format!(
                "FP32 {:.1} TFLOP/s, TF32 {:.1} TFLOP/s, {:.0} GB/s ({})",
                c.fp32_tflops, c.tf32_tflops, c.mem_bw_gbs, c.source
            ),
        ),
        ev(
            "GPU time saved per step (modelled)",
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n),
        ),
        ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
    ];
    if without_shapes > 0 {
        evidence.push(ev(
            "kernels without recorded shapes",
            format!("{without_shapes} (taken as compute-bound: upper bound)"),
        ));
    }
    let (title, explanation, fixes) = match kind {
        GemmKind::Matmul => (
            "FP32 matmuls run without tensor cores".to_string(),
            format!(
                "These float32 matmuls run on the CUDA cores at up to {:.0} TFLOP/s; TF32 tensor cores reach {:.0}. PyTorch leaves TF32 off for matmuls unless asked, and it costs {} of GPU time per step here. TF32 rounds the inputs to a 10-bit mantissa and accumulates in FP32, which training tolerates in practice.",
                c.fp32_tflops,
                c.tf32_tflops,
                fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
            ),
            vec![
                "Allow TF32 for float32 matmuls: `torch.set_float32_matmul_precision(\"high\")` (or `torch.backends.cuda.matmul.allow_tf32 = True`)".to_string(),
                "Or run the model in bf16: `with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16): ...` (see T003)".to_string(),
            ],
        ),
        GemmKind::Conv => (
            "FP32 convolutions run without tensor cores".to_string(),
            format!(
                "These float32 convolutions run cuDNN FFMA kernels at up to {:.0} TFLOP/s; TF32 tensor cores reach {:.0}. cuDNN allows TF32 by default, so either it was turned off or cuDNN chose a CUDA-core kernel for this shape (few input channels, NCHW layout); {} of GPU time per step is at stake. Switching to TF32 may add layout transposes (seen on an H200 with ResNet-50: +1.2 ms of `nchwToNhwc` per step).",
                c.fp32_tflops,
                c.tf32_tflops,
                fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
            ),
            vec![
                "Make sure TF32 is allowed for convolutions: `torch.backends.cudnn.allow_tf32 = True` (the default)".to_string(),
                "Let cuDNN benchmark algorithms: `torch.backends.cudnn.benchmark = True`; use `model.to(memory_format=torch.channels_last)`".to_string(),
                "Pad input channels to a multiple of 4 or 8 (e.g. 3 → 4) so tensor-core kernels apply".to_string(),
                "Or run the model in bf16 with `torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16)` (see T003)".to_string(),
            ],
        ),
    };
    let d = Draft {
        change: Some(Change::durations(new_dur.clone())),
        title,
        message: format!(
            "{:.0} float32 {what} kernels per step run without tensor cores for {} per step ({:.1}% of kernel time); TF32 would save an estimated {} of GPU time per step",
            mine.len() as f64 / n,
            fmt_ms(time_ns as f64 / 1e6 / n),
            100.0 * time_ns as f64 / total_kernel_ns,
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        saving_ms,
        estimate: format!(
            "per kernel, its time less its TF32 time = max(FLOPs / {:.0} TFLOP/s, modelled bytes / {:.0} GB/s, 2 µs, time × (1 − s × (1 − {:.1}/{:.1}))) with s = achieved FP32 rate / ({:.0}% of {:.1} TFLOP/s), at most 1 (1 without shapes): {} of GPU time per step; the step saving replays the trace with those times, so GPU time off the critical path (host-bound stretches) does not count",
            c.tf32_tflops,
            c.mem_bw_gbs,
            c.fp32_tflops,
            c.tf32_tflops,
            COMPUTE_BOUND_EFF * 100.0,
            c.fp32_tflops,
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        evidence,
        explanation,
        fixes,
        locations: groups.iter().take(5).map(|g| gemm_location(p, g, n)).collect(),
    };
    d.finish(&META, ctx)
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    /// Three GPU-bound steps: an `aten::mm` on [4096, 4096] × [4096, 4096] of `dtype`
    /// running `kernel` for 4 ms, then a sync waiting for it.
    fn trace(dtype: &str, kernel: &str) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            let mm = b.op_with(
                "aten::mm",
                t0 + 10.0,
                30.0,
                json!({"Input Dims": [[4096, 4096], [4096, 4096]], "Input type": [dtype, dtype]}),
            );
            b.kernel(
                kernel,
                mm,
                t0 + 20.0,
                t0 + 30.0,
                4_000.0,
                [32, 32, 1],
                [256, 1, 1],
            );
            b.runtime("cudaDeviceSynchronize", t0 + 50.0, 3_990.0, None);
        }
        b
    }

    #[test]
    fn fires_on_fp32_ffma_gemm() {
        let r = trace("float", "ampere_sgemm_128x64_nn").report();
        let f = finding(&r, "T001");
        // 137 GFLOP in 4 ms = 34 TFLOP/s, over 30% of the H200's 67 TFLOP/s FP32 peak:
        // compute-bound, so TF32 time = 4 ms × 67 / 494.7 = 0.542 ms (above FLOPs / TF32
        // peak = 0.278 ms and bytes / bandwidth); the sync waits for it: saving 3.458 ms.
        let expect = 4.0 - 4.0 * 67.0 / 494.7;
        assert!(
            (f.saving_ms - expect).abs() < 0.01,
            "saving {}",
            f.saving_ms
        );
        assert!(f.title.contains("matmul"), "{}", f.title);
    }

    #[test]
    fn silent_on_tf32_or_bf16_kernels() {
        let tf32 = trace(
            "float",
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32",
        );
        assert!(!codes(&tf32.report()).contains(&"T001"));
        let bf16 = trace(
            "c10::BFloat16",
            "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn",
        );
        assert!(!codes(&bf16.report()).contains(&"T001"));
    }
}
