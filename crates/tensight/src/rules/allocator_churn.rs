//! A002 allocator-churn: `cudaMalloc`, `cudaFree` and `cudaHostAlloc` calls inside the
//! steps, which a warmed-up caching allocator should make rare.

use super::{
    ev, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule, RuleMeta, Status,
};
use crate::analysis::host_work::{
    frames_at, idle_overlap, idle_until, step_of, user_frame_at, Steady,
};
use crate::analysis::simulate::Change;
use crate::model::RuntimeKind;
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "A002",
    name: "allocator-churn",
    category: Category::Allocator,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Device and pinned-host allocation calls made inside the steps: `cudaMalloc`,
`cudaMallocAsync`, `cuMemAlloc`, `cudaHostAlloc`, `cudaFree`, `cudaFreeHost` (and the
HIP equivalents). The first analysed step is left out when there are several: that is
where a caching allocator legitimately warms up. Allocation events per step from
`profile_memory=True` are reported alongside, and calls made under
`torch.cuda.empty_cache()` are named as such.

## Why it costs time
PyTorch's caching allocator keeps freed blocks and hands them out again, so after the
first iteration a training loop should not reach the driver at all. `cudaMalloc` costs
tens of µs to milliseconds; `cudaFree` synchronizes the whole device, draining the
queue, so the GPU idles until the host launches again. Calls inside the steps mean the
cache is emptied (`torch.cuda.empty_cache()`), is too small for changing shapes (blocks
of new sizes every step), or is near capacity and freeing to retry (see A001); pinned
host memory allocated every step (`tensor.pin_memory()` on fresh tensors) adds
`cudaHostAlloc`, which is slower still.

## Example
Every step after the first shows 10 `cudaMalloc` calls inside forward ops and, at the
end of the step, `torch/cuda/memory.py(...): empty_cache` with 10 `cudaFree` calls of
30–60 µs each, after which the GPU idles until the next step's first kernel.

## Fix
```python
# before
for x, y in loader:
    loss = step(x, y)
    torch.cuda.empty_cache()          # gives the cache back every step
# after: let the caching allocator keep its blocks
for x, y in loader:
    loss = step(x, y)
# variable shapes: pad or bucket to a few sizes, or let segments grow in place
#   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
# pinned buffers: allocate once, reuse
buf = torch.empty(shape, pin_memory=True)
```

## Thresholds
Reported when the analysed steps make at least 0.5 allocator calls per step and the
estimate is at least 20 µs per step. The saving is the step replayed
(`analysis::simulate`) without the calls (a free's implicit device sync with them: the
host no longer waits for the queue to drain, and the GPU no longer idles after it). When the trace has no step markers,
calls before the first GPU activity (setup) are left out.

## References
- PyTorch docs, "CUDA semantics: Memory management", "Optimizing memory usage with
  PYTORCH_CUDA_ALLOC_CONF".
- CUDA Runtime API, `cudaFree` ("performs an implicit device synchronization").
"#,
};

/// Smallest call rate reported, calls per analysed step.
const MIN_CALLS_PER_STEP: f64 = 0.5;
/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.02;
/// Longest GPU idle after a free that is put down to it (ns): beyond, the host is
/// doing other work.
const MAX_IDLE_AFTER_FREE_NS: i64 = 1_000_000;
/// Most call sites listed as locations.
const MAX_SITES: usize = 5;

