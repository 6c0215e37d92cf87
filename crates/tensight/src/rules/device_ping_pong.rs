//! C002 device-ping-pong: data moved between host and device back and forth inside a
//! step (GPU → CPU → GPU), or a great many transfers per step.

use super::{
    ev, fmt_bytes, fmt_ms, op_location, Category, Context, Draft, Finding, Location, Rule,
    RuleMeta, Status,
};
use crate::analysis::host_work::{blocked_window, not_computing, Steady, SyncsByTime};
use crate::analysis::simulate::Change;
use crate::analysis::transfers::{round_trips, step_copies, RoundTrip, SCALAR_BYTES};
use crate::analysis::TransferStats;
use crate::model::Profile;

/// Registration.
pub const RULE: Rule = Rule { meta: &META, check };

static META: RuleMeta = RuleMeta {
    code: "C002",
    name: "device-ping-pong",
    category: Category::CpuResidency,
    status: Status::Preview,
    since: "0.1.0",
    needs_gpu: true,
    doc: r#"## What it detects
Host↔device transfers per step, both directions (`.cuda()`, `.to(device)`, `.cpu()`,
`.numpy()`, `.tolist()`), and two patterns among them:
- round trips: a device-to-host copy followed, in the same step, by a host-to-device
  copy of the same number of bytes: the data went to the CPU, was worked on there, and
  came back;
- many transfers: 16 or more copies per step, where one batched copy (or keeping the
  tensors on the GPU) would do.
Scalar reads of 64 bytes or less (`.item()`) are left to S001.

## Why it costs time
A device-to-host copy waits for every queued kernel (the host blocks and the GPU
drains), the CPU then works while the GPU has nothing queued, and the copy back blocks
the host again (from pageable memory, for the whole transfer). The GPU idles for the
whole round trip. Each separate transfer also pays a fixed cost (a memcpy call, often a
sync) that one larger copy would pay once.

## Example
`aten::to` (`.cpu()`) → `Memcpy DtoH (Device -> Pageable)` of 16 MiB, then 9 ms of host
time (NumPy), then `aten::to` (`.cuda()`) → `Memcpy HtoD (Pageable -> Device)` of the
same 16 MiB; no kernel runs in between.

## Fix
```python
# before: round trip through NumPy
a = h.cpu().numpy()
a = np.clip(a, -1, 1) * 0.5
h = torch.from_numpy(a).cuda()
# after: the same on the GPU
h = torch.clamp(h, -1, 1) * 0.5
# many small transfers: move once, as one tensor, before the loop
consts = torch.stack(list_of_small_tensors).cuda()
```

## Thresholds
Reported for round trips (any, when the estimate is at least 20 µs per step) and for
16 or more transfers per step. The saving is the step replayed (`analysis::simulate`)
without each round trip: its host time from the start of the device-to-host memcpy call
to the end of the host-to-device copy (its call, the sync after it, or the copy itself,
whichever ends last), the two copies and the syncs inside it. For many transfers, every
copy's memcpy call, following sync and transfer go too, but the most expensive copy of
each step (one batched transfer would remain). The GPU kernels that would replace CPU
work inside a round trip are not added (usually a few µs).
Per-step figures leave out a first step slower than twice the others' median (warm-up)
and, when the trace has no step markers, everything before the first GPU activity
(setup).

## References
- PyTorch performance tuning guide: "Avoid unnecessary CPU-GPU synchronization".
- PyTorch docs, "CUDA semantics: Asynchronous execution".
"#,
};

/// Transfers per step from which "many transfers" applies.
const MANY_PER_STEP: f64 = 16.0;
/// Smallest saving reported, ms per step.
const MIN_SAVING_MS: f64 = 0.02;

