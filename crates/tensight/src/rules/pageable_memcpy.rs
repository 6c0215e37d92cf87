//! D001 pageable-memcpy: host↔device copies from or to pageable (not pinned) host
//! memory, which block the host for the whole transfer.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Rule, RuleMeta, Status,
};
use crate::analysis::host_work::{blocked_window, not_computing, Steady, SyncsByTime};
use crate::analysis::median;
use crate::analysis::simulate::Change;
use crate::model::{CopyDir, GpuKind, MemKind, Profile};
use std::collections::BTreeMap;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "D001",
    name: "pageable-memcpy",
    category: Category::DataPipeline,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Host-to-device and device-to-host copies inside the steps whose host side is pageable
memory: Kineto labels them `Memcpy HtoD (Pageable -> Device)` or
`Memcpy DtoH (Device -> Pageable)`. Each is attributed to the op that issued it
(`aten::to`, `aten::copy_`, ...) and, with stacks, the source line.

## Why it costs time
The GPU's copy engine can only read page-locked memory. From pageable memory the driver
copies through a small pinned staging buffer, chunk by chunk, and `cudaMemcpyAsync`
returns only when the data is out of the user's buffer: the call blocks the host for
the whole transfer (and PyTorch adds a `cudaStreamSynchronize` when `non_blocking` is
false), and the transfer runs at a fraction of the PCIe/NVLink rate. From pinned memory
with `non_blocking=True` the call only enqueues the copy (~10 µs) and the host goes on
launching work while the DMA engine moves the data.

## Example
`aten::to` → `aten::copy_` → `cudaMemcpyAsync` 504 µs + `cudaStreamSynchronize` 20 µs,
with `Memcpy HtoD (Pageable -> Device)` of 3 MiB taking 336 µs on the GPU. Pinned, the
same call takes 14 µs and the copy 60 µs.

## Fix
```python
# before
loader = DataLoader(ds, batch_size=256)
for x, y in loader:
    x, y = x.cuda(), y.cuda()
# after: pinned batches, asynchronous copies
loader = DataLoader(ds, batch_size=256, pin_memory=True)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
# tensors made in the loop: pin once, reuse
buf = torch.empty(shape, pin_memory=True)
buf.copy_(x_cpu); x = buf.to("cuda", non_blocking=True)
# device-to-host: copy into a pinned buffer, synchronise only when the value is read
out = torch.empty(shape, pin_memory=True); out.copy_(y, non_blocking=True)
```

## Thresholds
Every pageable HtoD/DtoH copy inside a step counts. The saving is the step replayed
(`analysis::simulate`) with each copy queued instead of blocking: the host time blocked
in its memcpy call and in a blocking sync that follows it within 50 µs is gone, but for
what a pinned `non_blocking` copy blocks (the median memcpy-call time of pinned copies in
this trace, or 10 µs when there are none), and the copy itself at a pinned copy's
bandwidth: the median of this trace's pinned copies of 1 MiB or more, else 80% of the
PCIe x16 rate of the GPU's generation (Gen5 from compute capability 9, Gen4 from 8,
else Gen3; an assumption). While the GPU computes queued kernels the block cost
nothing, and the replay shows it. Reported
when the total is at least 20 µs per step.
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- CUDA C++ Best Practices Guide, "Pinned Memory" and "Asynchronous and Overlapping
  Transfers with Computation".
- PyTorch docs, "A guide on good usage of non_blocking and pin_memory() in PyTorch".
"#,
};

/// Host time a pinned, non-blocking copy blocks when the trace has none to measure (ns).
const PINNED_CALL_DEFAULT_NS: i64 = 10_000;
/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.02;
/// Most copy sites listed as locations.
const MAX_SITES: usize = 5;

