//! V004 channels-first-convolutions: convolutions on NCHW (NCDHW) tensors whose library
//! kernels work on NHWC, so every call pays layout transposes, and the batch norms beside
//! them run PyTorch's channels-first kernels of one block per channel.

use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::analysis::flops::parse_dims;
use crate::analysis::kernels::{spread_saving, used_share, warp_size, MAX_SPREAD_SAVING};
use crate::analysis::simulate::{Change, Durations};
use crate::model::Profile;
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "V004",
    name: "channels-first-convolutions",
    category: Category::Views,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Convolutions whose input is in PyTorch's default channels-first layout (NCHW, or NCDHW
for 3-D) while the kernels cuDNN picks for them work on channels-last (NHWC) data: each
call then launches layout transposes around its convolution kernel (`nchwToNhwcKernel`,
`nhwcToNchwKernel`), in the forward and in both gradients. Found from the kernels the
convolution ops launched; no hardware pass needed.

## Why it costs time
A transpose reads and writes the whole activation (or gradient) once more: on a network
of large activations (video, segmentation, high-resolution images) they can take a fifth
of the GPU's time. The batch norms of such a network suffer too: on NCHW tensors
PyTorch runs channels-first kernels that give each channel one block, so a layer of 64
channels keeps 64 of 132 SMs busy, where its channels-last kernels spread the work over
every SM. Tensor-core convolutions in fp16/bf16 (and TF32) are the usual case: their
fast kernels are NHWC only.

## Example
An R(2+1)D video network in bf16 on `[8, 3, 16, 112, 112]` clips: 98 `nchwToNhwcKernel`
and 49 `nhwcToNchwKernel` launches a step take 12.5 ms of a 68 ms step, and
`batch_norm_backward_kernel` runs 64 blocks on 132 SMs for 24 ms.

## Fix
```python
model = model.to(memory_format=torch.channels_last)      # 4-D: Conv2d
x = x.to(device).contiguous(memory_format=torch.channels_last)
# 3-D convolutions (Conv3d): torch.channels_last_3d for the model and the input
```
Outputs stay channels-last through convolutions, norms and pointwise ops, so the
transposes and the channels-first norm kernels go; results are the same.

## Thresholds
Reported when the layout transposes launched by convolution ops (their op or an
enclosing one named `*conv*`) take at least 1% of the kernel time
(`MIN_TRANSPOSE_PCT`) and the replayed saving is at least 1% of the step
(`MIN_SAVING_PCT`). Estimate: the transposes removed, and each channels-first batch-norm
kernel that leaves SMs idle shortened by the idle share of its launch (blocks per SM and
warps per busy SM, as O001 models it, at most 90%: its channels-last kernel fills the
GPU), the trace replayed with those times. Slower channels-first convolution kernels
(cuDNN's generic `implicit_convolveNd_sgemm`) are not counted: a lower bound there.

## References
- PyTorch tutorial: "(beta) Channels Last Memory Format in PyTorch".
- NVIDIA Deep Learning Performance guide: "Convolutional Layers User's Guide", tensor
  layouts (NHWC for Tensor Cores).
"#,
};

/// Report when the transposes take at least this share of the kernel time (%).
const MIN_TRANSPOSE_PCT: f64 = 1.0;
/// Report when the replayed saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;

/// A layout transpose that convolution libraries launch around an NHWC kernel.
fn is_layout_transpose(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("nchwtonhwc")
        || n.contains("nhwctonchw")
        || n.contains("nchw2nhwc")
        || n.contains("nhwc2nchw")
}

/// PyTorch's channels-first batch-norm kernels (the channels-last ones say so).
fn is_channels_first_batch_norm(name: &str) -> bool {
    name.contains("batch_norm") && !name.contains("channels_last")
}

/// The convolution op that owns op `o`: itself or an enclosing op named `*conv*`.
fn convolution(p: &Profile, o: u32) -> Option<u32> {
    p.op_ancestors(o)
        .filter(|&a| p.ops[a as usize].name.contains("conv"))
        .last()
}