fn check(ctx: &Context) -> Vec<Finding> {
    let p = ctx.profile;
    let gaps = &ctx.metrics.timeline.idle_gaps;
    let steady = Steady::of(p);
    let n = steady.n;
    let (mut h2d, mut d2h) = (TransferStats::default(), TransferStats::default());
    for s in ctx.metrics.timeline.steps.iter().skip(steady.first) {
        h2d.count += s.h2d.count;
        h2d.bytes += s.h2d.bytes;
        d2h.count += s.d2h.count;
        d2h.bytes += s.d2h.bytes;
    }
    let transfers_per_step = (h2d.count + d2h.count) as f64 / n;
    let trips: Vec<RoundTrip> = round_trips(p, &ctx.metrics.timeline)
        .into_iter()
        .filter(|t| steady.includes(p, t.window.0))
        .collect();
    let trip_ns: i64 = trips
        .iter()
        .map(|t| not_computing(p, gaps, t.window.0, t.window.1, &[t.d2h, t.h2d]))
        .sum();
    // The fix: the round trip's host work runs on the GPU (no copies, no waits), and
    // many small transfers become one per step.
    let mut change = Change::default();
    let syncs = SyncsByTime::of(p);
    let drop_copy = |change: &mut Change, gi: u32, window: Option<(i64, i64)>| {
        change.durations.insert(gi, 0);
        if let Some((a, b)) = window {
            change.host_cuts.push((a, b));
            change.unsynced.extend(syncs.within(a, b));
        }
    };
    for t in &trips {
        drop_copy(&mut change, t.d2h, Some(t.window));
        change.durations.insert(t.h2d, 0);
    }
    // Many transfers: every other non-scalar copy's cost, minus the dearest per step.
    let mut many_ns = 0i64;
    let mut many_copies = 0u64;
    if transfers_per_step >= MANY_PER_STEP {
        let in_trip: std::collections::HashSet<u32> =
            trips.iter().flat_map(|t| [t.d2h, t.h2d]).collect();
        for s in p.steps.iter().skip(steady.first) {
            let copies: Vec<u32> = step_copies(p, &ctx.metrics.timeline, s.start_ns, s.end_ns)
                .into_iter()
                .filter(|gi| !in_trip.contains(gi))
                .filter(|&gi| p.gpu[gi as usize].bytes.is_none_or(|b| b > SCALAR_BYTES))
                .collect();
            let costs: Vec<i64> = copies.iter().map(|&gi| copy_cost(p, gaps, gi)).collect();
            many_copies += costs.len() as u64;
            many_ns += costs.iter().sum::<i64>() - costs.iter().max().copied().unwrap_or(0);
            let dearest = costs.iter().enumerate().max_by_key(|c| c.1).map(|c| c.0);
            for (k, &gi) in copies.iter().enumerate() {
                if Some(k) != dearest {
                    let window = p.gpu[gi as usize]
                        .runtime
                        .and_then(|r| blocked_window(p, r));
                    drop_copy(&mut change, gi, window);
                }
            }
        }
    }
    let trip_ms = trip_ns as f64 / 1e6 / n;
    let many_ms = many_ns as f64 / 1e6 / n;
    let saving_ms = ctx.replayed_ms(&change);
    if saving_ms < MIN_SAVING_MS || (trips.is_empty() && transfers_per_step < MANY_PER_STEP) {
        return Vec::new();
    }
    let mut locations: Vec<Location> = Vec::new();
    let mut push_loc = |gi: u32, what: &str| {
        let g = &p.gpu[gi as usize];
        let mut l =
            g.op.map(|o| op_location(p, p.top_level_op(o)))
                .unwrap_or_default();
        if let (Some(o), None) = (g.op, &l.source) {
            l.source = p.user_frame(o).map(|f| f.name.to_string());
        }
        l.kernel = Some(g.name.to_string());
        l.tensor = Some(format!(
            "{what}, {}",
            fmt_bytes(g.bytes.unwrap_or(0) as f64)
        ));
        if !locations.contains(&l) && locations.len() < 6 {
            locations.push(l);
        }
    };
    for t in &trips {
        push_loc(t.d2h, "to the CPU");
        push_loc(t.h2d, "back to the GPU");
    }
    let trip_bytes: u64 = trips
        .iter()
        .map(|t| p.gpu[t.d2h as usize].bytes.unwrap_or(0))
        .sum();
    let (title, message) = if !trips.is_empty() {
        (
            "Data goes GPU → CPU → GPU inside the step".to_string(),
            format!(
                "{:.1} round trips per step move {} to the CPU and the same bytes back; the GPU computes nothing for {} per step during them ({:.1} HtoD and {:.1} DtoH transfers per step in all)",
                trips.len() as f64 / n,
                fmt_bytes(trip_bytes as f64 / n),
                fmt_ms(trip_ms),
                h2d.count as f64 / n,
                d2h.count as f64 / n,
            ),
        )
    } else {
        (
            format!("{transfers_per_step:.0} host↔device transfers per step"),
            format!(
                "Each step makes {:.1} HtoD and {:.1} DtoH transfers; their memcpy calls and syncs keep the GPU from computing for {} per step",
                h2d.count as f64 / n,
                d2h.count as f64 / n,
                fmt_ms(many_ms),
            ),
        )
    };
    let d = Draft {
        change: Some(change),
        title,
        message,
        saving_ms,
        estimate: format!("the step replayed without each round trip (its host time from the DtoH memcpy call to the end of the HtoD copy, both copies and the syncs in it: the work runs on the GPU) and, for many transfers, without every copy's memcpy call, sync and transfer but the dearest of each step (one batched transfer remains); averaged over steps{}. It includes what D001 reports for the same copies if they are pageable (the marginal savings do not count it twice)", steady.note),
        evidence: vec![
            ev("HtoD per step", format!("{:.1} ({})", h2d.count as f64 / n, fmt_bytes(h2d.bytes as f64 / n))),
            ev("DtoH per step", format!("{:.1} ({})", d2h.count as f64 / n, fmt_bytes(d2h.bytes as f64 / n))),
            ev("round trips per step", format!("{:.1}", trips.len() as f64 / n)),
            ev("GPU not computing during round trips per step", fmt_ms(trip_ms)),
            ev("other non-scalar transfers per step", format!("{:.1}", many_copies as f64 / n)),
        ],
        explanation: if !trips.is_empty() {
            "The copy to the host waits for the GPU to drain, the host then works on the data while nothing is queued, and the copy back blocks the host again: the GPU idles for the whole round trip. Done on the GPU, the same work is a few asynchronous kernels.".into()
        } else {
            "Every transfer pays a memcpy call and often a sync; many of them per step keep the host busy and the GPU starved. One batched transfer, or tensors that stay on the GPU, pay that once.".into()
        },
        fixes: vec![
            "Do the CPU-side work on the GPU with torch ops (`torch.clamp`, `torch.where`, indexing) instead of `.cpu()`/`.numpy()` and back".into(),
            "Move constant tensors to the GPU once, before the loop; batch many small transfers into one (`torch.cat`/`torch.stack`, then one `.cuda()`)".into(),
            "Avoid `.item()`, `.tolist()`, `.numpy()` inside the step; log every N steps".into(),
        ],
        locations,
    };
    vec![d.finish(&META, ctx)]
}