/// One copy site: (top-level op, source line, direction).
#[derive(Default)]
struct Site {
    copies: u64,
    bytes: u64,
    gpu_ns: i64,
    blocked_ns: i64,
    saving_ns: i64,
    op: Option<u32>,
}

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let (pinned_ns, pinned_seen) = pinned_call_ns(p);
    let steady = Steady::of(p);
    let syncs = SyncsByTime::of(p);
    let mut sites: BTreeMap<(String, String, &'static str), Site> = BTreeMap::new();
    let mut change = Change::default();
    let (pinned_gbs, pinned_from) = crate::analysis::transfers::pinned_copy_gbs(p);
    for &gi in &ctx.metrics.timeline.gpu_in_steps {
        let Some(g) = p.gpu.get(gi as usize) else {
            continue;
        };
        let dir = match g.copy_dir() {
            Some(CopyDir::HtoD) => "HtoD",
            Some(CopyDir::DtoH) => "DtoH",
            _ => continue,
        };
        if !g.is_pageable_copy() || !steady.includes(p, g.ts_ns) {
            continue;
        }
        // A pinned copy moves the bytes at the link's rate.
        if let Some(bytes) = g.bytes {
            change
                .durations
                .insert(gi, (bytes as f64 / pinned_gbs).round() as i64);
        }
        let (blocked, saving) = match g.runtime.and_then(|r| blocked_window(p, r)) {
            Some((a, b)) => {
                // The fix: the copy is queued and the host goes on, blocked only as long
                // as a pinned copy's call; a sync right after it no longer waits.
                change.host_cuts.push(((a + pinned_ns).min(b), b));
                change.unsynced.extend(syncs.within(a, b));
                (
                    b - a,
                    (not_computing(p, gaps, a, b, &[gi]) - pinned_ns).max(0),
                )
            }
            None => (0, 0),
        };
        let top = g.op.map(|o| p.top_level_op(o));
        let name = top.map_or_else(
            || "(no op recorded)".to_string(),
            |o| p.ops[o as usize].name.to_string(),
        );
        let source =
            g.op.and_then(|o| p.user_frame(o))
                .map(|f| f.name.to_string())
                .unwrap_or_default();
        let s = sites.entry((name, source, dir)).or_default();
        s.copies += 1;
        s.bytes += g.bytes.unwrap_or(0);
        s.gpu_ns += g.dur_ns;
        s.blocked_ns += blocked;
        s.saving_ns += saving;
        s.op = s.op.or(top);
    }
    if sites.is_empty() {
        return Vec::new();
    }
    let n = steady.n;
    let ms = |ns: i64| ns as f64 / 1e6 / n;
    let total = |f: fn(&Site) -> i64| sites.values().map(f).sum::<i64>();
    let _ = total(|s| s.saving_ns);
    let saving_ms = ctx.replayed_ms(&change);
    if saving_ms < MIN_SAVING_MS {
        return Vec::new();
    }
    let copies: u64 = sites.values().map(|s| s.copies).sum();
    let bytes: u64 = sites.values().map(|s| s.bytes).sum();
    let blocked_ms = ms(total(|s| s.blocked_ns));
    let gpu_ms = ms(total(|s| s.gpu_ns));
    let by_dir = |d: &str| -> (u64, u64) {
        sites
            .iter()
            .filter(|(k, _)| k.2 == d)
            .fold((0, 0), |a, (_, s)| (a.0 + s.copies, a.1 + s.bytes))
    };
    let (h_n, h_b) = by_dir("HtoD");
    let (d_n, d_b) = by_dir("DtoH");
    let mut ranked: Vec<(&(String, String, &'static str), &Site)> = sites.iter().collect();
    ranked.sort_by(|a, b| b.1.saving_ns.cmp(&a.1.saving_ns).then_with(|| a.0.cmp(b.0)));
    let top = ranked[0];
    let locations = ranked
        .iter()
        .take(MAX_SITES)
        .map(|((name, source, dir), s)| {
            let mut l = s.op.map(|o| op_location(p, o)).unwrap_or_default();
            if l.op.is_none() {
                l.op = Some(name.clone());
            }
            if l.source.is_none() && !source.is_empty() {
                l.source = Some(source.clone());
            }
            l.kernel = Some(format!("Memcpy {dir} (pageable)"));
            l.tensor = Some(format!(
                "{:.1} copies/step, {} each",
                s.copies as f64 / n,
                fmt_bytes(s.bytes as f64 / s.copies.max(1) as f64)
            ));
            l
        })
        .collect();
    let at = if top.0 .1.is_empty() {
        String::new()
    } else {
        format!(" at {}", top.0 .1)
    };
    let d = Draft {
        change: Some(change),
        title: "Host↔device copies use pageable memory and block the host".into(),
        message: format!(
            "{:.1} copies per step ({} per step) go through pageable host memory and block the host {} per step in the memcpy call and the sync after it; the largest is `{}`{at}",
            copies as f64 / n,
            fmt_bytes(bytes as f64 / n),
            fmt_ms(blocked_ms),
            top.0 .0,
        ),
        saving_ms,
        estimate: format!(
            "the step replayed with these copies pinned and queued instead of blocking the host: each copy at {:.0} GB/s ({pinned_from}), its memcpy call and the sync right after it cut to the {} a pinned non_blocking copy still blocks ({}), averaged over steps{}",
            pinned_gbs,
            fmt_ms(pinned_ns as f64 / 1e6),
            if pinned_seen > 0 {
                format!("median of {pinned_seen} pinned memcpy calls in this trace")
            } else {
                "default: no pinned copy in this trace to measure".into()
            },
            steady.note
        ),
        evidence: vec![
            ev("pageable HtoD per step", format!("{:.1} ({})", h_n as f64 / n, fmt_bytes(h_b as f64 / n))),
            ev("pageable DtoH per step", format!("{:.1} ({})", d_n as f64 / n, fmt_bytes(d_b as f64 / n))),
            ev("host blocked per step (memcpy call + sync)", fmt_ms(blocked_ms)),
            ev("GPU time of these copies per step", fmt_ms(gpu_ms)),
            ev(
                "achieved copy bandwidth",
                format!("{:.1} GB/s", if gpu_ms > 0.0 { bytes as f64 / n / (gpu_ms * 1e6) } else { 0.0 }),
            ),
            ev("pinned memcpy call time", fmt_ms(pinned_ns as f64 / 1e6)),
        ],
        explanation: format!(
            "From pageable memory the driver stages the data through a pinned bounce buffer and the call returns only when the transfer is done, so the host cannot launch anything for {} per step. A pinned, non_blocking copy is only enqueued (~{}) and runs on the copy engine while the host goes on.",
            fmt_ms(blocked_ms),
            fmt_ms(pinned_ns as f64 / 1e6),
        ),
        fixes: vec![
            "Pin host batches: `DataLoader(..., pin_memory=True)`, and copy with `x.cuda(non_blocking=True)`".into(),
            "For tensors built in the loop, copy into a pinned buffer allocated once (`torch.empty(shape, pin_memory=True)`), then `.to('cuda', non_blocking=True)`; or create them on the GPU (see C003)".into(),
            "For device-to-host reads, copy into a pinned buffer with `non_blocking=True` and synchronise only when the value is needed".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// Median host time of memcpy calls whose copy is from or to pinned memory.
fn pinned_call_ns(p: &Profile) -> (i64, usize) {
    let mut v: Vec<i64> = p
        .gpu
        .iter()
        .filter(|g| {
            matches!(g.kind, GpuKind::Memcpy { dir: CopyDir::HtoD | CopyDir::DtoH, src, dst }
                if src == MemKind::Pinned || dst == MemKind::Pinned)
        })
        .filter_map(|g| g.runtime.and_then(|r| p.runtime.get(r as usize)))
        .map(|r| r.dur_ns)
        .collect();
    if v.is_empty() {
        return (PINNED_CALL_DEFAULT_NS, 0);
    }
    let n = v.len();
    (median(&mut v), n)
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 3 ms: `.cuda()` of a 3 MiB batch (memcpy call 500 µs, sync 20 µs, the
    /// copy itself 330 µs on the GPU), then a 1 ms kernel. `pinned` makes it a 14 µs
    /// call with no sync.
    fn trace(pinned: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 3_000.0 * s as f64;
            b.step(s + 1, t0, 3_000.0);
            let to = b.op("aten::to", t0 + 10.0, 600.0);
            if pinned {
                b.memcpy(
                    "HtoD",
                    "Pinned",
                    "Device",
                    to,
                    t0 + 20.0,
                    14.0,
                    t0 + 40.0,
                    60.0,
                    3 << 20,
                );
            } else {
                b.memcpy(
                    "HtoD",
                    "Pageable",
                    "Device",
                    to,
                    t0 + 20.0,
                    500.0,
                    t0 + 180.0,
                    330.0,
                    3 << 20,
                );
                b.runtime("cudaStreamSynchronize", t0 + 530.0, 20.0, Some(to));
            }
            let mm = b.op("aten::mm", t0 + 700.0, 50.0);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                mm,
                t0 + 710.0,
                t0 + 720.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_pageable_copies() {
        let r = trace(false).report();
        let f = finding(&r, "D001");
        // Blocked 20..550 µs (530 µs) with only the copy itself on the GPU, minus the
        // 10 µs default pinned call (no pinned copy in this trace): 520 µs per step.
        assert!((f.saving_ms - 0.52).abs() < 0.01, "saving {}", f.saving_ms);
        assert_eq!(f.locations[0].op.as_deref(), Some("aten::to"));
    }

    #[test]
    fn silent_on_pinned_copies() {
        assert!(!codes(&trace(true).report()).contains(&"D001"));
    }
}
