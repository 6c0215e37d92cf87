//! T002 misaligned-gemm-shapes: 16-bit GEMMs whose leading dimensions are not multiples
//! of 16 bytes, so cuBLAS falls back to narrow loads or slower kernels.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::devices::Ceilings;
use crate::analysis::flops::{op_cost, parse_dims, CostKind, Dtype, OpCost};
use crate::analysis::gemm::shapes;
use crate::analysis::kernels::{classify, stated_alignment, KernelClass};
use crate::analysis::simulate::{self, Change, Durations};
use crate::model::Profile;
use std::collections::{BTreeMap, HashMap};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "T002",
    name: "misaligned-gemm-shapes",
    category: Category::TensorCores,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
fp16/bf16 (and fp8) matrix multiplications whose operands have a leading dimension that
is not a multiple of 16 bytes: 8 elements in 16-bit, 16 in fp8. The leading dimension
of each operand comes from the op's recorded shapes and strides (the row length of a
row-major matrix, the column length of a transposed one; the output's is N). Typical
culprits: a vocabulary of 30522 or 50257, a hidden size of 1023, a sequence length used
as the inner dimension in a backward GEMM. When the kernel's name states its vector
width (`_align2`, `_align8`) and it is the full 16 bytes, the GEMM is not reported.

## Why it costs time
Tensor-core GEMM kernels load tiles with 16-byte vector loads. When a row does not start
on a 16-byte boundary, cuBLAS must pick a kernel with 2- or 4-byte loads (or pad
internally), which moves the same data with 4–8× more load instructions. Measured on an
H200 (bf16, `F.linear`): [2048, 768] × [768, 50257] took 1.68 ms, against 0.22 ms with
N = 50304; [141, 512] × [512, 30522] 38 µs against 19 µs with N = 30528; K = 4095
instead of 4096 made a 4096² GEMM 6.5× slower.

## Example
BERT's output projection `aten::addmm` on `[141, 512] × [512, 30522]` (bf16) runs
`cutlass_80_tensorop_bf16_s16816gemm_bf16_256x128_64x3_tn_align2`: 30522 × 2 bytes is
not a multiple of 16, so the kernel reads 2 elements at a time. Checked on an H200: an
autocast bf16 training step of a [4096, 1024] × [1024, 50257] output layer (10.45 ms;
its forward and weight-gradient GEMMs ran `cutlass_75_..._align1` kernels at 97 and
145 TFLOP/s, 7.3 ms) was estimated to save 5.96 ms; padded to 50304 it measured
4.21 ms (6.24 ms saved).

## Fix
```python
# before
head = nn.Linear(hidden, 30522)
# after: pad the vocabulary (or hidden size) to a multiple of 8 (64 is better still);
# ignore the extra logits in the loss / at sampling
head = nn.Linear(hidden, 30528)           # (30522 + 63) // 64 * 64 = 30528
logits = head(x)[..., :30522]
```
Hugging Face: `model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)`.

## Thresholds
Reported when misaligned 16-bit GEMMs take at least 1% of the kernel time
(`MIN_SHARE_PCT`). The saving is a heuristic: each misaligned GEMM's kernel time less
the modelled time of the padded shape (misaligned dimensions rounded up to 8 or 16
elements), never below 0, so it never exceeds the time of the misaligned GEMMs. The
padded time is, in order of the evidence available:
- the padded FLOPs at the FLOP rate that aligned GEMMs of the same dtype and
  comparable size (¼× to 4× the FLOPs, `COMPARABLE`) reach in the same run;
- else, when a kernel of the GEMM states a vector width below 16 bytes (`_align1`,
  `_align2`, `_align4`: the narrow-load fallback is confirmed), the padded shape at the
  device's ceilings with compute and memory not overlapped: its FLOPs with M and N
  rounded up to whole 128-element tiles (`TILE`) at the bf16/fp16/fp8 peak, plus its
  bytes at the memory bandwidth. Measured ceilings (an H200's 790 TFLOP/s bf16 and
  4300 GB/s) are used as they are, datasheet ones derated to 80%
  (`DATASHEET_EFFICIENCY`). On an H200 this sum was at or above the measured time of
  aligned bf16 GEMMs from 8192² × 512 to 8192³ to within 10%, and 19.5 µs against the
  19 µs measured for [141, 512] × [512, 30528];
