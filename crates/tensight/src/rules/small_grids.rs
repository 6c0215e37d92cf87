//! O001 small-grids: kernels that take real time but launch fewer blocks than the GPU has
//! SMs, so part of the GPU sits idle while they run.

use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::analysis::kernels::{
    classify, spread_saving, used_share, warp_size, KernelClass, MAX_SPREAD_SAVING, SUB_PARTITIONS,
};
use crate::analysis::simulate::{self, Change, Durations};
use crate::model::{GpuActivity, Profile};
use rustc_hash::FxHashMap;
use std::collections::HashMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "O001",
    name: "small-grids",
    category: Category::Occupancy,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Kernels that run long enough to matter but whose grid has fewer thread blocks than the
GPU has streaming multiprocessors (SMs): while one runs, the SMs without a block do
nothing. Blocks per SM come from each kernel's launch configuration and the device's SM
count (`deviceProperties`); CUPTI's estimated achieved occupancy is shown alongside.
Communication kernels (NCCL, custom all-reduce) are skipped: they use few blocks by
design. So are kernels that overlap work on another stream, which uses the idle SMs.

## Why it costs time
A grid of 33 blocks on a 132-SM GPU keeps 99 SMs idle: at best a quarter of the chip's
compute and a fraction of its memory bandwidth serve the kernel. This happens with small
batches, with GEMMs whose output is tiny but whose inner dimension is long (few output
tiles, a long K loop), with reductions over a few rows, and with per-sample loops.

## Example
`aten::addmm` on `[32, 65536] × [65536, 10]` runs `sm80_xmma_gemm_..._f32f32` with a
grid of 1×1×33 blocks for 84 µs on an H200 (132 SMs): 0.25 blocks per SM.

## Fix
```python
# before: one small problem at a time
for x in samples:            # batch of 1
    out.append(model(x))
# after: batch it, so each kernel has enough blocks
out = model(torch.stack(samples))
```
Also: a different algorithm for long-K GEMMs (split-K: `torch.compile` with
`max-autotune` can choose one), `torch.compile` to fuse small kernels into larger ones,
and independent small kernels on separate CUDA streams (`torch.cuda.Stream`) so they
share the GPU.

A grid can also fill every SM with too few warps: an SM issues instructions from four
sub-partitions (four SIMDs in an AMD compute unit), each only from its own resident
warps, so a block of one warp per SM leaves three of them idle and keeps few memory
requests in flight. Triton kernels launched with `num_warps=1` and many rows per
program are the usual case.

## Thresholds
A kernel counts when its grid has fewer blocks than the device has SMs or its warps fill
at most 3 of the 4 sub-partitions of every SM (`SUB_PARTITIONS`, `MAX_USED_FEW_WARPS`),
it runs at least 10 µs (`MIN_KERNEL_NS`) and less than half of its time overlaps a
kernel on another stream (`MAX_CONCURRENT_SHARE`). Reported when such kernels take at
least 5% of the kernel time (`MIN_SHARE_PCT`). Per kernel, the GPU time saved if its
work spread over all SMs is `dur × (1 − blocks/SMs × min(warps per busy SM / 4, 1))`
(its warps keep their speed, its work spreads over every SM and sub-partition), capped
at 90% of its time (`analysis::kernels::MAX_SPREAD_SAVING`: more blocks add split or
reduction work, so we assume no more than 10×). The step-time saving replays the trace
with those shorter kernels: only time on the GPU's critical path counts.

## References
- CUDA C++ Best Practices Guide: "Occupancy" and "Execution configuration optimizations".
- NVIDIA Nsight Compute: "Launch Statistics" (waves per SM) and "Occupancy" sections.
"#,
};

