//! D002 copy-compute-overlap: host↔device copies that run alone on the GPU while the
//! work queued behind them waits, instead of overlapping with compute.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::host_work::Steady;
use crate::analysis::simulate::{Change, Durations};
use crate::analysis::timeline::overlap;
use crate::model::{CopyDir, Profile};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "D002",
    name: "copy-compute-overlap",
    category: Category::DataPipeline,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Host-to-device and device-to-host memcpys inside the steps whose GPU time does not
overlap any kernel (kernels on the copy's own stream cannot overlap it; kernels on other
streams could) and that hold up work: the next activity on the same stream was already
waiting and started as soon as the copy ended. That is the signature of a batch copied
on the compute stream right before the kernels that use it.

## Why it costs time
The GPU has separate copy engines: a copy issued on a side stream from pinned memory
runs while the SMs compute. Issued on the compute stream, it runs alone and everything
queued behind it waits for it, so its whole duration adds to the step's GPU time. When
the step is GPU-bound, that time is the step's critical path.

## Example
Each step starts with `Memcpy HtoD (Pinned -> Device)` of 64 MiB taking 1.3 ms on stream
7, no kernel running anywhere meanwhile, and the first GEMM on stream 7 starting 1 µs
after the copy ends.

## Fix
```python
# before: the copy runs on the compute stream, in front of the compute
for x in batches:
    x = x.to("cuda", non_blocking=True)
    train_step(x)
# after: prefetch the next batch on a side stream while this one computes
side = torch.cuda.Stream()
def fetch(x):
    with torch.cuda.stream(side):
        return x.to("cuda", non_blocking=True)       # x must be pinned
nxt = fetch(next(it))
for _ in range(steps):
    torch.cuda.current_stream().wait_stream(side)
    x = nxt; x.record_stream(torch.cuda.current_stream())
    nxt = fetch(next(it))
    train_step(x)
```
Pinned memory is required (`DataLoader(pin_memory=True)`), or the copy cannot run
asynchronously at all (see D001).

## Thresholds
A copy counts when the next GPU activity on its stream was launched (its runtime call
returned) before the copy ended: that work waited for the copy. Its delay is from its
launch to its start, at most the copy's time not overlapped by any kernel (without the
launch link: the whole copy, if the next activity starts within 5 µs of its end). The
saving is the step replayed (`analysis::simulate`) with each such copy hidden on a side
stream: on its own stream only the part that overlapped kernels stays, so it is what the
step shortens where the GPU, not the host, set its pace. Reported when it is at least
50 µs and 1% of the step.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- CUDA C++ Best Practices Guide, "Asynchronous and Overlapping Transfers with
  Computation".
- PyTorch docs, "CUDA semantics: CUDA streams" and `Tensor.record_stream`.
"#,
};

/// Longest wait between a copy's end and the next activity on its stream that still
/// counts as "work was queued behind it" (ns).
const QUEUE_SLACK_NS: i64 = 5_000;
/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.05;
/// Smallest saving reported, % of the step.
const MIN_SHARE_PCT: f64 = 1.0;
/// How far ahead to look for the next activity on the same stream.
const LOOKAHEAD: usize = 512;