/// Time a single copy keeps the GPU from computing: its memcpy call and the sync after.
fn copy_cost(p: &Profile, gaps: &[(i64, i64)], gi: u32) -> i64 {
    let Some(g) = p.gpu.get(gi as usize) else {
        return 0;
    };
    match g.runtime.and_then(|r| blocked_window(p, r)) {
        Some((a, b)) => not_computing(p, gaps, a, b.max(g.end_ns()), &[gi]),
        None => g.dur_ns,
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::finding;
    use crate::testing::{codes, TraceBuilder};

    /// Steps of 10 ms: a 1 ms kernel, then (with `round_trip`) `.cpu()` of 16 MiB, 3 ms of
    /// host work, `.cuda()` of the same 16 MiB, then a 1 ms kernel.
    fn trace(round_trip: bool) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        for s in 0..3 {
            let t0 = 10_000.0 * s as f64;
            b.step(s + 1, t0, 10_000.0);
            let conv = b.op("aten::conv2d", t0 + 10.0, 50.0);
            b.kernel(
                "implicit_gemm",
                conv,
                t0 + 20.0,
                t0 + 30.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
            let mut t = t0 + 100.0;
            if round_trip {
                let cpu = b.op("aten::to", t, 2_000.0);
                // call waits for the conv (to 1030), copies 16 MiB over 1030..2030
                b.memcpy(
                    "DtoH",
                    "Device",
                    "Pageable",
                    cpu,
                    t + 10.0,
                    1_930.0,
                    t0 + 1_030.0,
                    1_000.0,
                    16 << 20,
                );
                b.op("aten::clamp", t0 + 2_200.0, 3_000.0);
                let gpu = b.op("aten::to", t0 + 5_300.0, 1_100.0);
                b.memcpy(
                    "HtoD",
                    "Pageable",
                    "Device",
                    gpu,
                    t0 + 5_310.0,
                    1_050.0,
                    t0 + 5_350.0,
                    1_000.0,
                    16 << 20,
                );
                t = t0 + 6_500.0;
            }
            let fc = b.op("aten::linear", t, 50.0);
            b.kernel(
                "gemm",
                fc,
                t + 10.0,
                t + 20.0,
                1_000.0,
                [64, 1, 1],
                [256, 1, 1],
            );
        }
        b
    }

    #[test]
    fn fires_on_round_trip() {
        let r = trace(true).report();
        let f = finding(&r, "C002");
        // Replayed without the window from the DtoH call (110 µs) to the HtoD call's end
        // (6360 µs): the clamp runs on the GPU, nothing is copied or waited for. The host
        // sets these 10 ms steps, so each ends those 6.25 ms earlier (the linear's kernel
        // still follows the conv's).
        assert!((f.saving_ms - 6.25).abs() < 0.01, "saving {}", f.saving_ms);
        assert!(f.title.contains("GPU → CPU → GPU"), "{}", f.title);
    }

    #[test]
    fn silent_without_transfers() {
        assert!(!codes(&trace(false).report()).contains(&"C002"));
    }
}