#[derive(Default)]
struct Site {
    mallocs: u64,
    frees: u64,
    host_ns: i64,
    op: Option<u32>,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let nsteps = p.steps.len();
    let steady = Steady::of(p);
    // Leave out the warm-up step when there are several.
    let skip = usize::from(nsteps >= 2);
    let analysed = (nsteps - skip.min(nsteps)).max(1) as f64;
    let mut intervals: Vec<(i64, i64)> = Vec::new();
    let mut calls_at: Vec<(i64, i64)> = Vec::new();
    let mut sites: BTreeMap<(String, String), Site> = BTreeMap::new();
    let (mut mallocs, mut frees, mut host_allocs, mut under_empty_cache) = (0u64, 0u64, 0u64, 0u64);
    let mut host_ns = 0i64;
    for r in &p.runtime {
        if !matches!(r.kind, RuntimeKind::Malloc | RuntimeKind::Free) {
            continue;
        }
        match step_of(&p.steps, r.ts_ns) {
            Some(i) if i >= skip && r.ts_ns >= steady.from_ns => {}
            _ => continue,
        }
        let frame = user_frame_at(p, r.pid, r.tid, r.ts_ns);
        let in_empty_cache = frames_at(p, r.pid, r.tid, r.ts_ns)
            .any(|f| p.python_frames[f as usize].name.contains("empty_cache"));
        under_empty_cache += in_empty_cache as u64;
        host_ns += r.dur_ns;
        calls_at.push((r.ts_ns, r.end_ns()));
        let is_free = r.kind == RuntimeKind::Free;
        if is_free {
            frees += 1;
            // The free drained the queue: the idle after it counts too, up to the point
            // where the host is plainly doing other work.
            let after = idle_until(gaps, r.end_ns()).min(r.end_ns() + MAX_IDLE_AFTER_FREE_NS);
            intervals.push((r.ts_ns, after));
        } else {
            mallocs += 1;
            host_allocs += r.name.contains("HostAlloc") as u64;
            intervals.push((r.ts_ns, r.end_ns()));
        }
        let top = r.op.map(|o| p.top_level_op(o));
        let what = if in_empty_cache {
            "torch.cuda.empty_cache()".to_string()
        } else {
            top.map_or_else(
                || r.name.to_string(),
                |o| p.ops[o as usize].name.to_string(),
            )
        };
        let source = frame
            .and_then(|f| p.python_frames.get(f as usize))
            .map(|f| f.name.to_string())
            .or_else(|| {
                top.and_then(|o| p.user_frame(o))
                    .map(|f| f.name.to_string())
            })
            .unwrap_or_default();
        let s = sites.entry((what, source)).or_default();
        if is_free {
            s.frees += 1;
        } else {
            s.mallocs += 1;
        }
        s.host_ns += r.dur_ns;
        s.op = s.op.or(top);
    }
    let calls = mallocs + frees;
    if (calls as f64) / analysed < MIN_CALLS_PER_STEP {
        return Vec::new();
    }
    intervals.sort();
    let mut merged: Vec<(i64, i64)> = Vec::new();
    for (a, b) in intervals {
        match merged.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    let idle_ms = merged
        .iter()
        .map(|&(a, b)| idle_overlap(gaps, a, b))
        .sum::<i64>() as f64
        / 1e6
        / analysed;
    // The fix: no device allocation or free in the step (the caching allocator keeps
    // its blocks): their calls, and the waits a free's implicit sync makes, are gone.
    let change = Change {
        host_cuts: calls_at,
        ..Default::default()
    };
    let saving_ms = ctx.replayed_ms(&change);
    if saving_ms < MIN_SAVING_MS {
        return Vec::new();
    }
    let alloc_events = p
        .memory
        .iter()
        .filter(|m| {
            m.is_gpu() && m.bytes > 0 && step_of(&p.steps, m.ts_ns).is_some_and(|i| i >= skip)
        })
        .count();
    let per = |x: u64| x as f64 / analysed;
    let mut ranked: Vec<(&(String, String), &Site)> = sites.iter().collect();
    ranked.sort_by(|a, b| b.1.host_ns.cmp(&a.1.host_ns).then_with(|| a.0.cmp(b.0)));
    let locations: Vec<Location> = ranked
        .iter()
        .take(MAX_SITES)
        .map(|((what, source), s)| {
            let mut l = s.op.map(|o| op_location(p, o)).unwrap_or_default();
            l.op = Some(what.clone());
            if !source.is_empty() {
                l.source = Some(source.clone());
            }
            l.kernel = Some(format!("{} malloc / {} free calls", s.mallocs, s.frees));
            l
        })
        .collect();
    let mut fixes = Vec::new();
    if under_empty_cache > 0 {
        fixes.push("Remove `torch.cuda.empty_cache()` from the loop: it hands the cache back to CUDA, so the next step allocates again".to_string());
    }
    if mallocs > host_allocs {
        fixes.push("Keep tensor shapes stable between steps (pad or bucket variable sizes) so cached blocks are reused; or `PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`".into());
    }
    if host_allocs > 0 {
        fixes.push("Allocate pinned host buffers once and reuse them instead of calling `.pin_memory()` on new tensors every step".into());
    }
    fixes.push("If memory is near capacity (A001), the allocator frees and retries: reduce memory use (autocast, checkpointing, smaller batch)".into());
    let d = Draft {
        change: Some(change),
        title: "The allocator calls cudaMalloc/cudaFree inside the steps".into(),
        message: format!(
            "{} {:.1} cudaMalloc and {:.1} cudaFree calls ({} on the host); the GPU idles {} per step during them and after the frees",
            if skip > 0 { "After the first step, each step makes" } else { "Each step makes" },
            per(mallocs),
            per(frees),
            fmt_ms(host_ns as f64 / 1e6 / analysed),
            fmt_ms(idle_ms),
        ),
        saving_ms,
        estimate: format!(
            "the step replayed without the allocator calls of the steps after the first (allocator warm-up), the waits a cudaFree's implicit device sync makes with them (the GPU idled {} per step around them); averaged over steps{}",
            fmt_ms(idle_ms),
            steady.note
        ),
        evidence: vec![
            ev("cudaMalloc-like calls per step", format!("{:.1}", per(mallocs))),
            ev("of which pinned host (cudaHostAlloc)", format!("{:.1}", per(host_allocs))),
            ev("cudaFree-like calls per step", format!("{:.1}", per(frees))),
            ev("under torch.cuda.empty_cache() per step", format!("{:.1}", per(under_empty_cache))),
            ev("host time in these calls per step", fmt_ms(host_ns as f64 / 1e6 / analysed)),
            ev("GPU idle around them per step", fmt_ms(idle_ms)),
            ev("GPU allocation events per step ([memory])", format!("{:.1}", alloc_events as f64 / analysed)),
        ],
        explanation: "A warmed-up caching allocator serves every allocation from its cache without calling the driver. Here the driver is called every step: cudaMalloc blocks the host while the GPU drains, and cudaFree synchronizes the device, so the GPU idles until the host launches again.".into(),
        fixes,
        locations,
    };
    vec![d.finish(&META, ctx)]
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 2 ms: a kernel, then (with `churn`) a 100 µs cudaMalloc inside an op and
    /// a 50 µs cudaFree at the end, after which the GPU idles until the next step.
    fn trace(churn: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..4 {
            let t0 = 2_000.0 * s as f64;
            b.step(s + 1, t0, 2_000.0);
            let mm = b.op("aten::mm", t0 + 10.0, 200.0);
            if churn {
                b.runtime("cudaMalloc", t0 + 20.0, 100.0, Some(mm));
            }
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + 150.0,
                t0 + 160.0,
                1_500.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            if churn {
                b.runtime("cudaFree", t0 + 1_600.0, 100.0, None);
            }
        }
        b
    }

    #[test]
    fn fires_on_malloc_and_free_every_step() {
        let r = trace(true).report();
        let f = finding(&r, "A002");
        // Replayed without the 100 µs malloc and the 100 µs free of steps 2-4: the host,
        // which sets these 2 ms steps (the kernel takes 1.5 ms), runs 200 µs sooner each;
        // the idle after a free is the host's own pace, not the free's: it stays.
        // 600 µs over the 4 steps.
        assert!((f.saving_ms - 0.15).abs() < 0.01, "saving {}", f.saving_ms);
    }

    #[test]
    fn silent_with_a_warm_cache() {
        assert!(!codes(&trace(false).report()).contains(&"A002"));
    }
}
