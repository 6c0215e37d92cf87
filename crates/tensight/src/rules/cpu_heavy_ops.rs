//! C001 cpu-heavy-ops: ops that launch GPU work but spend far longer on the host than
//! their kernels take, while the GPU waits.

use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::analysis::host_work::{idle_overlap, is_top_level, step_of, Steady};
use crate::analysis::simulate::Change;
use crate::model::{OpKind, Profile, RuntimeKind};
use std::collections::{BTreeMap, BTreeSet};

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "C001",
    name: "cpu-heavy-ops",
    category: Category::CpuResidency,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Outermost ops (on any thread, the autograd engine's included) whose host time is more
than 10× the GPU time of the work they launched, and whose host time goes beyond what
launching that work costs in eager mode: host-side computation inside the op (index or
mask building on the CPU, Python callbacks, per-call planning such as cuDNN heuristics,
conversions of Python lists). Host time spent blocked in syncs, memcpy calls and
allocator calls is not counted (S001, D001, A002 own it), nor are copy ops and scalar
reads. Ops that launched no GPU work at all are C004's.

## Why it costs time
While the host computes inside the op, nothing is queued; once the GPU has drained what
was queued before, it idles until the op finally launches its kernels. The GPU work is
tiny by comparison, so the host, not the GPU, sets the pace.

## Example
`aten::index` with a CPU index list: 900 µs on the host building and copying the index
for a 12 µs gather kernel, with the GPU idle for 850 µs of it.

## Fix
```python
# before: indices built on the CPU every step
idx = torch.tensor([i for i in range(n) if keep[i]])
y = x[idx.cuda()]
# after: build them on the GPU, once or with tensor ops
keep_gpu = keep.cuda()                          # once, before the loop
y = x[keep_gpu.nonzero(as_tuple=True)[0]]       # or x[keep_gpu] (boolean mask)
# per-op host overhead: compile or capture the step
step = torch.compile(step, mode="reduce-overhead")
```

## Thresholds
An op instance counts when its host time (less syncs, memcpy and allocator calls) is
more than 10× its GPU time and exceeds 50 µs per launched kernel (an eager op's
dispatch and launch cost under the profiler) by at least 100 µs; an op (by name and
source line and input shapes) counts when that happens in at least 2 calls, in at least
half of its calls and in at least half of the steps, so one-off costs such as lazy
initialisation or each layer's first, autotuned call do not. The saving is the step
replayed (`analysis::simulate`) without every counted instance's excess host time.
Reported when the total is at least 50 µs per step and 1% of the step.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- PyTorch performance tuning guide: "Avoid unnecessary CPU-GPU synchronization",
  "Create tensors directly on the target device".
- PyTorch profiler recipe: `key_averages()` sorted by `self_cpu_time_total`.
"#,
};

/// Host time / GPU time above which an op is CPU-heavy.
const MIN_RATIO: f64 = 10.0;
/// Host time an eager op may spend per launched kernel (dispatch + launch) (ns).
const EAGER_LAUNCH_NS: i64 = 50_000;
/// Host time beyond the launch budget for an instance to count (ns).
const MIN_EXCESS_NS: i64 = 100_000;
/// Calls a site must be CPU-heavy in (one call is a one-off: a first call, lazy init).
const MIN_CALLS: u64 = 2;
/// Share of a site's calls that must be CPU-heavy.
const MIN_CALL_SHARE: f64 = 0.5;
/// Share of the steps a site must be CPU-heavy in.
const MIN_STEP_SHARE: f64 = 0.5;
/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.05;
/// Smallest saving reported, % of the step.
const MIN_SHARE_PCT: f64 = 1.0;
/// Most offenders listed as locations.
const MAX_SITES: usize = 5;

/// Ops whose host time other rules own.
const OWNED_ELSEWHERE: &[&str] = &[
    "aten::to",
    "aten::_to_copy",
    "aten::copy_",
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::pin_memory",
    "aten::_pin_memory",
];

