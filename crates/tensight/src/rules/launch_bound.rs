//! L001 launch-bound: the GPU idles between many short kernels because the host cannot
//! launch them as fast as the GPU runs them.

use super::{ev, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status};
use crate::analysis::median;
use crate::analysis::simulate::{subtract_intervals, Change};
use crate::analysis::timeline::{gpu_range, overlap};
use crate::model::{OpKind, Profile, RuntimeKind};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "L001",
    name: "launch-bound",
    category: Category::Launch,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Stretches of a step where the GPU runs many short kernels with idle gaps between them,
and each gap ends with a kernel whose launch the host issued only after the GPU had run
dry: the GPU waited for the host to launch. These *dense launch regions* are where the
per-kernel cost on the host (Python, the dispatcher, autograd, `cudaLaunchKernel`)
exceeds the kernel's own run time.

## Why it costs time
Each eager PyTorch op costs the host tens of microseconds before its kernel is queued;
a kernel on a small tensor runs in 2–10 µs. When the host is slower than the GPU, the
queue is empty and the GPU idles between kernels: step time is set by the host's launch
rate, not by the GPU. CUDA graphs replay the whole sequence with one launch, and the
GPU then runs the kernels back to back (about 1 µs apart).

## Example
60 kernels per step, 97% of them under 10 µs (median 4.6 µs), one launched every ~70 µs:
the GPU is busy 7% of the step and idle 3.9 ms of 4.4 ms, each gap ending when the next
`cudaLaunchKernel` returns. Checked on an H200: a 16-layer MLP training step at batch 32
(170 kernels, median 2 µs) was estimated to save 6.4 ms of its 7.2 ms (profiled); as a
CUDA graph it measured 0.42 ms.

## Fix
```python
# before: eager, one host dispatch per op
for x, y in loader:
    loss = loss_fn(model(x), y); loss.backward(); opt.step(); opt.zero_grad()
# after: capture the step once, replay it (static shapes)
model = torch.compile(model, mode="reduce-overhead")   # CUDA graphs under the hood
# or by hand: g = torch.cuda.CUDAGraph(); with torch.cuda.graph(g): ...; g.replay()
opt = torch.optim.AdamW(model.parameters(), fused=True)  # or foreach=True: few kernels
```
Also: a larger batch (more work per launch), fusing small ops (`torch.compile`), and
foreach/fused optimizers instead of per-parameter loops.

A graph replays the shapes it was captured with. When at least half of the regions'
kernels (`DYNAMIC_SHARE`) launch with a (name, grid) that some analysed step launches
a different number of times than another — shapes that follow the data: a loop over
requests of different lengths, per-group `nonzero` — the first fix is to batch that
work into fixed-size ops (pad, bucket, sort by group and slice), then graph or fuse it.

## Thresholds
A dense launch region has at least 8 kernels (`MIN_REGION_KERNELS`) with a median
duration under 10 µs (`SHORT_KERNEL_NS`); it ends at a gap longer than 500 µs
(`MAX_GAP_NS`), at a gap after a blocking sync, or at a gap the host did not cause (the
next kernel was queued more than 5 µs, `SKEW_NS`, before the GPU ran dry). Reported when
the estimated saving is at least 1% of the step (`MIN_SAVING_PCT`). The saving is the
step replayed (`analysis::simulate`) with each region as one CUDA graph: its kernels
back to back 1 µs apart (`GRAPH_GAP_NS`), the host's work between its first and last
launch gone but for one graph launch of 10 µs (`GRAPH_LAUNCH_NS`, an assumption) —
except the host time of allocator calls (`cudaMalloc`/`cudaFree`), copies and syncs in
that span: that is not launch overhead, and the rules of its cause (A002, D001, S001)
own it.

## References
- PyTorch docs: "CUDA Graphs" (torch.cuda.graphs) and `torch.compile(mode="reduce-overhead")`.
- PyTorch performance tuning guide: "Use CUDA graphs", "Fuse operations".
- NVIDIA blog: "Getting Started with CUDA Graphs".
"#,
};