/// The transposes of one source line's convolutions.
struct Site {
    op: u32,
    launches: usize,
    ns: i64,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let n = ctx.steps();
    let (mut all_ns, mut transpose_ns) = (0i64, 0i64);
    let (mut norm_ns, mut norm_saved_ns) = (0i64, 0i64);
    let mut new_dur: Durations = Durations::default();
    let mut sites: BTreeMap<String, Site> = BTreeMap::new();
    let mut rank = 4usize;
    let sms = m
        .device
        .as_ref()
        .map(|d| f64::from(d.num_sms))
        .filter(|&s| s > 0.0);
    let warp = warp_size(p);
    for &gi in &m.timeline.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        if !g.is_kernel() {
            continue;
        }
        all_ns += g.dur_ns;
        if is_channels_first_batch_norm(&g.name) {
            if let (Some(l), Some(sms)) = (g.launch, sms) {
                let (used, _) = used_share(&l, sms, warp);
                let saved = (g.dur_ns as f64 * spread_saving(used)).round() as i64;
                if saved > 0 {
                    new_dur.insert(gi, g.dur_ns - saved);
                    norm_ns += g.dur_ns;
                    norm_saved_ns += saved;
                }
            }
            continue;
        }
        let Some(conv) =
            g.op.filter(|_| is_layout_transpose(&g.name))
                .and_then(|o| convolution(p, o))
        else {
            continue;
        };
        transpose_ns += g.dur_ns;
        new_dur.insert(gi, 0);
        if let Some(d) = p.ops[conv as usize].input_dims.as_deref().map(parse_dims) {
            rank = rank.max(d.first().map_or(0, Vec::len));
        }
        let key = p.user_frame(conv).map_or_else(
            || p.ops[conv as usize].name.to_string(),
            |f| f.name.to_string(),
        );
        let site = sites.entry(key).or_insert(Site {
            op: conv,
            launches: 0,
            ns: 0,
        });
        site.launches += 1;
        site.ns += g.dur_ns;
    }
    if all_ns <= 0 || 100.0 * transpose_ns as f64 / (all_ns as f64) < MIN_TRANSPOSE_PCT {
        return Vec::new();
    }
    let change = Change::durations(new_dur);
    let saving_ms = ctx.replayed_ms(&change);
    if 100.0 * saving_ms / ctx.step_ms().max(1e-9) < MIN_SAVING_PCT {
        return Vec::new();
    }
    let launches: usize = sites.values().map(|s| s.launches).sum();
    let mut list: Vec<(String, Site)> = sites.into_iter().collect();
    list.sort_by(|a, b| b.1.ns.cmp(&a.1.ns).then_with(|| a.0.cmp(&b.0)));
    let format = if rank >= 5 {
        "torch.channels_last_3d"
    } else {
        "torch.channels_last"
    };
    let layout = if rank >= 5 { "NCDHW" } else { "NCHW" };
    let pct = |ns: i64| 100.0 * ns as f64 / all_ns as f64;
    let per_step = |ns: i64| fmt_ms(ns as f64 / 1e6 / n);
    let d = Draft {
        change: Some(change),
        title: format!("Convolutions run on channels-first ({layout}) tensors"),
        message: format!(
            "{:.0} layout transposes per step around convolutions ({} per step, {:.0}% of kernel time): their kernels work on channels-last data and the tensors are {layout}{}",
            launches as f64 / n,
            per_step(transpose_ns),
            pct(transpose_ns),
            if norm_ns > 0 {
                format!("; channels-first batch-norm kernels that leave SMs idle take {} more", per_step(norm_ns))
            } else {
                String::new()
            },
        ),
        saving_ms,
        estimate: format!(
            "the transposes removed ({} per step){}, the trace replayed with those times; slower channels-first convolution kernels are not counted",
            per_step(transpose_ns),
            if norm_ns > 0 {
                format!(
                    " and each channels-first batch-norm kernel shortened by the share of the GPU its launch leaves idle (blocks per SM, warps per busy SM; at most {:.0}%: {} per step)",
                    MAX_SPREAD_SAVING * 100.0,
                    per_step(norm_saved_ns)
                )
            } else {
                String::new()
            },
        ),
        evidence: {
            let mut e = vec![
                ev("layout transposes launched by convolutions per step", format!("{:.0}", launches as f64 / n)),
                ev("their time per step", format!("{} ({:.1}% of kernel time)", per_step(transpose_ns), pct(transpose_ns))),
            ];
            if norm_ns > 0 {
                e.push(ev("channels-first batch-norm kernels leaving SMs idle, per step", per_step(norm_ns)));
                e.push(ev("their idle share, modelled (saved channels-last)", per_step(norm_saved_ns)));
            }
            e.push(ev("step time saved per step (replayed)", fmt_ms(saving_ms)));
            e
        },
        explanation: format!(
            "cuDNN's fastest convolution kernels for 16-bit and TF32 read and write channels-last (NHWC) data; given {layout} tensors, each convolution, forward and backward, transposes its input into NHWC and its output back, reading and writing every activation once more. Batch norms on {layout} tensors run kernels of one block per channel, which leave SMs idle when there are fewer channels than SMs."
        ),
        fixes: vec![
            format!("`model = model.to(memory_format={format})` once, after building the model"),
            format!("Convert each input batch on the GPU: `x = x.to(device, non_blocking=True).contiguous(memory_format={format})`"),
            "Keep custom ops layout-agnostic: a `.view()` or `.contiguous()` with no memory format turns tensors back into channels-first".into(),
        ],
        locations: list
            .iter()
            .take(5)
            .map(|(_, s)| {
                let mut loc = op_location(p, s.op);
                loc.tensor = Some(format!(
                    "{layout} input: {:.0} transposes per step, {} per step",
                    s.launches as f64 / n,
                    per_step(s.ns)
                ));
                loc
            })
            .collect::<Vec<Location>>(),
    };
    vec![d.finish(&META, ctx)]
}