- else (only the shapes show the misalignment) that time divided by 0.5
  (`WEAK_EFFICIENCY`).

Never below 5 µs (`MIN_GEMM_NS`). The step-time saving replays the trace with those
times.

## References
- NVIDIA Deep Learning Performance guide: "Matrix Multiplication Background" and
  "Tensor Core Requirements" (dimensions multiple of 8 for fp16/bf16).
- cuBLAS documentation: "Tensor Core Usage" (alignment of leading dimensions and pointers).
- Karpathy, nanoGPT: vocab 50257 → 50304 "for efficiency".
"#,
};

/// Report when misaligned GEMMs take at least this share of kernel time (%).
const MIN_SHARE_PCT: f64 = 1.0;
/// Aligned GEMMs within this factor of FLOPs serve as the reference rate.
const COMPARABLE: f64 = 4.0;
/// Without a reference and without a kernel that states narrow loads, the padded GEMM
/// is assumed to reach this fraction of its modelled time at the ceilings.
const WEAK_EFFICIENCY: f64 = 0.5;
/// Fraction of datasheet ceilings a large GEMM reaches (an H200 measured 790 of 989
/// TFLOP/s bf16 and 4300 of 4800 GB/s); measured ceilings are used as they are.
const DATASHEET_EFFICIENCY: f64 = 0.8;
/// Output tile edge (elements) of the high-throughput tensor-core GEMM kernels: M and N
/// are computed in whole tiles.
const TILE: u64 = 128;
/// No GEMM is modelled shorter than this (ns).
const MIN_GEMM_NS: f64 = 5_000.0;
/// Vector width the kernels want, bytes.
const VECTOR_BYTES: i64 = 16;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let Some(c) = m.device.as_ref().and_then(|d| d.ceilings) else {
        return Vec::new();
    };
    let total_ns = m.kernels.total_ns;
    if total_ns <= 0 {
        return Vec::new();
    }
    let gemms = low_precision_gemms(p, &m.timeline.gpu_in_steps);
    let bad: Vec<&GemmOp> = gemms.iter().filter(|g| !g.misaligned.is_empty()).collect();
    let bad_ns: i64 = bad.iter().map(|g| g.dur_ns).sum();
    if bad.is_empty() || 100.0 * bad_ns as f64 / (total_ns as f64) < MIN_SHARE_PCT {
        return Vec::new();
    }
    let n = ctx.steps();
    // Per misaligned GEMM: its modelled aligned time; spread over its kernels by time.
    let mut new_dur: Durations = Durations::default();
    let mut groups: BTreeMap<String, Group> = BTreeMap::new();
    let mut gpu_saved_ns = 0i64;
    // GEMMs per basis: reference rate, ceilings, discounted ceilings.
    let mut bases = [0usize; 3];
    let (mut bad_flops, mut aligned_total) = (0.0, 0.0);
    for g in &bad {
        let (aligned_ns, basis) = aligned_time(g, &gemms, &c);
        bases[basis as usize] += 1;
        bad_flops += g.cost.flops;
        aligned_total += aligned_ns.min(g.dur_ns as f64);
        let saved = (g.dur_ns as f64 - aligned_ns).max(0.0);
        gpu_saved_ns += saved.round() as i64;
        for &(gi, d) in &g.kernels {
            let share = if g.dur_ns > 0 {
                d as f64 / g.dur_ns as f64
            } else {
                0.0
            };
            new_dur.insert(gi, d - (saved * share).round() as i64);
        }
        let key = format!("{}|{:?}|{:?}", p.ops[g.op as usize].name, g.dims, g.dtype);
        let e = groups.entry(key).or_insert_with(|| Group {
            op: g.op,
            kernel: g.kernel_name(p),
            misaligned: g.misaligned.clone(),
            dims: g.dims,
            align: g.align,
            count: 0,
            dur_ns: 0,
            saved_ns: 0,
        });
        e.count += 1;
        e.dur_ns += g.dur_ns;
        e.saved_ns += saved.round() as i64;
    }
    let step_saved_ns =
        simulate::saving_ns(p, &Change::durations(new_dur.clone())).min(gpu_saved_ns);
    let saving_ms = step_saved_ns as f64 / 1e6 / n;
    let mut list: Vec<Group> = groups.into_values().collect();
    list.sort_by(|a, b| {
        b.saved_ns
            .cmp(&a.saved_ns)
            .then_with(|| b.dur_ns.cmp(&a.dur_ns))
    });
    let top = &list[0];
    let stated: Vec<String> = bad
        .iter()
        .flat_map(|g| g.kernels.iter())
        .filter_map(|&(gi, _)| stated_alignment(&p.gpu[gi as usize].name))
        .map(|a| format!("align{a}"))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();

    let d = Draft {
        change: Some(Change::durations(new_dur.clone())),
        title: "16-bit GEMMs with dimensions not a multiple of 8".into(),
        message: format!(
            "{:.0} fp16/bf16 GEMMs per step ({} per step, {:.1}% of kernel time) have a leading dimension that is not a multiple of 16 bytes; the largest, `{}` with (M, N, K) = {:?}, has {} misaligned",
            bad.len() as f64 / n,
            fmt_ms(bad_ns as f64 / 1e6 / n),
            100.0 * bad_ns as f64 / total_ns as f64,
            p.ops[top.op as usize].name,
            top.dims,
            top.misaligned.join(", ")
        ),
        saving_ms,
        estimate: format!(
            "heuristic estimate: per misaligned GEMM, its kernel time less the modelled time of the padded shape (dimensions rounded up to {} elements): at the FLOP rate of comparable aligned GEMMs of the same dtype in this run ({:.0} of {:.0} per step), else at the ceilings ({:.0} TFLOP/s bf16, {:.0} GB/s{}) with M and N in whole {}-wide tiles, compute and memory not overlapped ({:.0} GEMMs per step whose kernels state narrow loads), that time doubled where only the shapes show the misalignment ({:.0} per step); at least {} µs. The misaligned GEMMs ran at {:.0} TFLOP/s, modelled padded at {:.0} TFLOP/s: {} of GPU time per step; the step saving replays the trace with those times",
            top.align,
            bases[Basis::Reference as usize] as f64 / n,
            bad.len() as f64 / n,
            c.bf16_tflops,
            c.mem_bw_gbs,
            if c.source == "datasheet" {
                format!(", datasheet, derated to {:.0}%", DATASHEET_EFFICIENCY * 100.0)
            } else {
                String::new()
            },
            TILE,
            bases[Basis::Ceiling as usize] as f64 / n,
            bases[Basis::Discounted as usize] as f64 / n,
            MIN_GEMM_NS / 1e3,
            tflops(bad_flops, bad_ns as f64),
            tflops(bad_flops, aligned_total),
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        evidence: vec![
            ev(
                "misaligned 16-bit GEMMs per step",
                format!("{:.0} ({} per step, {:.1}% of kernel time)", bad.len() as f64 / n, fmt_ms(bad_ns as f64 / 1e6 / n), 100.0 * bad_ns as f64 / total_ns as f64),
            ),
            ev("aligned 16-bit GEMMs per step", format!("{:.0}", (gemms.len() - bad.len()) as f64 / n)),
            ev(
                "vector width stated by their kernels",
                if stated.is_empty() { "not stated in the names".into() } else { stated.join(", ") },
            ),
            ev(
                "achieved rate of the misaligned GEMMs",
                format!(
                    "{:.0} TFLOP/s ({:.0}% of the {:.0} TFLOP/s bf16 ceiling); modelled padded: {:.0} TFLOP/s",
                    tflops(bad_flops, bad_ns as f64),
                    100.0 * tflops(bad_flops, bad_ns as f64) / c.bf16_tflops.max(1e-9),
                    c.bf16_tflops,
                    tflops(bad_flops, aligned_total)
                ),
            ),
            ev("GPU time saved per step (heuristic)", fmt_ms(gpu_saved_ns as f64 / 1e6 / n)),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "Tensor-core GEMMs read tiles with 16-byte loads; a leading dimension of {} elements breaks that alignment, so cuBLAS picks kernels with narrower loads (measured on an H200: 2× to 7.5× slower than the padded shape). Padding the dimension to a multiple of 8 (better 64) restores the fast kernels for a negligible amount of extra work.",
            top.misaligned.join(", ")
        ),
        fixes: vec![
            "Pad vocabulary and hidden sizes to a multiple of 64 (at least 8): e.g. 30522 → 30528, 50257 → 50304; slice the extra logits off".into(),
            "Hugging Face: `model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64)`".into(),
            "Pad batch×sequence dimensions that become GEMM inner dimensions in backward (pad sequences to a multiple of 8)".into(),
        ],
        locations: list
            .iter()
            .take(5)
            .map(|g| {
                let mut loc = op_location(p, g.op);
                loc.kernel = Some(g.kernel.clone());
                loc.tensor = Some(format!(
                    "{}; (M, N, K) = {:?}, misaligned {}; {:.0}× per step, {} per step, saves ~{} of GPU time",
                    shapes(p, g.op).unwrap_or_default(),
                    g.dims,
                    g.misaligned.join(", "),
                    g.count as f64 / n,
                    fmt_ms(g.dur_ns as f64 / 1e6 / n),
                    fmt_ms(g.saved_ns as f64 / 1e6 / n)
                ));
                loc
            })
            .collect(),
    };
    vec![d.finish(&META, ctx)]
}