/// Kernels a dense launch region needs.
const MIN_REGION_KERNELS: usize = 8;
/// Median kernel duration at most this for the region to count as short kernels (ns).
const SHORT_KERNEL_NS: i64 = 10_000;
/// An idle gap longer than this ends a region (ns): beyond it the host is doing other work.
const MAX_GAP_NS: i64 = 500_000;
/// Gap left between kernels when a CUDA graph replays them (ns).
const GRAPH_GAP_NS: i64 = crate::analysis::simulate::GRAPH_GAP_NS;
/// Host time of one CUDA graph launch, which replaces the region's launches (ns).
const GRAPH_LAUNCH_NS: i64 = 10_000;
/// Host/GPU clock tolerance when deciding that a launch came after the GPU ran dry (ns).
const SKEW_NS: i64 = 5_000;
/// Report when the saving is at least this share of the step (%).
const MIN_SAVING_PCT: f64 = 1.0;
/// Share of the regions' kernels whose launches change between steps at and above which
/// the shapes count as changing (a graph captured once would not replay them).
const DYNAMIC_SHARE: f64 = 0.5;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let m = ctx.metrics;
    let n = ctx.steps();
    let regions = dense_regions(p);
    if regions.is_empty() {
        return Vec::new();
    }
    let idle_cpu_ns: i64 = m.timeline.steps.iter().map(|s| s.idle.cpu_ns).sum();
    let gaps_ns: i64 = regions.iter().map(|r| r.idle_ns).sum();
    let removable_ns: i64 = regions
        .iter()
        .flat_map(|r| r.gaps.iter())
        .map(|g| (g.idle_ns - GRAPH_GAP_NS).max(0))
        .sum();
    let _ = removable_ns.min(idle_cpu_ns);
    // The fix: each region replayed as one CUDA graph, its kernels back to back, and the
    // host's per-op work inside it gone but for one graph launch. Host time in allocator
    // calls, copies and syncs inside the span is not launch overhead: other causes own it
    // (A002, D001, S001), so it stays.
    let spans: Vec<(i64, i64)> = regions
        .iter()
        .filter(|r| r.launch_span.1 > r.launch_span.0 + GRAPH_LAUNCH_NS)
        .map(|r| (r.launch_span.0 + GRAPH_LAUNCH_NS, r.launch_span.1))
        .collect();
    let owned = sorted_ranges(p, |k| {
        matches!(
            k,
            RuntimeKind::Malloc | RuntimeKind::Free | RuntimeKind::Memcpy | RuntimeKind::Sync
        )
    });
    let change = Change {
        graphs: regions.iter().map(|r| r.members.clone()).collect(),
        host_cuts: subtract_intervals(spans, owned),
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if ctx.step_ms() <= 0.0 || 100.0 * saving_ms / ctx.step_ms() < MIN_SAVING_PCT {
        return Vec::new();
    }

    let kernels: usize = regions.iter().map(|r| r.kernel_durs.len()).sum();
    let mut durs: Vec<i64> = regions
        .iter()
        .flat_map(|r| r.kernel_durs.iter().copied())
        .collect();
    let median_kernel_us = median(&mut durs) as f64 / 1e3;
    let kernel_ns: i64 = durs.iter().sum();
    let span_ns: i64 = regions.iter().map(|r| r.end_ns - r.start_ns).sum();
    let launches: usize = regions.iter().map(|r| r.launches).sum();
    let host_span_ns: i64 = regions.iter().map(|r| r.host_span_ns).sum();
    let host_per_launch_us = if launches > regions.len() {
        host_span_ns as f64 / (launches - regions.len()) as f64 / 1e3
    } else {
        0.0
    };
    let (api_n, api_ns) = launch_api(p);
    let api_us = if api_n > 0 {
        api_ns as f64 / api_n as f64 / 1e3
    } else {
        0.0
    };
    let busy_pct = if span_ns > 0 {
        100.0 * kernel_ns as f64 / span_ns as f64
    } else {
        0.0
    };
    let idle_ms = gaps_ns as f64 / 1e6 / n;
    let ks = &m.kernels;
    let varying = step_varying(p);
    let in_regions: Vec<u32> = regions
        .iter()
        .flat_map(|r| r.members.iter().copied())
        .filter(|&g| p.gpu[g as usize].is_kernel())
        .collect();
    let dynamic_share = match &varying {
        Some(v) if !in_regions.is_empty() => {
            in_regions.iter().filter(|&&g| v[g as usize]).count() as f64 / in_regions.len() as f64
        }
        _ => 0.0,
    };
    let dynamic = dynamic_share >= DYNAMIC_SHARE;
    let mut fixes: Vec<String> = vec![
        "Capture the step as a CUDA graph: `torch.compile(model, mode=\"reduce-overhead\")`, or `torch.cuda.CUDAGraph` / `torch.cuda.make_graphed_callables` with static shapes".into(),
        "Fuse small ops with `torch.compile(model)`: fewer, larger kernels".into(),
        "Use foreach/fused optimizers: `torch.optim.AdamW(params, fused=True)` (or `foreach=True`)".into(),
        "Increase the batch size so each kernel carries more work per launch".into(),
    ];
    if dynamic {
        // A graph replays the shapes it was captured with: first make the work static
        // or batched, then graph or fuse it.
        fixes[0] = format!(
            "Batch the per-item work first: {:.0}% of these kernels launch with grids that change from step to step (shapes that depend on the data: per-item loops, variable lengths, `nonzero`), so a CUDA graph captured once would not replay them. Process the items in one op (pad or bucket to fixed sizes, sort by group and slice), then capture or fuse it",
            100.0 * dynamic_share
        );
    }

    let mut d = Draft {
        change: Some(change),
        title: "GPU waits for kernel launches (launch-bound)".into(),
        message: format!(
            "the GPU idles {} per step between {:.0} short kernels (median {:.1} µs) that the host launches one every {:.1} µs; {:.0}% of all kernels run under 10 µs",
            fmt_ms(idle_ms),
            kernels as f64 / n,
            median_kernel_us,
            host_per_launch_us,
            ks.under_10us_pct
        ),
        saving_ms,
        estimate: format!(
            "the step replayed with {} dense launch region(s) (≥{MIN_REGION_KERNELS} kernels, median under {} µs, every gap ended by a launch issued after the GPU ran dry, gaps under {} µs) each as one CUDA graph: kernels {} µs apart, the host's work between the region's launches replaced by one {} µs graph launch, but for its allocator calls, copies and syncs (their own rules' time); averaged over steps. Measured under the profiler, whose per-op overhead widens these gaps: compare with a run profiled the same way after the fix",
            regions.len(),
            SHORT_KERNEL_NS / 1_000,
            MAX_GAP_NS / 1_000,
            GRAPH_GAP_NS / 1_000,
            GRAPH_LAUNCH_NS / 1_000
        ) + if dynamic {
            ". The shapes here change between steps, so a graph captured once would not replay them as they are: read it as the launch overhead that batching the per-item work (then a graph or fusion) removes"
        } else {
            ""
        },
        evidence: vec![
            ev("kernels per step", format!("{:.0}", m.summary.kernels_per_step)),
            ev(
                "kernels under 10 µs",
                format!("{:.0}% of kernels, {:.0}% of kernel time", ks.under_10us_pct, ks.under_10us_time_pct),
            ),
            ev(
                "dense launch regions",
                // regions are counted over all the analysed steps (one may span an edge):
                // their kernels in all, each region at least MIN_REGION_KERNELS
                format!(
                    "{} in {:.0} step{} ({} kernels in all, {:.0} per step)",
                    regions.len(),
                    n,
                    if n == 1.0 { "" } else { "s" },
                    kernels,
                    kernels as f64 / n
                ),
            ),
            ev("median kernel in them", format!("{median_kernel_us:.1} µs")),
            ev("host time per launch in them", format!("{host_per_launch_us:.1} µs")),
            ev("mean launch API call", format!("{api_us:.1} µs")),
            ev("GPU busy inside the regions", format!("{busy_pct:.1}%")),
            ev("GPU idle inside the regions per step", fmt_ms(idle_ms)),
            ev(
                "host-not-launching idle per step",
                fmt_ms(m.summary.idle_ms_per_step.cpu),
            ),
        ],
        explanation: format!(
            "Kernels here run for a median {median_kernel_us:.1} µs but the host needs {host_per_launch_us:.1} µs per launch (Python, dispatcher, autograd; the launch API call alone {api_us:.1} µs), so the queue stays empty and the GPU waits {} per step. Replaying the sequence as a CUDA graph removes the host from between the kernels; fusing ops or a larger batch makes each launch carry more work.",
            fmt_ms(idle_ms)
        ),
        fixes,
        locations: locations(p, &regions),
    };
    if dynamic_share > 0.0 {
        d.evidence.push(ev(
            "kernels whose launches change between steps",
            format!("{:.0}% of those in the regions", 100.0 * dynamic_share),
        ));
    }
    vec![d.finish(&META, ctx)]
}