#[derive(Default)]
struct Site {
    copies: u64,
    bytes: u64,
    exposed_ns: i64,
    op: Option<u32>,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let kernels = kernel_busy(p);
    let steady = Steady::of(p);
    let mut per_step_exposed = vec![0i64; p.steps.len()];
    let mut hidden: Durations = Durations::default();
    let mut copy_total_ns = 0i64;
    let mut sites: BTreeMap<(String, &'static str), Site> = BTreeMap::new();
    let mut gi_iter = ctx.metrics.timeline.gpu_in_steps.iter().peekable();
    for (si, s) in p.steps.iter().enumerate() {
        while let Some(&&gi) = gi_iter.peek() {
            let Some(g) = p.gpu.get(gi as usize) else {
                gi_iter.next();
                continue;
            };
            if g.ts_ns >= s.end_ns {
                break;
            }
            gi_iter.next();
            if si < steady.first {
                continue;
            }
            let dir = match g.copy_dir() {
                Some(CopyDir::HtoD) => "HtoD",
                Some(CopyDir::DtoH) => "DtoH",
                _ => continue,
            };
            copy_total_ns += g.dur_ns;
            let Some(delay) = delay_behind(p, gi as usize) else {
                continue;
            };
            let busy = kernels
                .get(&g.device)
                .map_or(0, |k| overlap(k, g.ts_ns, g.end_ns()));
            let exposed = (g.dur_ns - busy).max(0).min(delay);
            per_step_exposed[si] += exposed;
            // The fix: the copy runs ahead on a side stream, hidden behind compute; on
            // the copy's own stream only the part that overlapped kernels stays.
            if si >= steady.first {
                hidden.insert(gi, g.dur_ns - exposed);
            }
            let name =
                g.op.map(|o| p.ops[p.top_level_op(o) as usize].name.to_string())
                    .unwrap_or_else(|| "(no op recorded)".into());
            let site = sites.entry((name, dir)).or_default();
            site.copies += 1;
            site.bytes += g.bytes.unwrap_or(0);
            site.exposed_ns += exposed;
            site.op = site.op.or(g.op.map(|o| p.top_level_op(o)));
        }
    }
    // A prefetched copy hides behind compute: at most the step's kernel time.
    let saving_ns: i64 = per_step_exposed
        .iter()
        .zip(&ctx.metrics.timeline.steps)
        .skip(steady.first)
        .map(|(&e, s)| e.min(s.kernel_ns))
        .sum();
    let n = steady.n;
    let _ = saving_ns;
    let change = Change::durations(hidden);
    let saving_ms = ctx.replayed_ms(&change);
    if sites.is_empty()
        || saving_ms < MIN_SAVING_MS
        || saving_ms < MIN_SHARE_PCT / 100.0 * ctx.step_ms()
    {
        return Vec::new();
    }
    let exposed_ms = per_step_exposed.iter().skip(steady.first).sum::<i64>() as f64 / 1e6 / n;
    let copies: u64 = sites.values().map(|s| s.copies).sum();
    let bytes: u64 = sites.values().map(|s| s.bytes).sum();
    let busy_ms = ctx.metrics.summary.gpu_busy_ms_per_step;
    let mut ranked: Vec<_> = sites.iter().collect();
    ranked.sort_by(|a, b| {
        b.1.exposed_ns
            .cmp(&a.1.exposed_ns)
            .then_with(|| a.0.cmp(b.0))
    });
    let locations = ranked
        .iter()
        .take(5)
        .map(|((name, dir), s)| {
            let mut l = s.op.map(|o| op_location(p, o)).unwrap_or_default();
            if l.op.is_none() {
                l.op = Some(name.clone());
            }
            l.kernel = Some(format!("Memcpy {dir}"));
            l.tensor = Some(format!(
                "{} per copy, {} exposed per step",
                fmt_bytes(s.bytes as f64 / s.copies.max(1) as f64),
                fmt_ms(s.exposed_ns as f64 / 1e6 / n)
            ));
            l
        })
        .collect();
    let d = Draft {
        change: Some(change),
        title: "Host↔device copies do not overlap with compute".into(),
        message: format!(
            "{:.1} copies per step ({} per step) run alone on the GPU for {} per step while the work queued behind them waits ({:.0}% of GPU busy time)",
            copies as f64 / n,
            fmt_bytes(bytes as f64 / n),
            fmt_ms(exposed_ms),
            if busy_ms > 0.0 { 100.0 * exposed_ms / busy_ms } else { 0.0 },
        ),
        saving_ms,
        estimate: format!("the step replayed with each copy that held up work queued behind it on its stream prefetched on a side stream: its time not overlapped by kernels (at most the wait of the work behind it) hidden behind compute; averaged over steps{}", steady.note),
        evidence: vec![
            ev("exposed copy time per step", fmt_ms(exposed_ms)),
            ev("all HtoD/DtoH copy time per step", fmt_ms(copy_total_ns as f64 / 1e6 / n)),
            ev("copies holding up work per step", format!("{:.1}", copies as f64 / n)),
            ev("GPU busy per step", fmt_ms(busy_ms)),
        ],
        explanation: format!(
            "These copies run on the compute stream, so the kernels behind them wait: {} per step of GPU time does nothing but copy. On a side stream from pinned memory, the next batch's copy runs on the copy engine while this batch computes.",
            fmt_ms(exposed_ms)
        ),
        fixes: vec![
            "Prefetch the next batch on a side stream (`torch.cuda.Stream()`), then `current_stream().wait_stream(side)` and `x.record_stream(...)` before use".into(),
            "Copies must come from pinned memory (`DataLoader(pin_memory=True)`) with `non_blocking=True`".into(),
            "Or keep the data on the GPU across steps if it fits".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// Merged kernel intervals per device, sorted.
fn kernel_busy(p: &Profile) -> BTreeMap<i64, Vec<(i64, i64)>> {
    let mut out: BTreeMap<i64, Vec<(i64, i64)>> = BTreeMap::new();
    for g in p.gpu.iter().filter(|g| g.is_kernel()) {
        let v = out.entry(g.device).or_default();
        let (a, b) = (g.ts_ns, g.end_ns());
        match v.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => v.push((a, b)),
        }
    }
    out
}

/// How long the copy held up the next activity on its stream, ns: that activity was
/// launched (its runtime call returned) before the copy ended and started right after
/// it, so without the copy it would have started when it was launched. `None` when
/// nothing was waiting behind the copy.
fn delay_behind(p: &Profile, gi: usize) -> Option<i64> {
    let g = p.gpu.get(gi)?;
    let next = p
        .gpu
        .iter()
        .skip(gi + 1)
        .take(LOOKAHEAD)
        .find(|n| n.device == g.device && n.stream == g.stream && n.ts_ns >= g.ts_ns)?;
    let launched = next
        .runtime
        .and_then(|r| p.runtime.get(r as usize))
        .map(|r| r.end_ns());
    match launched {
        Some(l) if l < g.end_ns() => Some(next.ts_ns - l.max(g.ts_ns)),
        Some(_) => None,
        None if next.ts_ns - g.end_ns() <= QUEUE_SLACK_NS => Some(g.dur_ns),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Three steps: a 1 ms pinned HtoD copy on the compute stream and a 4 ms kernel.
    /// `serial`: the host queues each step in 100 µs and the kernel waits behind the copy
    /// (GPU-bound: 5 ms a step). Otherwise steps of 6 ms whose kernel the host launches
    /// well after the copy has finished (the GPU idle, not waiting on the copy).
    fn trace(serial: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = if serial { 100.0 } else { 6_000.0 } * s as f64;
            let g0 = if serial { 5_001.0 * s as f64 } else { t0 };
            b.step(s + 1, t0, if serial { 100.0 } else { 6_000.0 });
            let to = b.op("aten::to", t0 + 10.0, 30.0);
            b.memcpy(
                "HtoD",
                "Pinned",
                "Device",
                to,
                t0 + 15.0,
                10.0,
                g0 + 30.0,
                1_000.0,
                64 << 20,
            );
            // Serial: launched at once, runs when the copy ends. Otherwise the host
            // launches it later (the GPU was idle, not waiting on the copy).
            let (op_ts, k0) = if serial {
                (t0 + 50.0, g0 + 1_031.0)
            } else {
                (t0 + 1_450.0, t0 + 1_500.0)
            };
            let mm = b.op("aten::mm", op_ts, 30.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                op_ts + 5.0,
                k0,
                4_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_when_compute_waits_for_the_copy() {
        let r = trace(true).report();
        let f = finding(&r, "D002");
        // GPU-bound: each GEMM waits for its step's 1 ms copy. Hidden behind compute on
        // a side stream, the copies leave the GEMMs back to back: the three steps end
        // 3 ms earlier, 1 ms a step.
        assert!((f.saving_ms - 1.0).abs() < 0.02, "saving {}", f.saving_ms);
    }

    #[test]
    fn silent_when_nothing_waits() {
        assert!(!codes(&trace(false).report()).contains(&"D002"));
    }
}
