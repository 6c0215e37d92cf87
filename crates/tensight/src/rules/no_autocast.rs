//! T003 no-autocast: float32 GEMMs and convolutions take most of the GPU time and nothing
//! runs in 16-bit: mixed precision (`torch.autocast`) is not used.

use super::{ev, fmt_ms, gemm_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::gemm::{fp32_kernels, group, peaks, speedup_time, tf32_ns, Fp32Kernel};
use crate::analysis::kernels::{classify, is_low_precision_gemm, KernelClass};
use crate::analysis::simulate::{self, Change, Durations};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "T003",
    name: "no-autocast",
    category: Category::TensorCores,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Runs where float32 matrix multiplications and convolutions take most of the kernel time
and (almost) no FLOPs run in fp16/bf16: the model trains or infers in full precision
although the GPU's 16-bit tensor cores are 2× (TF32 → BF16) to 8× (FP32 → FP16 on a
V100) faster. Precision comes from the ops' recorded input types, or from kernel names
when shapes were not recorded.

## Why it costs time
GEMMs and convolutions are compute-bound at useful sizes, so their time follows the
peak rate of the precision they run in: on an H100/H200, 495 TFLOP/s in TF32 against
989 in BF16; 16-bit inputs also halve the bytes each one moves. Under
`torch.autocast`, matmuls and convolutions run in bf16 while reductions and losses stay
in float32, and master weights stay float32.

## Example
A ResNet-50 step in float32: convolutions are 75% of kernel time, 0% of FLOPs in 16-bit.
On an H200 with TF32 on, autocast cut convolution and GEMM time from 6.3 to 3.3 ms per
step; the step itself got slower (host-bound at batch 32 in NCHW, plus the casts), and
this rule, by its replay, estimates almost nothing there. Checked on an H200: a 4-layer,
4096-wide MLP training step in TF32 (11.7 ms) was estimated to save 4.9 ms; bf16
autocast measured 6.1 ms (5.6 ms saved).

## Fix
```python
# before
loss = loss_fn(model(x), y)
# after: bf16 autocast (Ampere and later; no GradScaler needed)
with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
    loss = loss_fn(model(x), y)
loss.backward()
# V100/T4 (no bf16 tensor cores): dtype=torch.float16 with torch.amp.GradScaler("cuda")
# convnets: model = model.to(memory_format=torch.channels_last) avoids layout transposes
```

## Thresholds
Reported when float32 GEMM/convolution kernels take at least 40% of the kernel time
(`MIN_GEMM_SHARE_PCT`), at most 1% of FLOPs (or of GEMM kernel time, by name) run in
16-bit (`MAX_LOW_PRECISION_PCT`), and the GPU's bf16 (else fp16) tensor-core peak beats
its TF32 peak by at least 5%. The estimate assumes TF32 is already on (T001 counts that
step) so the two never count the same time: per kernel, from its TF32 time (measured,
or T001's model), the 16-bit time is the largest of FLOPs / 16-bit peak, half the
modelled bytes / bandwidth, 2 µs, and the TF32 time scaled by TF32 peak / 16-bit peak on
its compute-bound share. The step-time saving replays the trace with TF32 times and then
with 16-bit times and takes the difference. Not modelled: the cast kernels autocast adds,
its host overhead, and the gain of 16-bit activations in elementwise kernels.

## References
- PyTorch docs: "Automatic Mixed Precision package - torch.amp" and the AMP recipe.
- NVIDIA Deep Learning Performance guide: "Mixed precision training".
- Micikevicius et al., "Mixed Precision Training" (ICLR 2018).
"#,
};