/// One idle gap inside a dense region.
struct Gap {
    /// Idle counted (ns): the gap less memcpy and DataLoader host time.
    idle_ns: i64,
    /// The activity that ended the gap (index into `Profile::gpu`).
    next: u32,
}

/// A run of short kernels separated by launch-wait gaps.
struct Region {
    start_ns: i64,
    end_ns: i64,
    kernel_durs: Vec<i64>,
    gaps: Vec<Gap>,
    idle_ns: i64,
    /// Runtime launch calls linked to its activities.
    launches: usize,
    /// From the first to the last of those calls (ns).
    host_span_ns: i64,
    /// Its activities (indices into `Profile::gpu`).
    members: Vec<u32>,
    /// The first and the last launch call's start (ns).
    launch_span: (i64, i64),
}

/// Dense launch regions of every step, in time order.
fn dense_regions(p: &Profile) -> Vec<Region> {
    let dev = p.main_device().map(|d| d.id);
    let syncs: Vec<(i64, i64)> = sorted_ranges(p, |k| k == RuntimeKind::Sync);
    let memcpys: Vec<(i64, i64)> = sorted_ranges(p, |k| k == RuntimeKind::Memcpy);
    let mut loader: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#"))
        .map(|o| (o.ts_ns, o.end_ns()))
        .collect();
    loader.sort_unstable();
    let mut out = Vec::new();
    for s in &p.steps {
        let (lo, hi) = gpu_range(p, s);
        let acts: Vec<u32> = (lo as u32..hi as u32)
            .filter(|&i| dev.is_none_or(|d| p.gpu[i as usize].device == d))
            .collect();
        let Some((&first, rest)) = acts.split_first() else {
            continue;
        };
        let mut cur = Builder::start(p, first);
        let mut busy_end = p.gpu[first as usize].end_ns();
        for &gi in rest {
            let g = &p.gpu[gi as usize];
            let gap = g.ts_ns - busy_end;
            if gap > 0 {
                if waited_for_launch(p, gi, busy_end)
                    && gap <= MAX_GAP_NS
                    && !any_overlap(&syncs, busy_end - SKEW_NS, g.ts_ns)
                {
                    let host_elsewhere =
                        overlap(&memcpys, busy_end, g.ts_ns) + overlap(&loader, busy_end, g.ts_ns);
                    cur.gaps.push(Gap {
                        idle_ns: (gap - host_elsewhere).max(0),
                        next: gi,
                    });
                } else {
                    cur.finish(&mut out);
                    cur = Builder::start(p, gi);
                    busy_end = g.end_ns();
                    continue;
                }
            }
            cur.add(p, gi);
            busy_end = busy_end.max(g.end_ns());
        }
        cur.finish(&mut out);
    }
    out
}