/// One 16-bit GEMM op instance and its kernels.
struct GemmOp {
    op: u32,
    cost: OpCost,
    dtype: Dtype,
    dims: (u64, u64, u64),
    /// Alignment wanted, elements (16 bytes / element size).
    align: u64,
    /// Misaligned leading dimensions, as `N = 30522`.
    misaligned: Vec<String>,
    /// Padded (M, N, K).
    padded: (u64, u64, u64),
    kernels: Vec<(u32, i64)>,
    dur_ns: i64,
    /// One of its kernels states a vector width narrower than `align` (`_align2`): the
    /// narrow-load fallback is confirmed, not only inferred from the shapes.
    narrow: bool,
}

impl GemmOp {
    fn kernel_name(&self, p: &Profile) -> String {
        self.kernels
            .iter()
            .max_by_key(|&&(gi, d)| (d, std::cmp::Reverse(gi)))
            .map(|&(gi, _)| p.gpu[gi as usize].name.to_string())
            .unwrap_or_default()
    }
}

/// Locations and totals of one (op, shape).
struct Group {
    op: u32,
    kernel: String,
    misaligned: Vec<String>,
    dims: (u64, u64, u64),
    align: u64,
    count: u64,
    dur_ns: i64,
    saved_ns: i64,
}

/// 16-bit GEMM ops in the steps with their GEMM kernels, in order of first kernel.
fn low_precision_gemms(p: &Profile, acts: &[u32]) -> Vec<GemmOp> {
    let mut by_op: BTreeMap<u32, usize> = BTreeMap::new();
    let mut cache: HashMap<u32, Option<OpCost>> = HashMap::new();
    let mut out: Vec<GemmOp> = Vec::new();
    for &gi in acts {
        let g = &p.gpu[gi as usize];
        if !g.is_kernel() || classify(&g.name) != KernelClass::Gemm {
            continue;
        }
        let Some(op) = g.op else { continue };
        // Walking out from the kernel, the outermost op with a GEMM cost of the dtype the
        // innermost one has: an autocast wrapper (an fp32 `aten::linear` around the bf16
        // one that runs) describes inputs the kernel never sees.
        let mut found: Option<(u32, OpCost)> = None;
        for a in p.op_ancestors(op) {
            let c = *cache
                .entry(a)
                .or_insert_with(|| p.ops.get(a as usize).and_then(op_cost));
            if let Some(c) = c.filter(|c| c.kind == CostKind::Gemm) {
                if found.is_some_and(|(_, f)| f.dtype != c.dtype) {
                    break;
                }
                found = Some((a, c));
            }
        }
        let Some((a, cost)) = found else { continue };
        if !cost.dtype.is_low_precision() {
            continue;
        }
        let Some(dims) = cost.gemm_dims else { continue };
        if let Some(&i) = by_op.get(&a) {
            out[i].kernels.push((gi, g.dur_ns));
            out[i].dur_ns += g.dur_ns;
            continue;
        }
        let item = i64::from(cost.dtype.itemsize()).max(1);
        let align = (VECTOR_BYTES / item).max(1) as u64;
        let misaligned = misaligned_dims(p, a, dims, item);
        let pad = |d: u64, name: &str| {
            if misaligned.iter().any(|m| m.starts_with(name)) {
                d.div_ceil(align).saturating_mul(align)
            } else {
                d
            }
        };
        let padded = (pad(dims.0, "M"), pad(dims.1, "N"), pad(dims.2, "K"));
        by_op.insert(a, out.len());
        out.push(GemmOp {
            op: a,
            cost,
            dtype: cost.dtype,
            dims,
            align,
            misaligned,
            padded,
            kernels: vec![(gi, g.dur_ns)],
            dur_ns: g.dur_ns,
            narrow: false,
        });
    }
    // A kernel that states a full 16-byte vector width is aligned whatever the shapes say.
    for g in &mut out {
        let full = g.kernels.iter().all(|&(gi, _)| {
            stated_alignment(&p.gpu[gi as usize].name).is_some_and(|a| u64::from(a) >= g.align)
        });
        if full {
            g.misaligned.clear();
        }
        g.narrow = g.kernels.iter().any(|&(gi, _)| {
            stated_alignment(&p.gpu[gi as usize].name).is_some_and(|a| u64::from(a) < g.align)
        });
    }
    out
}