/// Float32 GEMM/conv kernels must take at least this share of the kernel time (%).
const MIN_GEMM_SHARE_PCT: f64 = 40.0;
/// At most this share of FLOPs (or of GEMM kernel time) may already run in 16-bit (%).
const MAX_LOW_PRECISION_PCT: f64 = 1.0;
/// The 16-bit peak must beat TF32 by this factor.
const MIN_GAIN: f64 = 1.05;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let Some(c) = peaks(ctx.profile, ctx.metrics) else {
        return Vec::new();
    };
    let total_ns = m.kernels.total_ns;
    if total_ns <= 0 {
        return Vec::new();
    }
    let (dtype, lp_tflops) = if c.bf16_tflops >= c.tf32_tflops * MIN_GAIN {
        ("bf16", c.bf16_tflops)
    } else if c.fp16_tflops >= c.tf32_tflops * MIN_GAIN {
        ("fp16", c.fp16_tflops)
    } else {
        return Vec::new();
    };
    // Nothing may run in 16-bit already.
    let cs = &m.compute;
    if cs.flops > 0.0 && cs.low_precision_flops_pct > MAX_LOW_PRECISION_PCT {
        return Vec::new();
    }
    let (mut gemm_ns, mut low_ns) = (0i64, 0i64);
    for &gi in &m.timeline.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        if g.is_kernel()
            && matches!(
                classify(&g.name),
                KernelClass::Gemm | KernelClass::Conv | KernelClass::Attention
            )
        {
            gemm_ns += g.dur_ns;
            if is_low_precision_gemm(&g.name) {
                low_ns += g.dur_ns;
            }
        }
    }
    if gemm_ns > 0 && 100.0 * low_ns as f64 / gemm_ns as f64 > MAX_LOW_PRECISION_PCT {
        return Vec::new();
    }
    let ks = fp32_kernels(p, &m.timeline.gpu_in_steps);
    let fp32_ns: i64 = ks.iter().map(|k| p.gpu[k.gpu as usize].dur_ns).sum();
    let share = 100.0 * fp32_ns as f64 / total_ns as f64;
    if ks.is_empty() || share < MIN_GEMM_SHARE_PCT {
        return Vec::new();
    }

    let n = ctx.steps();
    // What float32 GEMMs reach at best: TF32 where the GPU has it, else plain FP32.
    let base = if c.tf32_tflops > c.fp32_tflops * MIN_GAIN {
        "TF32"
    } else {
        "FP32"
    };
    // TF32 first (T001's model), then 16-bit from there.
    let tf32: Durations = ks.iter().map(|k| (k.gpu, tf32_ns(p, k, &c))).collect();
    let low: Durations = ks
        .iter()
        .map(|k| {
            (
                k.gpu,
                low_ns_of(k, tf32[&k.gpu], lp_tflops, c.tf32_tflops, c.mem_bw_gbs),
            )
        })
        .collect();
    let tf32_total: i64 = tf32.values().sum();
    let gpu_saved_ns: i64 = ks.iter().map(|k| tf32[&k.gpu] - low[&k.gpu]).sum();
    let with_tf32 = simulate::saving_ns(p, &Change::durations(tf32.clone()));
    let with_low = simulate::saving_ns(p, &Change::durations(low.clone()));
    let step_saved_ns = (with_low - with_tf32).max(0);
    let saving_ms = step_saved_ns as f64 / 1e6 / n;
    let t1_ns = fp32_ns - tf32_total;
    let with_tc = ks.iter().filter(|k| k.tensor_cores).count();

    let flops_line = if cs.flops > 0.0 {
        format!(
            "{:.1}% of {:.2} GFLOP per step (dominant dtype {})",
            cs.low_precision_flops_pct,
            cs.flops / n / 1e9,
            cs.dominant_dtype
        )
    } else {
        "shapes not recorded: judged from kernel names; kernels taken as compute-bound (upper bound)".to_string()
    };
    // Locations: the kernels with the largest 16-bit saving (from their TF32 time).
    let from_tf32: Durations = ks
        .iter()
        .map(|k| {
            (
                k.gpu,
                p.gpu[k.gpu as usize].dur_ns - (tf32[&k.gpu] - low[&k.gpu]),
            )
        })
        .collect();
    let locs = group(p, &ks.iter().collect::<Vec<&Fp32Kernel>>(), &from_tf32);

    let d = Draft {
        change: Some(Change::durations(low)),
        title: format!("No mixed precision: float32 GEMMs take {share:.0}% of kernel time"),
        message: format!(
            "float32 matmuls and convolutions take {} per step ({share:.0}% of kernel time) and {:.1}% of FLOPs run in 16-bit; {dtype} autocast would save an estimated {} of GPU time per step beyond {base}",
            fmt_ms(fp32_ns as f64 / 1e6 / n),
            if cs.flops > 0.0 { cs.low_precision_flops_pct } else { 0.0 },
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        saving_ms,
        estimate: format!(
            "assuming TF32 already on where the GPU has it (T001 counts the FP32 → TF32 step, {} of GPU time per step here, so the two never count the same time): per kernel, {base} time less its {dtype} time = max(FLOPs / {lp_tflops:.0} TFLOP/s, half the modelled bytes / {:.0} GB/s, 2 µs, {base} time × (1 − s × (1 − {:.0}/{lp_tflops:.0}))) with s its compute-bound share (1 without shapes: an upper bound): {} of GPU time per step; the step saving is the replayed step time with {base} times less that with {dtype} times. Cast kernels and autocast's host overhead are not counted: in a host-bound run the step may not get faster",
            fmt_ms(t1_ns as f64 / 1e6 / n),
            c.mem_bw_gbs,
            c.tf32_tflops,
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        evidence: vec![
            ev(
                "float32 GEMM/conv kernel time per step",
                format!("{} ({share:.1}% of kernel time; {} of {} kernels on TF32 tensor cores)", fmt_ms(fp32_ns as f64 / 1e6 / n), with_tc, ks.len()),
            ),
            ev("16-bit share of FLOPs", flops_line),
            ev(
                "peaks",
                format!("{base} {:.0}, {dtype} {lp_tflops:.0} TFLOP/s, {:.0} GB/s ({})", c.tf32_tflops, c.mem_bw_gbs, c.source),
            ),
            ev(format!("GPU time per step with {base} (modelled)"), fmt_ms(tf32_total as f64 / 1e6 / n)),
            ev(format!("GPU time saved per step by {dtype} (modelled)"), fmt_ms(gpu_saved_ns as f64 / 1e6 / n)),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "Matmuls and convolutions dominate the GPU time and all run in float32. In {dtype} they run on tensor cores at {lp_tflops:.0} TFLOP/s instead of {:.0} ({base}) and move half the bytes. The step gains only where the GPU is the bottleneck; autocast also adds cast kernels and host work, so a host-bound step can get slower (seen with ResNet-50 at batch 32 on an H200).",
            c.tf32_tflops
        ),
        fixes: if dtype == "bf16" {
            vec![
                "Wrap the forward pass and loss in `with torch.autocast(device_type=\"cuda\", dtype=torch.bfloat16):` (no GradScaler needed)".into(),
                "For convnets, also `model.to(memory_format=torch.channels_last)` so 16-bit convolutions need no layout transposes".into(),
                "For inference, `model.to(torch.bfloat16)` removes the casts entirely".into(),
            ]
        } else {
            vec![
                "This GPU has no bf16 tensor cores: `with torch.autocast(device_type=\"cuda\", dtype=torch.float16):` with `scaler = torch.amp.GradScaler(\"cuda\")` around backward and step".into(),
                "For convnets, also `model.to(memory_format=torch.channels_last)`".into(),
            ]
        },
        locations: locs.iter().take(5).map(|g| gemm_location(p, g, n)).collect(),
    };
    vec![d.finish_after(&META, ctx, Some(Change::durations(tf32)))]
}

/// The 16-bit time of an FP32 kernel whose TF32 time is `tf32` ns: the TF32 → 16-bit
/// ratio on its compute-bound share, floored by FLOPs at the 16-bit peak, half its
/// modelled float32 bytes at full bandwidth and 2 µs.
fn low_ns_of(k: &Fp32Kernel, tf32: i64, lp_tflops: f64, tf32_tflops: f64, bw_gbs: f64) -> i64 {
    let t = speedup_time(
        tf32 as f64,
        k.flops,
        k.bytes.map(|b| b / 2.0),
        tf32_tflops,
        lp_tflops,
        bw_gbs,
    );
    t.round() as i64
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    /// Three GPU-bound steps of one `aten::mm` [4096, 4096] × [4096, 4096] of `dtype`
    /// running `kernel` for `dur` µs, then a 100 µs elementwise kernel, then a sync.
    fn trace(dtype: &str, kernel: &str, dur: f64) -> TraceBuilder {
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
                dur,
                [32, 32, 1],
                [256, 1, 1],
            );
            let add = b.op("aten::add", t0 + 40.0, 10.0);
            b.kernel(
                "vectorized_elementwise_kernel",
                add,
                t0 + 45.0,
                t0 + 31.0 + dur,
                100.0,
                [4096, 1, 1],
                [128, 1, 1],
            );
            b.runtime("cudaDeviceSynchronize", t0 + 60.0, dur + 80.0, None);
        }
        b
    }

    #[test]
    fn fires_on_fp32_gemms_with_a_saving_beyond_tf32() {
        // Already TF32: 137 GFLOP in 0.8 ms = 172 TFLOP/s, over 30% of the TF32 peak so
        // compute-bound; bf16 time = 0.8 ms × 494.7 / 989.4 (datasheet TF32 and bf16
        // peaks); the sync waits for it, so the step saves the difference.
        let r = trace(
            "float",
            "sm80_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32",
            800.0,
        )
        .report();
        let f = finding(&r, "T003");
        let expect = 0.8 * (1.0 - 494.7 / 989.4);
        assert!(
            (f.saving_ms - expect).abs() < 0.01,
            "saving {}",
            f.saving_ms
        );
        // T001 does not fire: the kernel already uses TF32.
        assert!(!codes(&r).contains(&"T001"));
    }

    #[test]
    fn silent_when_the_model_runs_in_bf16() {
        let r = trace(
            "c10::BFloat16",
            "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64",
            500.0,
        )
        .report();
        assert!(!codes(&r).contains(&"T003"));
    }
}