/// A region being built.
struct Builder {
    r: Region,
    gaps: Vec<Gap>,
    first_launch: Option<i64>,
    last_launch: Option<i64>,
}

impl Builder {
    fn start(p: &Profile, gi: u32) -> Builder {
        let g = &p.gpu[gi as usize];
        let mut b = Builder {
            r: Region {
                start_ns: g.ts_ns,
                end_ns: g.end_ns(),
                kernel_durs: Vec::new(),
                gaps: Vec::new(),
                idle_ns: 0,
                launches: 0,
                host_span_ns: 0,
                members: Vec::new(),
                launch_span: (0, 0),
            },
            gaps: Vec::new(),
            first_launch: None,
            last_launch: None,
        };
        b.add(p, gi);
        b
    }

    fn add(&mut self, p: &Profile, gi: u32) {
        let g = &p.gpu[gi as usize];
        if g.is_kernel() {
            self.r.kernel_durs.push(g.dur_ns);
        }
        self.r.members.push(gi);
        self.r.end_ns = self.r.end_ns.max(g.end_ns());
        if let Some(r) = g.runtime.and_then(|r| p.runtime.get(r as usize)) {
            self.r.launches += 1;
            self.first_launch = Some(self.first_launch.map_or(r.ts_ns, |f| f.min(r.ts_ns)));
            self.last_launch = Some(self.last_launch.map_or(r.ts_ns, |l| l.max(r.ts_ns)));
        }
    }

