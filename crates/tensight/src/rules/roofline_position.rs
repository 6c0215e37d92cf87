//! R001 roofline-position: where the step sits on the roofline (informational).

use super::{ev, Category, Context, Draft, Finding, Rule, RuleMeta, Status};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "R001",
    name: "roofline-position",
    category: Category::Roofline,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Where the analysed steps sit on the roofline of the GPU: arithmetic intensity (FLOPs
per byte of memory traffic) against the ridge point (peak FLOP/s over bandwidth), and
the achieved FLOP rate against what is attainable at that intensity.

## Why it costs time
It does not cost time by itself: it says which ceiling limits the work. Below the ridge
point, memory bandwidth limits: fewer bytes (fusion, lower precision, better layouts)
help, more FLOP/s do not. Above it, compute limits: tensor cores and lower precision help.

## Example
FLOPs 2.1 TFLOP per step from `aten::mm`/`aten::convolution` shapes, modelled bytes
30 GB: intensity 70 FLOP/B, below the H200's bf16 ridge (~206) → memory-bound.

## Fix
Informational: act on the findings it accompanies. Memory-bound: fuse elementwise ops
(`torch.compile`), use bf16 (`torch.autocast`), avoid layout copies. Compute-bound:
enable TF32 (`torch.backends.cuda.matmul.allow_tf32 = True`) or autocast to bf16.

## Thresholds
Reported when the device is known and the trace recorded shapes (`record_shapes=True`).
FLOPs and bytes are modelled from op shapes, not measured: bytes assume each input
read once and each output written once.

## References
- Williams, Waterman, Patterson: "Roofline: an insightful visual performance model" (CACM 2009).
- NVIDIA H200 / H100 datasheets for peak rates.
"#,
};

fn check(ctx: &Context) -> Vec<Finding> {
    let Some(r) = &ctx.metrics.roofline else {
        return Vec::new();
    };
    let c = &ctx.metrics.compute;
    let n = ctx.steps();
    let d = Draft {
        change: None,
        title: format!("{}-bound by the roofline", r.bound),
        message: format!(
            "arithmetic intensity {:.2} FLOP/B is {} the ridge point {:.1} FLOP/B: the step is {}-bound and achieves {:.1}% of attainable",
            r.intensity_flop_per_byte,
            if r.bound == "memory" { "below" } else { "above" },
            r.ridge_flop_per_byte,
            r.bound,
            r.pct_of_attainable
        ),
        saving_ms: 0.0,
        estimate: "informational: no saving of its own".into(),
        evidence: vec![
            ev("FLOPs per step (modelled)", format!("{:.3} GFLOP", c.flops / n / 1e9)),
            ev("bytes per step (modelled)", super::fmt_bytes(c.total_bytes / n)),
            ev("arithmetic intensity", format!("{:.2} FLOP/B", r.intensity_flop_per_byte)),
            ev("ridge point", format!("{:.1} FLOP/B", r.ridge_flop_per_byte)),
            ev("achieved", format!("{:.2} TFLOP/s over GPU busy time", r.achieved_tflops)),
            ev("attainable", format!("{:.2} TFLOP/s", r.attainable_tflops)),
            ev("ceilings", format!("{:.0} TFLOP/s {}, {:.0} GB/s ({})", r.peak_tflops, c.dominant_dtype, r.bandwidth_gbs, r.ceilings_source)),
        ],
        explanation: "Informational: the roofline says which resource bounds the GPU work; the other findings say where the time goes.".into(),
        fixes: Vec::new(),
        locations: Vec::new(),
    };
    vec![d.finish(&META, ctx)]
}