/// A kernel must run at least this long to count (ns).
const MIN_KERNEL_NS: i64 = 10_000;
/// Skip a kernel whose time overlaps kernels on another stream more than this share.
const MAX_CONCURRENT_SHARE: f64 = 0.5;
/// Report when counted kernels take at least this share of the kernel time (%).
const MIN_SHARE_PCT: f64 = 5.0;
/// A grid of at least one block per SM counts when its warps fill at most this share of
/// the sub-partitions (three of four).
const MAX_USED_FEW_WARPS: f64 = 0.75;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let Some(sms) = m.device.as_ref().map(|d| d.num_sms).filter(|&s| s > 0) else {
        return Vec::new();
    };
    let sms_f = f64::from(sms);
    let warp = warp_size(p);
    let n = ctx.steps();
    let concurrent = Concurrency::new(p, &m.timeline.gpu_in_steps);

    // Time-weighted launch statistics over every kernel, and the small grids.
    let (mut all_ns, mut coverage_ns, mut occ_ns, mut occ_w) = (0i64, 0.0f64, 0.0f64, 0i64);
    let (mut small_bps_ns, mut few_warps_ns) = (0.0f64, 0i64);
    let mut groups: FxHashMap<(&str, u64), Group> = FxHashMap::default();
    let mut new_dur: Durations = Durations::default();
    for &gi in &m.timeline.gpu_in_steps {
        let g = &p.gpu[gi as usize];
        let Some(launch) = g.launch.filter(|_| g.is_kernel()) else {
            continue;
        };
        let blocks = launch.blocks();
        all_ns += g.dur_ns;
        coverage_ns += g.dur_ns as f64 * (blocks as f64 / sms_f).min(1.0);
        if let Some(o) = launch.est_occupancy_pct {
            occ_ns += g.dur_ns as f64 * f64::from(o);
            occ_w += g.dur_ns;
        }
        let (used, warps_per_busy_sm) = used_share(&launch, sms_f, warp);
        let few_blocks = blocks < u64::from(sms);
        if !(few_blocks || used <= MAX_USED_FEW_WARPS)
            || g.dur_ns < MIN_KERNEL_NS
            || classify(&g.name) == KernelClass::Communication
            || concurrent.share(p, gi) > MAX_CONCURRENT_SHARE
        {
            continue;
        }
        let idle_share = spread_saving(used);
        let idle_blocks_share = spread_saving(blocks as f64 / sms_f);
        if warps_per_busy_sm < SUB_PARTITIONS && idle_share > idle_blocks_share + 0.01 {
            few_warps_ns += g.dur_ns;
        }
        let saved = (g.dur_ns as f64 * idle_share).round() as i64;
        new_dur.insert(gi, g.dur_ns - saved);
        small_bps_ns += g.dur_ns as f64 * blocks as f64 / sms_f;
        let e = groups
            .entry((&*g.name, blocks))
            .or_insert_with(|| Group::new(g, warp));
        e.count += 1;
        e.dur_ns += g.dur_ns;
        e.saved_ns += saved;
    }
    let small_ns: i64 = groups.values().map(|g| g.dur_ns).sum();
    if all_ns <= 0 || 100.0 * small_ns as f64 / (all_ns as f64) < MIN_SHARE_PCT {
        return Vec::new();
    }
    let gpu_saved_ns: i64 = groups.values().map(|g| g.saved_ns).sum();
    let step_saved_ns =
        simulate::saving_ns(p, &Change::durations(new_dur.clone())).min(gpu_saved_ns);
    let saving_ms = step_saved_ns as f64 / 1e6 / n;
    let mut list: Vec<(&(&str, u64), &Group)> = groups.iter().collect();
    list.sort_by(|a, b| b.1.saved_ns.cmp(&a.1.saved_ns).then_with(|| a.0.cmp(b.0)));
    let (top_key, top) = list[0];
    let coverage_pct = 100.0 * coverage_ns / all_ns as f64;
    let occ = (occ_w > 0).then(|| occ_ns / occ_w as f64);
    let launches: u64 = groups.values().map(|g| g.count).sum();
    let few_warps = few_warps_ns > 0;

    let d = Draft {
        change: Some(Change::durations(new_dur.clone())),
        title: if few_warps {
            "Kernels launch too few blocks or warps to fill the GPU's SMs".into()
        } else {
            "Kernels launch fewer blocks than the GPU has SMs".into()
        },
        message: format!(
            "{:.0} kernel launches per step ({} per step, {:.0}% of kernel time) use fewer blocks than the {sms} SMs{}; the largest, `{}`, runs {} blocks ({:.2} per SM){} for {} per step",
            launches as f64 / n,
            fmt_ms(small_ns as f64 / 1e6 / n),
            100.0 * small_ns as f64 / all_ns as f64,
            if few_warps { " or fewer than 4 warps per SM" } else { "" },
            short(top_key.0),
            top_key.1,
            top_key.1 as f64 / sms_f,
            if few_warps && top.warps_per_block < SUB_PARTITIONS {
                format!(" of {} warp{} each", top.warps_per_block, if top.warps_per_block == 1.0 { "" } else { "s" })
            } else {
                String::new()
            },
            fmt_ms(top.dur_ns as f64 / 1e6 / n),
        ),
        saving_ms,
        estimate: format!(
            "each such kernel's time × (1 − blocks/SMs{}), at most {:.0}% of it (assumes its work could spread over all {sms} SMs at no extra cost: more batch, split-K, another algorithm{}), {} of GPU time per step; the step saving replays the trace with those kernels shortened, so only time on the GPU's critical path counts",
            if few_warps { " × min(warps per busy SM / 4, 1)" } else { "" },
            MAX_SPREAD_SAVING * 100.0,
            if few_warps { "; an SM issues from 4 sub-partitions, each only from its own warps, so fewer than 4 warps per SM leave some idle" } else { "" },
            fmt_ms(gpu_saved_ns as f64 / 1e6 / n)
        ),
        evidence: vec![
            ev("SMs", sms.to_string()),
            ev(
                "small-grid kernel time per step",
                format!("{} ({:.1}% of kernel time)", fmt_ms(small_ns as f64 / 1e6 / n), 100.0 * small_ns as f64 / all_ns as f64),
            ),
            ev(
                "time-weighted blocks per SM of these kernels",
                format!("{:.2}", small_bps_ns / small_ns.max(1) as f64),
            ),
            ev(
                "time-weighted SM coverage (min(blocks/SMs, 1)), all kernels",
                format!("{coverage_pct:.0}%"),
            ),
            ev(
                "time-weighted est. achieved occupancy (CUPTI), all kernels",
                occ.map_or_else(|| "not recorded".into(), |o| format!("{o:.0}%")),
            ),
            ev("GPU time saved per step (modelled)", fmt_ms(gpu_saved_ns as f64 / 1e6 / n)),
            ev("step time saved per step (replayed)", fmt_ms(saving_ms)),
        ],
        explanation: format!(
            "While a kernel with fewer blocks than SMs runs, the SMs without a block idle{}; {:.0}% of the kernel time here runs with SMs left empty{}. Giving these kernels more independent work (a larger batch, split-K) or running them beside other work lets the idle SMs help. The step gains only where the GPU is the bottleneck: where the host launches slower than the GPU runs, shorter kernels just lengthen the gaps.",
            if few_warps {
                ", and an SM with fewer than 4 warps leaves some of its 4 sub-partitions idle and keeps few memory requests in flight"
            } else {
                ""
            },
            100.0 * small_ns as f64 / all_ns as f64,
            if few_warps { " or partly empty" } else { "" },
        ),
        fixes: few_warps
            .then(|| "In your own kernels, give each block more warps (Triton `num_warps=4` or 8, CUDA 128–256 threads) and fewer rows, so every SM holds at least 4 warps".to_string())
            .into_iter()
            .chain([
            "Increase the batch size (or batch per-sample loops into one call) so each kernel has at least one block per SM".into(),
            "For long-K GEMMs with a tiny output, let `torch.compile(model, mode=\"max-autotune\")` pick a split-K kernel, or reshape the problem".into(),
            "In a custom (Triton, CUDA) kernel, split each row's or sample's work over several programs: a 2-D grid whose partial results are combined by a second pass or atomics".into(),
            "Fuse small kernels with `torch.compile` so each launch carries more work".into(),
            "Run independent small kernels on separate `torch.cuda.Stream`s so they share the GPU".into(),
        ])
        .collect(),
        locations: list
            .iter()
            .take(5)
            .map(|((name, blocks), g)| {
                let mut loc = g.op.map(|o| op_location(p, o)).unwrap_or_default();
                loc.kernel = Some(name.to_string());
                loc.tensor = Some(format!(
                    "grid {}×{}×{} = {blocks} blocks on {sms} SMs, {} per step",
                    g.grid[0],
                    g.grid[1],
                    g.grid[2],
                    fmt_ms(g.dur_ns as f64 / 1e6 / n)
                ));
                loc
            })
            .collect::<Vec<Location>>(),
    };
    vec![d.finish(&META, ctx)]
}

