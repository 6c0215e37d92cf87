//! What-if replay: how much shorter the analysed steps would be if some GPU activities ran
//! faster. Shared by the rules whose fix makes kernels shorter (O001, T001, T002, T003,
//! G001). Not a rule.
//!
//! Inputs: the Profile and new durations for some GPU activities. Output: the wall time
//! saved over the analysed window, ns. The replay keeps the host's timeline as recorded
//! (every launch happens when it happened) except that a blocking sync returns as soon as
//! the GPU work it waited for is done, so the host runs earlier after it. Each activity
//! starts at the later of its launch (shifted by that host advance) and the end of the
//! activity before it on its stream, plus the delay it showed in the trace (launch
//! latency, cross-stream waits). The window ends at the later of the host's end and the
//! GPU's end.
//!
//! So a kernel made shorter saves wall time only where the GPU is the bottleneck: ahead
//! of a sync, at the window's end, or where queued work starts earlier behind it. In a
//! host-bound stretch (the GPU idles between launches) it saves nothing, which is what a
//! measurement after the fix shows. What it does not model: the host getting faster
//! (fewer launches after fusion: rules add that part themselves), a launch blocking on a
//! full queue, and other ranks (a collective's wait is kept as recorded).

use crate::model::{GpuActivity, Profile, RuntimeKind};
use std::collections::{BTreeMap, HashMap};

/// A wait longer than this that neither the launch nor the stream explains is taken as a
/// wait for another stream (ns).
const DEP_MIN_NS: i64 = 10_000;
/// Host/GPU clock tolerance (ns).
const SKEW_NS: i64 = 5_000;

/// Wall time saved over the analysed steps (ns, all steps together) if each GPU activity
/// in `new_dur` (index into `Profile::gpu` → new duration, ns) took that long.
pub(crate) fn saving_ns(p: &Profile, new_dur: &HashMap<u32, i64>) -> i64 {
    if new_dur.is_empty() {
        return 0;
    }
    let (Some(first), Some(last)) = (p.steps.first(), p.steps.last()) else {
        return 0;
    };
    let lo = p.gpu.partition_point(|g| g.ts_ns < first.start_ns);
    let hi = p.gpu.partition_point(|g| g.ts_ns < last.end_ns);
    if lo >= hi {
        return 0;
    }
    // The new durations as a dense table over the window (a hash lookup per activity
    // costs more than building it).
    let mut dense: Vec<Option<i64>> = vec![None; hi - lo];
    for (&gi, &d) in new_dur {
        if let Some(x) = (gi as usize).checked_sub(lo).and_then(|i| dense.get_mut(i)) {
            *x = Some(d);
        }
    }
    // Blocking syncs in the window, by start.
    let mut syncs: Vec<(i64, i64)> = p
        .runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Sync && r.dur_ns > 0)
        .filter(|r| r.ts_ns >= first.start_ns && r.ts_ns < last.end_ns)
        .map(|r| (r.ts_ns, r.end_ns()))
        .collect();
    syncs.sort_unstable();
    let mut next_sync = 0;

    // Host advance so far (ns earlier than recorded), and per-stream queue ends.
    let mut shift: i64 = 0;
    // Per stream: the last activity's (orig end, new end), and every activity's
    // (orig end → new end) for cross-stream waits.
    let mut streams: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    let mut ends: BTreeMap<(i64, i64), BTreeMap<i64, i64>> = BTreeMap::new();
    let (mut orig_end_all, mut new_end_all) = (i64::MIN, i64::MIN);
    for gi in lo..hi {
        let g = &p.gpu[gi];
        let launch = launch_ns(p, g);
        // Syncs that returned before this activity was launched waited for everything
        // processed so far (activities are processed in start order).
        while next_sync < syncs.len() && syncs[next_sync].1 <= launch {
            shift = after_sync(syncs[next_sync], shift, orig_end_all, new_end_all);
            next_sync += 1;
        }
        let key = (g.device, g.stream);
        let (prev_orig, prev_new) = streams.get(&key).copied().unwrap_or((i64::MIN, i64::MIN));
        let mut ready_orig = launch.max(prev_orig);
        let mut dep_new = i64::MIN;
        if g.ts_ns - ready_orig > DEP_MIN_NS {
            // An unexplained wait: the activity waited for another stream (an event). Take
            // the other stream of this device whose work ended last before it started.
            let dep = ends
                .iter()
                .filter(|(k, _)| k.0 == g.device && **k != key)
                .filter_map(|(k, m)| {
                    m.range(ready_orig..=g.ts_ns + SKEW_NS)
                        .next_back()
                        .map(|(&oe, &ne)| (oe, ne, *k))
                })
                .max_by_key(|&(oe, _, k)| (oe, std::cmp::Reverse(k)));
            if let Some((oe, ne, _)) = dep {
                ready_orig = ready_orig.max(oe);
                dep_new = ne;
            }
        }
        let delay = (g.ts_ns - ready_orig).max(0);
        let start = (launch - shift).max(prev_new).max(dep_new) + delay;
        let dur = dense[gi - lo].unwrap_or(g.dur_ns).clamp(0, g.dur_ns.max(0));
        let end = start + dur;
        streams.insert(key, (g.end_ns().max(prev_orig), end.max(prev_new)));
        let e = ends
            .entry(key)
            .or_default()
            .entry(g.end_ns())
            .or_insert(end);
        *e = (*e).max(end);
        orig_end_all = orig_end_all.max(g.end_ns());
        new_end_all = new_end_all.max(end);
    }
    let host_end = p
        .steps
        .iter()
        .map(|s| s.cpu_end_ns)
        .max()
        .unwrap_or(last.end_ns);
    // Syncs after the last launch: those the host made before its end move that end.
    let mut shift_at_end = shift;
    for &sync in &syncs[next_sync..] {
        shift = after_sync(sync, shift, orig_end_all, new_end_all);
        if sync.0 < host_end {
            shift_at_end = shift;
        }
    }
    let orig = last.end_ns.max(orig_end_all).max(host_end);
    let new = (host_end - shift_at_end).max(new_end_all);
    (orig - new).max(0)
}