#[derive(Default)]
struct Site {
    /// Calls of this op at this site with these shapes.
    calls: u64,
    /// Of which CPU-heavy.
    count: u64,
    host_ns: i64,
    gpu_ns: i64,
    saving_ns: i64,
    op: Option<u32>,
    steps: BTreeSet<usize>,
    /// Host time the fix removes: each instance's excess, from its start.
    cuts: Vec<(i64, i64)>,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let launched = ctx.launched();
    let blocked = blocked_ranges(p);
    let steady = Steady::of(p);
    // Keys borrow the profile's strings: one entry per call site, no copy per op.
    let mut sites: BTreeMap<(&str, &str, &str), Site> = BTreeMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        let i = i as u32;
        let gpu_ns = launched.gpu_ns.get(i as usize).copied().unwrap_or(0);
        if o.kind != OpKind::Op
            || gpu_ns <= 0
            || OWNED_ELSEWHERE.contains(&&*o.name)
            || !steady.includes(p, o.ts_ns)
            || !is_top_level(p, i)
        {
            continue;
        }
        let source = p.user_frame(i).map_or("", |f| &*f.name);
        // Shapes in the key: one op at one call site with the same inputs, heavy again
        // and again, is a habit; each layer's first (autotuned) call is not.
        let dims = o.input_dims.as_deref().unwrap_or_default();
        let s = sites.entry((&*o.name, source, dims)).or_default();
        s.calls += 1;
        // Host time less the time blocked in syncs, memcpy and allocator calls.
        let (blocked_ns, blocked_idle_ns) =
            blocked_in(&blocked, gaps, o.pid, o.tid, o.ts_ns, o.end_ns());
        let host_ns = o.dur_ns - blocked_ns;
        if (host_ns as f64) <= MIN_RATIO * gpu_ns as f64 {
            continue;
        }
        let launches = launched.launches.get(i as usize).copied().unwrap_or(0) as i64;
        let excess = host_ns - EAGER_LAUNCH_NS * launches.max(1);
        if excess < MIN_EXCESS_NS {
            continue;
        }
        let idle = idle_overlap(gaps, o.ts_ns, o.end_ns()) - blocked_idle_ns;
        s.count += 1;
        s.host_ns += host_ns;
        s.gpu_ns += gpu_ns;
        s.saving_ns += excess.min(idle).max(0);
        s.cuts.push((o.ts_ns, o.ts_ns + excess));
        s.op = s.op.or(Some(i));
        if let Some(si) = step_of(&p.steps, o.ts_ns) {
            s.steps.insert(si);
        }
    }
    let n = steady.n;
    // A one-off (autotuning, a first call) is not a habit of the step.
    sites.retain(|_, s| {
        s.count >= MIN_CALLS
            && s.count as f64 >= MIN_CALL_SHARE * s.calls as f64
            && s.steps.len() as f64 >= MIN_STEP_SHARE * n
    });
    // The fix: the excess host time of every instance no longer happens.
    let change = Change {
        host_cuts: sites
            .values()
            .flat_map(|s| s.cuts.iter().copied())
            .collect(),
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if sites.is_empty()
        || saving_ms < MIN_SAVING_MS
        || saving_ms < MIN_SHARE_PCT / 100.0 * ctx.step_ms()
    {
        return Vec::new();
    }
    let host_ms = sites.values().map(|s| s.host_ns).sum::<i64>() as f64 / 1e6 / n;
    let gpu_ms = sites.values().map(|s| s.gpu_ns).sum::<i64>() as f64 / 1e6 / n;
    let mut ranked: Vec<(&(&str, &str, &str), &Site)> = sites.iter().collect();
    ranked.sort_by(|a, b| b.1.saving_ns.cmp(&a.1.saving_ns).then_with(|| a.0.cmp(b.0)));
    let top = ranked[0];
    let locations: Vec<Location> = ranked
        .iter()
        .take(MAX_SITES)
        .map(|((_, source, dims), s)| {
            let mut l = s.op.map(|o| op_location(p, o)).unwrap_or_default();
            if l.source.is_none() && !source.is_empty() {
                l.source = Some(source.to_string());
            }
            l.tensor = Some(format!(
                "{}{} host vs {} GPU per call",
                short_dims(dims),
                fmt_ms(s.host_ns as f64 / 1e6 / s.count.max(1) as f64),
                fmt_ms(s.gpu_ns as f64 / 1e6 / s.count.max(1) as f64)
            ));
            l
        })
        .collect();
    let ratio = |s: &Site| {
        if s.gpu_ns > 0 {
            s.host_ns as f64 / s.gpu_ns as f64
        } else {
            f64::INFINITY
        }
    };
    let offenders: Vec<String> = ranked
        .iter()
        .take(3)
        .map(|((name, _, _), s)| {
            format!(
                "{name} ({:.0}:1, {} per step)",
                ratio(s),
                fmt_ms(s.saving_ns as f64 / 1e6 / n)
            )
        })
        .collect();
    let at = if top.0 .1.is_empty() {
        String::new()
    } else {
        format!(" at {}", top.0 .1)
    };
    let d = Draft {
        change: Some(change),
        title: "CPU-heavy ops keep the GPU waiting".into(),
        message: format!(
            "{} op call site(s) spend {} per step on the host for {} of GPU work (top offender `{}`{at}, {:.0}:1); the GPU idles through {} per step of that host time",
            sites.len(),
            fmt_ms(host_ms),
            fmt_ms(gpu_ms),
            top.0 .0,
            ratio(top.1),
            fmt_ms(saving_ms),
        ),
        saving_ms,
        estimate: format!(
            "the step replayed without each counted call's host time (less syncs, memcpy and allocator calls) beyond {} per launched kernel: what the step shortens where those calls held the GPU back, averaged over steps{}",
            fmt_ms(EAGER_LAUNCH_NS as f64 / 1e6),
            steady.note
        ),
        evidence: vec![
            ev("CPU-heavy ops host time per step", fmt_ms(host_ms)),
            ev("their GPU time per step", fmt_ms(gpu_ms)),
            ev("CPU overhead share of the step", format!("{:.1}%", 100.0 * host_ms / ctx.step_ms().max(1e-9))),
            ev("top offenders", offenders.join(", ")),
        ],
        explanation: format!(
            "These ops compute on the host far longer than their kernels run on the GPU. Until they launch, the GPU has nothing queued, so about {} per step of their host time is GPU idle time.",
            fmt_ms(saving_ms)
        ),
        fixes: vec![
            "Look at what the op does on the host (profile with `with_stack=True`): build indices and masks with GPU tensor ops, not Python lists or CPU tensors".into(),
            "Hoist per-step host work that does not change (constant tensors, index lists) out of the loop".into(),
            "Cut per-op host overhead with `torch.compile` (fewer, fused ops) or CUDA graphs (`mode=\"reduce-overhead\"`)".into(),
            "Give each op more work: a larger batch amortizes the fixed host cost per op".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// Recorded input shapes, shortened for a location (`[[32, 3, 32, 32], []]: `).
fn short_dims(dims: &str) -> String {
    if dims.is_empty() || dims == "[]" {
        return String::new();
    }
    let mut d: String = dims.chars().take(60).collect();
    if d.len() < dims.len() {
        d.push('…');
    }
    format!("inputs {d}: ")
}

/// Runtime calls that block the host (syncs, memcpy, allocator), per (pid, tid), sorted.
fn blocked_ranges(p: &Profile) -> BTreeMap<(i64, i64), Vec<(i64, i64)>> {
    let mut out: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for r in &p.runtime {
        if matches!(
            r.kind,
            RuntimeKind::Sync | RuntimeKind::Memcpy | RuntimeKind::Malloc | RuntimeKind::Free
        ) {
            out.entry((r.pid, r.tid))
                .or_default()
                .push((r.ts_ns, r.end_ns()));
        }
    }
    out
}

/// Time inside [lo, hi) blocked in those calls on the thread, and the GPU idle part of it.
fn blocked_in(
    blocked: &BTreeMap<(i64, i64), Vec<(i64, i64)>>,
    gaps: &[(i64, i64)],
    pid: i64,
    tid: i64,
    lo: i64,
    hi: i64,
) -> (i64, i64) {
    let Some(v) = blocked.get(&(pid, tid)) else {
        return (0, 0);
    };
    let from = v.partition_point(|r| r.1 <= lo);
    v[from..]
        .iter()
        .take_while(|r| r.0 < hi)
        .map(|&(a, b)| (a.max(lo), b.min(hi)))
        .filter(|(a, b)| b > a)
        .fold((0, 0), |acc, (a, b)| {
            (acc.0 + (b - a), acc.1 + idle_overlap(gaps, a, b))
        })
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 3 ms: `aten::index` spends `host_us` on the host before launching one
    /// 10 µs kernel, then a 1 ms GEMM.
    fn trace(host_us: f64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            let idx = b.op("aten::index", t0 + 10.0, host_us);
            b.kernel(
                "index_kernel",
                idx,
                t0 + host_us,
                t0 + host_us + 5.0,
                10.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            let mm = b.op("aten::mm", t0 + host_us + 20.0, 50.0);
            b.kernel(
                "gemm",
                mm,
                t0 + host_us + 30.0,
                t0 + host_us + 40.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_host_heavy_op() {
        let r = trace(900.0).report();
        let f = finding(&r, "C001");
        // 900 µs on the host, less 50 µs for its one launch: 850 µs, all while idle.
        assert!((f.saving_ms - 0.85).abs() < 0.01, "saving {}", f.saving_ms);
        assert_eq!(f.locations[0].op.as_deref(), Some("aten::index"));
    }

    #[test]
    fn silent_on_eager_dispatch_cost() {
        // 60 µs for one kernel is ordinary eager overhead (6:1 is not even heavy).
        assert!(!codes(&trace(60.0).report()).contains(&"C001"));
    }
}