    /// Keep the region if it is dense and short.
    fn finish(mut self, out: &mut Vec<Region>) {
        if self.r.kernel_durs.len() < MIN_REGION_KERNELS || self.gaps.is_empty() {
            return;
        }
        let mut d = self.r.kernel_durs.clone();
        if median(&mut d) > SHORT_KERNEL_NS {
            return;
        }
        self.r.idle_ns = self.gaps.iter().map(|g| g.idle_ns).sum();
        self.r.gaps = self.gaps;
        if let (Some(a), Some(b)) = (self.first_launch, self.last_launch) {
            self.r.host_span_ns = b - a;
            self.r.launch_span = (a, b);
        }
        out.push(self.r);
    }
}

/// True when activity `gi` was launched only after the GPU ran dry at `busy_end` (within
/// clock skew): the GPU waited for the host. Graph launches are already batched.
fn waited_for_launch(p: &Profile, gi: u32, busy_end: i64) -> bool {
    let Some(r) = p.gpu[gi as usize]
        .runtime
        .and_then(|r| p.runtime.get(r as usize))
    else {
        return false;
    };
    matches!(
        r.kind,
        RuntimeKind::Launch | RuntimeKind::Memcpy | RuntimeKind::Memset
    ) && r.end_ns() >= busy_end - SKEW_NS
}

/// For each GPU activity, whether it is a kernel whose (name, grid) is launched a
/// different number of times in some analysed step than in another: its shapes depend
/// on the data. A kernel belongs to the step its launch call (else its start) falls in.
/// `None` with fewer than two steps (nothing to compare).
fn step_varying(p: &Profile) -> Option<Vec<bool>> {
    if p.steps.len() < 2 {
        return None;
    }
    let step_of = |g: &crate::model::GpuActivity| {
        let t = g
            .runtime
            .and_then(|r| p.runtime.get(r as usize))
            .map_or(g.ts_ns, |r| r.ts_ns);
        let i = p.steps.partition_point(|s| s.end_ns <= t);
        (i < p.steps.len() && p.steps[i].start_ns <= t).then_some(i)
    };
    type Key<'a> = (&'a str, [u32; 3]);
    let mut counts: BTreeMap<Key, Vec<u32>> = BTreeMap::new();
    let mut keys: Vec<Option<Key>> = Vec::with_capacity(p.gpu.len());
    for g in &p.gpu {
        // Without its grid (a trace that does not record it) a kernel gives no evidence.
        let key = match (g.launch.as_ref().filter(|_| g.is_kernel()), step_of(g)) {
            (Some(l), Some(i)) => {
                let k = (&*g.name, l.grid);
                counts.entry(k).or_insert_with(|| vec![0; p.steps.len()])[i] += 1;
                Some(k)
            }
            _ => None,
        };
        keys.push(key);
    }
    // Compare only steps that launch like a step: at least half the median step's
    // kernels (a short last or first step says nothing about shapes).
    let mut totals = vec![0u32; p.steps.len()];
    for c in counts.values() {
        for (t, x) in totals.iter_mut().zip(c) {
            *t += x;
        }
    }
    let mut sorted = totals.clone();
    sorted.sort_unstable();
    let median = sorted[sorted.len() / 2];
    let like: Vec<usize> = (0..totals.len())
        .filter(|&i| totals[i] > 0 && 2 * totals[i] >= median)
        .collect();
    if like.len() < 2 {
        return None;
    }
    let varies: std::collections::BTreeSet<Key> = counts
        .into_iter()
        .filter(|(_, c)| like.iter().any(|&i| c[i] != c[like[0]]))
        .map(|(k, _)| k)
        .collect();
    Some(
        keys.into_iter()
            .map(|k| k.is_some_and(|k| varies.contains(&k)))
            .collect(),
    )
}

/// Runtime calls of the kinds `keep`, as sorted (start, end) ranges.
fn sorted_ranges(p: &Profile, keep: impl Fn(RuntimeKind) -> bool) -> Vec<(i64, i64)> {
    let mut v: Vec<(i64, i64)> = p
        .runtime
        .iter()
        .filter(|r| keep(r.kind))
        .map(|r| (r.ts_ns, r.end_ns()))
        .collect();
    v.sort_unstable();
    v
}

/// True when any range in `v` (sorted by start) overlaps [lo, hi).
fn any_overlap(v: &[(i64, i64)], lo: i64, hi: i64) -> bool {
    let i = v.partition_point(|r| r.0 < hi);
    v[..i].iter().rev().take(64).any(|r| r.1 > lo)
}