/// The leading dimensions of op `o`'s operands and output that are not a multiple of 16
/// bytes, named by the GEMM dimension they equal (`N = 30522`).
fn misaligned_dims(p: &Profile, o: u32, (m, n, k): (u64, u64, u64), item: i64) -> Vec<String> {
    let op = &p.ops[o as usize];
    let dims = op.input_dims.as_deref().map(parse_dims).unwrap_or_default();
    let strides = op
        .input_strides
        .as_deref()
        .map(parse_dims)
        .unwrap_or_default();
    let (a, b) = match &*op.name {
        "aten::addmm" | "aten::_addmm_activation" | "aten::baddbmm" => (1, 2),
        _ => (0, 1),
    };
    let mut lds: Vec<i64> = [a, b]
        .iter()
        .filter_map(|&i| leading_dim(dims.get(i)?, strides.get(i).map(Vec::as_slice)))
        .collect();
    lds.push(n as i64); // the output [.., M, N] is written contiguous
    let mut out: Vec<String> = Vec::new();
    for ld in lds {
        if ld <= 1 || (i128::from(ld) * i128::from(item)) % i128::from(VECTOR_BYTES) == 0 {
            continue;
        }
        let name = if ld as u64 == k {
            "K"
        } else if ld as u64 == n {
            "N"
        } else if ld as u64 == m {
            "M"
        } else {
            "ld"
        };
        let s = format!("{name} = {ld}");
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The leading dimension of a matrix operand (its last two dimensions): the stride of the
/// dimension that does not have stride 1, or without strides the row length. `None` for
/// vectors and unusable shapes.
fn leading_dim(shape: &[i64], strides: Option<&[i64]>) -> Option<i64> {
    if shape.len() < 2 {
        return None;
    }
    let (r, c) = (shape[shape.len() - 2], shape[shape.len() - 1]);
    if r <= 1 || c <= 1 {
        return None;
    }
    match strides.filter(|s| s.len() == shape.len()) {
        Some(s) => {
            let (sr, sc) = (s[s.len() - 2], s[s.len() - 1]);
            Some(if sc == 1 {
                sr
            } else if sr == 1 {
                sc
            } else {
                sr.max(sc)
            })
        }
        None => Some(c),
    }
}

/// TFLOP/s of `flops` done in `ns`.
fn tflops(flops: f64, ns: f64) -> f64 {
    if ns > 0.0 {
        flops / ns / 1e3
    } else {
        0.0
    }
}

/// How a misaligned GEMM's aligned time was modelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Basis {
    /// At the FLOP rate of comparable aligned GEMMs of the same run.
    Reference,
    /// At the device's ceilings: its kernels state the narrow loads.
    Ceiling,
    /// At the device's ceilings divided by `WEAK_EFFICIENCY`: only the shapes say it.
    Discounted,
}

/// Modelled time (ns) of the padded GEMM, and on what it rests.
///
/// With comparable aligned GEMMs of the same dtype in the run, the padded FLOPs at their
/// FLOP rate. Otherwise the padded shape's cost at the ceilings, compute and memory not
/// overlapped: its FLOPs with M and N rounded up to whole `TILE`s at the bf16/fp16/fp8
/// peak, plus its bytes at the memory bandwidth (no wave quantization: cuBLAS's split-K
/// and stream-K kernels avoid most of it); datasheet (unmeasured) ceilings are derated to
/// `DATASHEET_EFFICIENCY`. When no kernel states its narrow loads the evidence is the
/// shapes alone, and that time is divided by `WEAK_EFFICIENCY`.
fn aligned_time(g: &GemmOp, all: &[GemmOp], c: &Ceilings) -> (f64, Basis) {
    let (m, n, k) = g.dims;
    let (pm, pn, pk) = g.padded;
    let base = (m as f64 * n as f64 * k as f64).max(1.0);
    let flops = g.cost.flops * (pm as f64 * pn as f64 * pk as f64) / base;
    let derate = if c.source == "datasheet" {
        DATASHEET_EFFICIENCY
    } else {
        1.0
    };
    let peak = match g.dtype {
        Dtype::F16 => c.fp16_tflops,
        Dtype::F8 | Dtype::F4 => c.fp8_tflops.unwrap_or(c.bf16_tflops),
        _ => c.bf16_tflops,
    } * derate
        * 1e3; // FLOP per ns
    let bw = c.mem_bw_gbs * derate; // bytes per ns
    let memory = if bw > 0.0 { g.cost.min_bytes / bw } else { 0.0 };
    let roofline = (flops / peak).max(memory);
    let (mut f, mut t) = (0.0, 0i64);
    for o in all {
        if o.misaligned.is_empty()
            && o.dtype == g.dtype
            && o.cost.flops >= flops / COMPARABLE
            && o.cost.flops <= flops * COMPARABLE
        {
            f += o.cost.flops;
            t += o.dur_ns;
        }
    }
    if t > 0 && f > 0.0 {
        let rate = f / t as f64; // FLOP per ns
        return (
            (flops / rate).max(roofline).max(MIN_GEMM_NS),
            Basis::Reference,
        );
    }
    let (tm, tn) = (pm.div_ceil(TILE) * TILE, pn.div_ceil(TILE) * TILE);
    let tiled = g.cost.flops * (tm as f64 * tn as f64 * pk as f64) / base;
    let ceiling = tiled / peak + memory;
    if g.narrow {
        (ceiling.max(MIN_GEMM_NS), Basis::Ceiling)
    } else {
        (
            (ceiling / WEAK_EFFICIENCY).max(MIN_GEMM_NS),
            Basis::Discounted,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};
    use serde_json::json;

    /// Three GPU-bound steps: `aten::mm` [2048, 768] × [768, `n`] in bf16 running
    /// `kernel` for `dur` µs, then a sync waiting for it. With `autocast`, the mm sits in
    /// a bf16 `aten::linear` inside the fp32 `aten::linear` autocast records around it.
    fn trace_with(n: i64, kernel: &str, dur: f64, autocast: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            if autocast {
                b.op_with(
                    "aten::linear",
                    t0 + 2.0,
                    40.0,
                    json!({"Input Dims": [[2048, 768], [n, 768], []],
                           "Input type": ["float", "float", ""],
                           "Input Strides": [[768, 1], [768, 1], []]}),
                );
                b.op_with(
                    "aten::linear",
                    t0 + 5.0,
                    36.0,
                    json!({"Input Dims": [[2048, 768], [n, 768], []],
                           "Input type": ["c10::BFloat16", "c10::BFloat16", ""],
                           "Input Strides": [[768, 1], [768, 1], []]}),
                );
            }
            let mm = b.op_with(
                "aten::mm",
                t0 + 10.0,
                30.0,
                json!({"Input Dims": [[2048, 768], [768, n]],
                       "Input type": ["c10::BFloat16", "c10::BFloat16"],
                       "Input Strides": [[768, 1], [1, 768]]}),
            );
            b.kernel(
                kernel,
                mm,
                t0 + 20.0,
                t0 + 30.0,
                dur,
                [400, 16, 1],
                [256, 1, 1],
            );
            b.runtime("cudaDeviceSynchronize", t0 + 50.0, dur - 10.0, None);
        }
        b
    }

    fn trace(n: i64, kernel: &str) -> TraceBuilder {
        trace_with(n, kernel, 1_680.0, false)
    }

    const ALIGN2: &str = "cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align2";

    /// Modelled time (µs) of the padded [2048, 768] × [768, 50257] GEMM at the H200's
    /// measured ceilings: N padded to 50264 and to whole 128-wide tiles (50304), at
    /// 790 TFLOP/s, plus the unpadded operands and output at 4300 GB/s.
    fn padded_us() -> f64 {
        let (m, n, k) = (2048.0, 50257.0, 768.0);
        let compute = 2.0 * m * 50304.0 * k / 790e12;
        let bytes = 2.0 * (m * k + k * n + m * n) / 4300e9;
        (compute + bytes) * 1e6
    }

    #[test]
    fn fires_on_a_vocab_of_50257() {
        let r = trace(50257, ALIGN2).report();
        let f = finding(&r, "T002");
        assert!(f.message.contains("N = 50257"), "{}", f.message);
        // No aligned GEMM to compare with, and the kernel states 4-byte loads: the padded
        // shape at the ceilings, 200.5 µs of compute + 66.5 µs of memory; saving 1680 −
        // 267 µs, all on the critical path.
        let expect = (1_680.0 - padded_us()) / 1e3;
        assert!(
            (f.saving_ms - expect).abs() < 0.005,
            "saving {} vs {expect}",
            f.saving_ms
        );
        assert!(
            f.estimate.contains("1 GEMMs per step whose kernels state"),
            "{}",
            f.estimate
        );
    }

    #[test]
    fn halves_the_modelled_rate_when_only_the_shapes_show_it() {
        // A kernel name that states no vector width: the padded time is doubled.
        let r = trace(
            50257,
            "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64",
        )
        .report();
        let f = finding(&r, "T002");
        let expect = (1_680.0 - 2.0 * padded_us()) / 1e3;
        assert!(
            (f.saving_ms - expect).abs() < 0.005,
            "saving {} vs {expect}",
            f.saving_ms
        );
    }

    #[test]
    fn sees_through_the_fp32_op_autocast_records() {
        // The outer fp32 `aten::linear` must not hide the bf16 GEMM that runs.
        let r = trace_with(50257, ALIGN2, 1_680.0, true).report();
        let f = finding(&r, "T002");
        assert!(f.message.contains("N = 50257"), "{}", f.message);
        assert!(f.message.contains("`aten::linear`"), "{}", f.message);
        let expect = (1_680.0 - padded_us()) / 1e3;
        assert!(
            (f.saving_ms - expect).abs() < 0.005,
            "saving {} vs {expect}",
            f.saving_ms
        );
    }

    #[test]
    fn never_saves_more_than_the_gemm_takes() {
        // Already as fast as the model of the padded shape: nothing to save.
        let r = trace_with(50257, ALIGN2, 250.0, false).report();
        let f = finding(&r, "T002");
        assert_eq!(f.saving_ms, 0.0);
        // A very slow one saves at most its own time.
        let r = trace_with(50257, ALIGN2, 9_000.0, false).report();
        let f = finding(&r, "T002");
        assert!(f.saving_ms > 0.0 && f.saving_ms <= 9.0, "{}", f.saving_ms);
    }

    #[test]
    fn silent_on_aligned_shapes_or_full_width_kernels() {
        let aligned = trace(50304, "nvjet_sm90_tst_256x144_64x4_4x1_v_bz_coopA_TNT").report();
        assert!(!codes(&aligned).contains(&"T002"));
        let autocast = trace_with(
            50304,
            "nvjet_sm90_tst_256x144_64x4_4x1_v_bz_coopA_TNT",
            1_680.0,
            true,
        )
        .report();
        assert!(!codes(&autocast).contains(&"T002"));
        // The shape is odd but the kernel states 16-byte loads: nothing to gain.
        let full = trace(
            50257,
            "cutlass_80_tensorop_bf16_s16816gemm_bf16_128x256_64x3_tn_align8",
        )
        .report();
        assert!(!codes(&full).contains(&"T002"));
    }
}