/// Launches of one kernel name with one block count.
struct Group {
    count: u64,
    dur_ns: i64,
    saved_ns: i64,
    grid: [u32; 3],
    /// Warps per block (threads over the warp size, rounded up).
    warps_per_block: f64,
    op: Option<u32>,
}

impl Group {
    fn new(g: &GpuActivity, warp: u64) -> Group {
        Group {
            warps_per_block: g
                .launch
                .map_or(1, |l| l.threads_per_block().div_ceil(warp.max(1)))
                as f64,
            count: 0,
            dur_ns: 0,
            saved_ns: 0,
            grid: g.launch.map_or([1, 1, 1], |l| l.grid),
            op: g.op,
        }
    }
}

/// Kernels of the steps by device, for "does something else run beside it" queries.
struct Concurrency {
    /// Per device: kernel intervals (start, end, stream), sorted by start.
    by_device: HashMap<i64, Vec<(i64, i64, i64)>>,
    /// Longest kernel per device (ns): bounds the backward scan.
    longest: HashMap<i64, i64>,
    /// Devices whose kernels all ran on one stream: nothing runs beside them.
    one_stream: HashMap<i64, bool>,
}

impl Concurrency {
    fn new(p: &Profile, acts: &[u32]) -> Concurrency {
        let mut by_device: HashMap<i64, Vec<(i64, i64, i64)>> = HashMap::new();
        let mut longest: HashMap<i64, i64> = HashMap::new();
        for &gi in acts {
            let g = &p.gpu[gi as usize];
            if g.is_kernel() {
                by_device
                    .entry(g.device)
                    .or_default()
                    .push((g.ts_ns, g.end_ns(), g.stream));
                let l = longest.entry(g.device).or_default();
                *l = (*l).max(g.dur_ns);
            }
        }
        let mut one_stream = HashMap::new();
        for (&d, v) in by_device.iter_mut() {
            v.sort_unstable();
            one_stream.insert(d, v.iter().all(|k| k.2 == v[0].2));
        }
        Concurrency {
            by_device,
            longest,
            one_stream,
        }
    }