/// Launch API calls in the steps: count and total time (ns).
fn launch_api(p: &Profile) -> (u64, i64) {
    let (lo, hi) = crate::analysis::window(p);
    p.runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Launch && r.ts_ns >= lo && r.ts_ns < hi)
        .fold((0, 0), |(n, t), r| (n + 1, t + r.dur_ns))
}

/// The ops whose kernels waited longest for their launch, most idle first.
fn locations(p: &Profile, regions: &[Region]) -> Vec<super::Location> {
    let mut by_op: BTreeMap<&str, (i64, u32, Option<u32>)> = BTreeMap::new();
    for g in regions.iter().flat_map(|r| r.gaps.iter()) {
        let act = &p.gpu[g.next as usize];
        let Some(op) = act.op else { continue };
        let top = p.top_level_op(op);
        let e = by_op
            .entry(&p.ops[top as usize].name)
            .or_insert((0, top, None));
        e.0 += g.idle_ns;
        e.2.get_or_insert(g.next);
    }
    let mut v: Vec<_> = by_op.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then_with(|| a.0.cmp(b.0)));
    v.into_iter()
        .take(5)
        .map(|(_, (_, top, act))| {
            let mut loc = op_location(p, top);
            loc.kernel = act.map(|a| p.gpu[a as usize].name.to_string());
            loc
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Three steps of `n` tiny kernels (3 µs) each launched `every` µs apart by its own
    /// op, the GPU idle in between.
    fn trace(n: usize, every: f64) -> TraceBuilder {
        trace_with_grid(n, every, |_| 256)
    }

    /// As [`trace`], step `s`'s kernels launching `grid(s)` blocks.
    fn trace_with_grid(n: usize, every: f64, grid: impl Fn(u32) -> u32) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        let step_us = 100.0 + every * n as f64;
        for s in 0..3 {
            let t0 = step_us * s as f64;
            b.step(s + 1, t0, step_us);
            for k in 0..n {
                let t = t0 + 20.0 + every * k as f64;
                let op = b.op("aten::add", t, 8.0);
                b.kernel(
                    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>",
                    op,
                    t + 1.0,
                    t + 8.0,
                    3.0,
                    [grid(s), 1, 1],
                    [128, 1, 1],
                );
            }
        }
        b
    }

    #[test]
    fn fires_when_host_launches_slower_than_gpu_runs() {
        let r = trace(40, 50.0).report();
        let f = finding(&r, "L001");
        // As one graph: the host's 1950 µs between the first and last launch become one
        // 10 µs graph launch, the kernels run back to back; each 2.1 ms step ends 1.94 ms
        // earlier, less the graph's own 1 µs gaps: 1.933 ms.
        let expect = 1.933;
        assert!(
            (f.saving_ms - expect).abs() < 0.01,
            "saving {}",
            f.saving_ms
        );
        assert!(f.message.contains("40 short kernels"), "{}", f.message);
    }

    #[test]
    fn shapes_that_change_between_steps_put_batching_before_graphs() {
        let fixes = |r: &crate::report::Report| finding(r, "L001").fixes.clone();
        // The same grids every step: a graph captured once replays them.
        let r = trace(40, 50.0).report();
        assert!(
            fixes(&r)[0].starts_with("Capture the step as a CUDA graph"),
            "{:?}",
            fixes(&r)
        );
        // Grids that follow the data (another size each step): batch first.
        let r = trace_with_grid(40, 50.0, |s| 200 + 8 * s).report();
        let f = finding(&r, "L001");
        assert!(
            f.fixes[0].starts_with("Batch the per-item work first: 100%"),
            "{:?}",
            f.fixes
        );
        assert!(
            f.estimate.contains("shapes here change between steps"),
            "{}",
            f.estimate
        );
        // The estimate itself does not change.
        assert!((f.saving_ms - finding(&trace(40, 50.0).report(), "L001").saving_ms).abs() < 1e-9);
    }

    #[test]
    fn silent_when_the_gpu_keeps_up() {
        // Kernels queued back to back (launched every 2 µs, 3 µs each): no launch-wait gaps.
        assert!(!codes(&trace(40, 2.0).report()).contains(&"L001"));
        // Too few kernels for a dense region.
        assert!(!codes(&trace(5, 50.0).report()).contains(&"L001"));
    }
}