#[cfg(test)]
mod tests {
    use super::{is_channels_first_batch_norm, is_layout_transpose};
    use crate::testing::{codes, finding, TraceBuilder};

    /// Three GPU-bound steps of a convolution that transposes its input (`transpose_us`
    /// µs) around a 100 µs NHWC kernel, and a batch norm of 64 one-block-per-channel
    /// blocks (60 µs) on a 132-SM GPU.
    fn trace(transpose_us: f64, norm_name: &str) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 1_000.0 * s as f64;
            b.step(s + 1, t0, 1_000.0);
            let conv = b.op("aten::cudnn_convolution", t0 + 10.0, 30.0);
            b.kernel(
                "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16>",
                conv,
                t0 + 12.0,
                t0 + 20.0,
                transpose_us,
                [512, 1, 1],
                [256, 1, 1],
            );
            b.kernel(
                "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc",
                conv,
                t0 + 14.0,
                t0 + 21.0 + transpose_us,
                100.0,
                [264, 1, 1],
                [256, 1, 1],
            );
            let bn = b.op("aten::native_batch_norm", t0 + 50.0, 10.0);
            b.kernel(
                norm_name,
                bn,
                t0 + 52.0,
                t0 + 130.0 + transpose_us,
                60.0,
                [64, 1, 1],
                [512, 1, 1],
            );
            b.runtime(
                "cudaDeviceSynchronize",
                t0 + 60.0,
                180.0 + transpose_us,
                None,
            );
        }
        b
    }

    #[test]
    fn names() {
        assert!(is_layout_transpose(
            "void cudnn::engines_precompiled::nhwcToNchwKernel<float>"
        ));
        assert!(!is_layout_transpose(
            "sm90_xmma_fprop_implicit_gemm_nhwckrsc_nhwc"
        ));
        assert!(is_channels_first_batch_norm(
            "void at::native::batch_norm_backward_kernel<c10::BFloat16>"
        ));
        assert!(!is_channels_first_batch_norm(
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<float>"
        ));
    }

    #[test]
    fn transposes_and_channels_first_norms_are_replayed_away() {
        let r = trace(
            40.0,
            "void at::native::batch_norm_collect_statistics_kernel<float>",
        )
        .report();
        let f = finding(&r, "V004");
        // 40 µs of transposes (and up to 7 µs of the wait for them, as the convolution
        // was launched before they ran), and the norm's 60 µs × (1 − 64/132) ≈ 30.9 µs.
        assert!((0.0709..0.078).contains(&f.saving_ms), "{}", f.saving_ms);
        assert!(f.message.contains("NCHW"), "{}", f.message);
    }

    #[test]
    fn channels_last_norms_are_not_counted() {
        let r = trace(
            40.0,
            "void at::native::batch_norm_collect_statistics_channels_last_kernel<float>",
        )
        .report();
        let f = finding(&r, "V004");
        assert!((0.040..0.047).contains(&f.saving_ms), "{}", f.saving_ms);
    }

    #[test]
    fn silent_without_transposes() {
        let r = trace(
            0.0,
            "void at::native::batch_norm_collect_statistics_kernel<float>",
        )
        .report();
        assert!(!codes(&r).contains(&"V004"));
    }
}