    /// Share of kernel `gi`'s time during which a kernel on another stream also ran.
    fn share(&self, p: &Profile, gi: u32) -> f64 {
        let g = &p.gpu[gi as usize];
        let (Some(v), Some(&longest)) =
            (self.by_device.get(&g.device), self.longest.get(&g.device))
        else {
            return 0.0;
        };
        if g.dur_ns <= 0 || self.one_stream.get(&g.device) == Some(&true) {
            return 0.0;
        }
        let from = v.partition_point(|k| k.0 < g.ts_ns - longest);
        let to = v.partition_point(|k| k.0 < g.end_ns());
        let mut spans: Vec<(i64, i64)> = v[from..to]
            .iter()
            .filter(|k| k.2 != g.stream && k.1 > g.ts_ns)
            .map(|k| (k.0.max(g.ts_ns), k.1.min(g.end_ns())))
            .collect();
        spans.sort_unstable();
        let covered = crate::analysis::timeline::overlap(&spans, g.ts_ns, g.end_ns());
        covered as f64 / g.dur_ns as f64
    }
}

/// A kernel name cut to its first 60 characters for a sentence.
fn short(name: &str) -> String {
    if name.chars().count() <= 60 {
        name.to_string()
    } else {
        format!("{}…", name.chars().take(60).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Three steps, each: a 100 µs GEMM with `blocks` blocks (H200: 132 SMs), then a
    /// 10 µs elementwise kernel, then a sync that waits for both (GPU-bound step).
    fn trace(blocks: u32) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 1_000.0 * s as f64;
            b.step(s + 1, t0, 1_000.0);
            let mm = b.op("aten::addmm", t0 + 10.0, 20.0);
            b.kernel(
                "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma",
                mm,
                t0 + 12.0,
                t0 + 20.0,
                100.0,
                [1, 1, blocks],
                [64, 1, 1],
            );
            let add = b.op("aten::add", t0 + 40.0, 10.0);
            b.kernel(
                "vectorized_elementwise_kernel",
                add,
                t0 + 42.0,
                t0 + 121.0,
                10.0,
                [4096, 1, 1],
                [128, 1, 1],
            );
            b.runtime("cudaDeviceSynchronize", t0 + 60.0, 75.0, None);
        }
        b
    }

    #[test]
    fn one_block_saves_at_most_ninety_percent() {
        // 100 µs × (1 − 1/132) = 99 µs of GPU time, capped at 90 µs.
        let r = trace(1).report();
        let f = finding(&r, "O001");
        let gpu = f
            .evidence
            .iter()
            .find(|e| e.label.starts_with("GPU time saved"));
        assert_eq!(
            gpu.map(|e| e.value.as_str()),
            Some("90.0 µs"),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn fires_on_a_long_kernel_with_few_blocks() {
        let r = trace(33).report();
        let f = finding(&r, "O001");
        // 100 µs × (1 − 33/132) = 75 µs of GPU time (under the 90% cap); the replay keeps
        // 71 µs of it: the next kernel was launched at 42 µs and the host's sync at 60 µs.
        assert!(
            (f.saving_ms - 0.071).abs() < 0.002,
            "saving {}",
            f.saving_ms
        );
        assert!(f.message.contains("33 blocks"), "{}", f.message);
    }

    #[test]
    fn silent_when_the_grid_covers_the_sms() {
        assert!(!codes(&trace(264).report()).contains(&"O001"));
    }
}