/// The host advance after a blocking sync over `[a, b)`: it waited for the GPU work
/// recorded so far (ending at `orig_end`); in the replay that work ends at `new_end` and the
/// host arrives `shift` earlier, so it waits only as long as the replayed GPU needs.
fn after_sync((a, b): (i64, i64), shift: i64, orig_end: i64, new_end: i64) -> i64 {
    if orig_end == i64::MIN {
        return shift;
    }
    let waited = (orig_end.min(b) - a).max(0);
    let new_wait = (new_end - (a - shift)).max(0);
    (shift + waited - new_wait).max(0)
}

/// When the host asked for the activity: the start of its runtime call, or, without one,
/// its own start (it cannot have been asked for later than it ran).
fn launch_ns(p: &Profile, g: &GpuActivity) -> i64 {
    g.runtime
        .and_then(|r| p.runtime.get(r as usize))
        .map_or(g.ts_ns, |r| r.ts_ns.min(g.ts_ns))
}

#[cfg(test)]
mod tests {
    use crate::testing::TraceBuilder;
    use std::collections::HashMap;

    /// One step of 2 ms: `n` kernels of `dur` µs launched every `every` µs, then a sync
    /// (`.item()`-like) that waits for them.
    fn trace(every: f64, dur: f64) -> TraceBuilder {
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 2_000.0);
        let mut t = 10.0;
        let mut end = 0.0_f64;
        for _ in 0..10 {
            let op = b.op("aten::mm", t, 8.0);
            let start = (t + 5.0).max(end);
            b.kernel(
                "ampere_sgemm_128x64_nn",
                op,
                t,
                start,
                dur,
                [1, 1, 1],
                [128, 1, 1],
            );
            end = start + dur;
            t += every;
        }
        let sync_at = t;
        b.runtime(
            "cudaStreamSynchronize",
            sync_at,
            (end - sync_at).max(1.0) + 5.0,
            None,
        );
        b
    }

    fn halve_all(b: &TraceBuilder) -> i64 {
        let r = b.report();
        let p = &r.profile;
        let new: HashMap<u32, i64> = (0..p.gpu.len() as u32)
            .map(|i| (i, p.gpu[i as usize].dur_ns / 2))
            .collect();
        super::saving_ns(p, &new)
    }

    #[test]
    fn gpu_bound_work_saves_what_the_kernels_lose() {
        // Kernels of 100 µs launched every 10 µs: the GPU is the bottleneck and the sync
        // waits for it. Halving them saves ~500 µs.
        let s = halve_all(&trace(10.0, 100.0));
        assert!((s - 500_000).abs() < 20_000, "saving {s} ns");
    }

    #[test]
    fn host_bound_work_saves_nothing() {
        // Kernels of 10 µs launched every 100 µs: the GPU waits for the host; shorter
        // kernels only lengthen the gaps (the last one's 5 µs remains).
        let s = halve_all(&trace(100.0, 10.0));
        assert!(s <= 6_000, "saving {s} ns");
    }
}
