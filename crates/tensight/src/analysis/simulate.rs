//! The one causal model of the analysed steps, and its what-if replay (in the spirit of
//! Daydream, ATC'20): every saving a rule reports is the simulated window before minus
//! after the rule's [`Change`], so two rules that explain the same idle time cannot both
//! claim it, and the diagnosis can apply several changes at once (all fixes) or one after
//! another (marginal savings).
//!
//! The model: the host's timeline as recorded (every launch, copy and sync call where it
//! was), the GPU's activities in stream order, each depending on its launch, on the
//! activity before it on its stream, and on another stream when it waited longer than
//! either explains (an event); blocking syncs wait for the GPU work recorded before them.
//! The replay walks the activities in start order: each starts at the later of its launch
//! (moved by how much earlier the host runs by then) and the end of the activity before it
//! on its stream (as replayed), plus the delay it showed in the trace (launch latency).
//! The host runs earlier when a [`Change`] removes host time (a numpy transform, Python
//! between launches, a blocking copy), when a sync no longer waits (the value stays on
//! the GPU), or when a sync waits less because the GPU work it waited for got shorter.
//! The window ends at the later of the host's end and the GPU's end. With no change the
//! replay gives the recorded window exactly (delays are kept), which the tests check.
//!
//! What it does not model: a launch blocking on a full queue, the CPU threads' effect on
//! each other beyond the one host clock, other ranks (a collective's wait is kept).

use crate::model::{GpuActivity, Profile};
use std::collections::HashSet;

/// New durations of GPU activities (index into `Profile::gpu`, ns), keyed cheaply:
/// changes hold one entry per kernel they touch, up to every kernel of the window.
pub type Durations = rustc_hash::FxHashMap<u32, i64>;

/// A wait longer than this that neither the launch nor the stream explains is taken as a
/// wait for another stream (ns).
const DEP_MIN_NS: i64 = 10_000;
/// Host/GPU clock tolerance (ns).
const SKEW_NS: i64 = 5_000;
/// What a sync that no longer waits still costs the host (ns).
pub const UNSYNCED_NS: i64 = 2_000;
/// Gap between kernels replayed from a CUDA graph (ns).
pub const GRAPH_GAP_NS: i64 = 1_000;

/// A transformation of the recorded window: what a fix changes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Change {
    /// GPU activities (index into `Profile::gpu`) that take this long instead (ns); 0
    /// removes one, with the gap or launch latency before it.
    pub durations: Durations,
    /// Host time removed: intervals (ns) of the host timeline that no longer happen;
    /// everything the host does after one happens that much earlier.
    pub host_cuts: Vec<(i64, i64)>,
    /// Host time removed at points: (at ns, removed ns), added up (the profiler's cost
    /// per recorded event: [`super::inflation`]).
    pub host_points: Vec<(i64, i64)>,
    /// Blocking syncs (index into `Profile::runtime`) that no longer wait.
    pub unsynced: HashSet<u32>,
    /// Groups of GPU activities replayed as one CUDA graph: launched together at the
    /// group's first launch, back to back.
    pub graphs: Vec<Vec<u32>>,
}

impl Change {
    /// Give kernels `ks` new durations in `durations` that keep their proportions and
    /// add up to `total_ns` (a modelled time for the work they did together).
    pub fn scale_kernels(durations: &mut Durations, p: &Profile, ks: &[u32], total_ns: i64) {
        let now: i64 = ks.iter().map(|&gi| p.gpu[gi as usize].dur_ns).sum();
        if now <= 0 {
            return;
        }
        for &gi in ks {
            let d = p.gpu[gi as usize].dur_ns as f64;
            durations.insert(gi, (d * total_ns as f64 / now as f64).round() as i64);
        }
    }

    /// A change of kernel durations only.
    pub fn durations(d: Durations) -> Change {
        Change {
            durations: d,
            ..Default::default()
        }
    }

    /// Nothing changes.
    pub fn is_empty(&self) -> bool {
        self.durations.is_empty()
            && self.host_cuts.is_empty()
            && self.host_points.is_empty()
            && self.unsynced.is_empty()
            && self.graphs.is_empty()
    }

    /// Both changes at once: the shorter duration of an activity both shorten, the union
    /// of the host time both remove (removed once), both sets of syncs and graphs.
    pub fn and(&self, o: &Change) -> Change {
        let mut d = self.durations.clone();
        for (&k, &v) in &o.durations {
            d.entry(k).and_modify(|x| *x = (*x).min(v)).or_insert(v);
        }
        let mut cuts = self.host_cuts.clone();
        cuts.extend(o.host_cuts.iter().copied());
        let mut points = self.host_points.clone();
        points.extend(o.host_points.iter().copied());
        Change {
            durations: d,
            host_cuts: merge_intervals(cuts),
            host_points: points,
            unsynced: self.unsynced.union(&o.unsynced).copied().collect(),
            graphs: self.graphs.iter().chain(&o.graphs).cloned().collect(),
        }
    }
}

/// The replayed window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replayed {
    /// The window as recorded, ns.
    pub before_ns: i64,
    /// The window as replayed with the change, ns.
    pub after_ns: i64,
}

impl Replayed {
    /// Wall time saved over the window, ns (never negative).
    pub fn saved_ns(&self) -> i64 {
        (self.before_ns - self.after_ns).max(0)
    }
}

/// Wall time saved over the analysed steps (ns, all steps together) by `change`.
pub fn saving_ns(p: &Profile, change: &Change) -> i64 {
    if change.is_empty() {
        return 0;
    }
    replay(p, change).map_or(0, |r| r.saved_ns())
}

/// What every replay of one window shares, found once per profile (the diagnosis replays
/// a dozen changes of the same window): the activities' launches, streams, recorded
/// delays and cross-stream waits, and the blocking syncs in order. None of it depends on
/// the change, which alters only durations, host time and which syncs still wait.
#[derive(Debug)]
pub struct Skeleton {
    /// The window it was found for: (first step's start, last step's end, activities,
    /// runtime calls); a replay of another window finds its own.
    key: (i64, i64, usize, usize),
    /// The window's activities: `Profile::gpu[lo..lo + launch.len()]`.
    lo: usize,
    /// Per activity: when the host asked for it ([`launch_ns`]).
    launch: Vec<i64>,
    /// Per activity: its stream's slot (streams numbered in first-seen order).
    slot: Vec<u32>,
    /// Per activity: the delay it showed after what it waited for (launch latency, ns).
    delay: Vec<i64>,
    /// Per activity `k`, `deps[dep_at[k]..dep_at[k + 1]]`: the activities of another
    /// stream it waited for (an event), all ending at the same recorded time, as
    /// positions in `targets`.
    dep_at: Vec<u32>,
    deps: Vec<u32>,
    /// The activities some other one waits for, in order: the replay keeps their new
    /// ends only.
    targets: Vec<u32>,
    /// Streams in the window.
    streams: usize,
    /// Blocking syncs in the window: (start, end, runtime index), by (start, end).
    syncs: Vec<(i64, i64, u32)>,
}

impl Skeleton {
    fn key_of(p: &Profile) -> Option<(i64, i64, usize, usize)> {
        let (first, last) = (p.steps.first()?, p.steps.last()?);
        Some((first.start_ns, last.end_ns, p.gpu.len(), p.runtime.len()))
    }

    /// The skeleton of `p`'s analysed steps; `None` without steps or GPU activity.
    fn new(p: &Profile) -> Option<Skeleton> {
        let key = Skeleton::key_of(p)?;
        let (from, to) = (key.0, key.1);
        let lo = p.gpu.partition_point(|g| g.ts_ns < from);
        let hi = p.gpu.partition_point(|g| g.ts_ns < to);
        if lo >= hi {
            return None;
        }
        let n = hi - lo;
        let mut sk = Skeleton {
            key,
            lo,
            launch: Vec::with_capacity(n),
            slot: Vec::with_capacity(n),
            delay: Vec::with_capacity(n),
            dep_at: Vec::with_capacity(n + 1),
            deps: Vec::new(),
            targets: Vec::new(),
            streams: 0,
            syncs: Vec::new(),
        };
        // Per stream (device, stream), in first-seen order (few: a list): the last
        // activity's recorded end, and (recorded end, activity) of those seen so far,
        // sorted (ends come nearly in order: an insert is almost always a push).
        let mut streams: Vec<SeenStream> = Vec::new();
        sk.dep_at.push(0);
        for k in 0..n {
            let g = &p.gpu[lo + k];
            let launch = launch_ns(p, g);
            let key = (g.device, g.stream);
            let at = match streams.iter().position(|s| s.0 == key) {
                Some(at) => at,
                None => {
                    streams.push((key, i64::MIN, Vec::new()));
                    streams.len() - 1
                }
            };
            let mut ready = launch.max(streams[at].1);
            if g.ts_ns - ready > DEP_MIN_NS {
                // An unexplained wait: the activity waited for another stream (an event).
                // Take the other stream of this device whose work ended last before it
                // started: all its activities that ended then.
                let dep = streams
                    .iter()
                    .filter(|(s, _, _)| s.0 == g.device && *s != key)
                    .filter_map(|(s, _, ends)| {
                        let upto = ends.partition_point(|e| e.0 <= g.ts_ns + SKEW_NS);
                        let (end, _) = *ends[..upto].last()?;
                        (end >= ready).then(|| {
                            let from = ends[..upto].partition_point(|e| e.0 < end);
                            (end, &ends[from..upto], *s)
                        })
                    })
                    .max_by_key(|&(end, _, s)| (end, std::cmp::Reverse(s)));
                if let Some((end, on, _)) = dep {
                    ready = ready.max(end);
                    sk.deps.extend(on.iter().map(|e| e.1));
                }
            }
            sk.dep_at.push(sk.deps.len() as u32);
            sk.launch.push(launch);
            sk.slot.push(at as u32);
            sk.delay.push((g.ts_ns - ready).max(0));
            let s = &mut streams[at];
            s.1 = s.1.max(g.end_ns());
            let e = (g.end_ns(), k as u32);
            let i = s.2.partition_point(|x| x.0 <= e.0);
            s.2.insert(i, e);
        }
        sk.streams = streams.len();
        sk.targets = sk.deps.clone();
        sk.targets.sort_unstable();
        sk.targets.dedup();
        for d in &mut sk.deps {
            *d = sk.targets.partition_point(|&t| t < *d) as u32;
        }
        sk.syncs = p
            .blocking_calls()
            .iter()
            .map(|&i| (i, &p.runtime[i as usize]))
            .filter(|(_, r)| r.ts_ns >= from && r.ts_ns < to)
            .map(|(i, r)| (r.ts_ns, r.end_ns(), i))
            .collect();
        sk.syncs.sort_unstable_by_key(|s| (s.0, s.1));
        Some(sk)
    }
}

/// One stream while a [`Skeleton`] is found: its (device, stream), its last activity's
/// recorded end, and (recorded end, activity) of its activities so far, sorted.
type SeenStream = ((i64, i64), i64, Vec<(i64, u32)>);

/// Replay the analysed steps with `change`; `None` without steps or GPU activity.
pub fn replay(p: &Profile, change: &Change) -> Option<Replayed> {
    let key = Skeleton::key_of(p)?;
    let found;
    let sk = match p.skeleton.get_or_init(|| Skeleton::new(p)) {
        Some(sk) if sk.key == key => sk,
        // The steps changed since the skeleton was found (not in a diagnosis: the
        // profile is read-only by then): find this window's.
        _ => {
            found = Skeleton::new(p)?;
            &found
        }
    };
    let (first, last) = (p.steps.first()?, p.steps.last()?);
    let (lo, n) = (sk.lo, sk.launch.len());
    // The new durations and graph launches of the window's activities, by activity:
    // walked in step with it (a hash lookup per activity, or a dense table of the window
    // per replay, costs more).
    let in_window = |i: u32| (i as usize).checked_sub(lo).filter(|&k| k < n);
    let mut durations: Vec<(usize, i64)> = change
        .durations
        .iter()
        .filter_map(|(&i, &d)| Some((in_window(i)?, d)))
        .collect();
    durations.sort_unstable();
    let mut graph_launch: Vec<(usize, i64)> = Vec::new();
    for g in &change.graphs {
        let first_launch = g.iter().map(|&i| launch_ns(p, &p.gpu[i as usize])).min();
        if let Some(t) = first_launch {
            graph_launch.extend(g.iter().filter_map(|&i| Some((in_window(i)?, t))));
        }
    }
    // A member of two groups takes the later-listed group's launch, as before.
    graph_launch.reverse();
    graph_launch.sort_by_key(|x| x.0);
    graph_launch.dedup_by_key(|x| x.0);
    let (mut next_dur, mut next_graph) = (0, 0);
    let cuts = Cuts::new(&change.host_cuts, &change.host_points);
    // A sync inside removed host time is removed with it (the copy it waited out, the
    // `.cpu()` of a round trip, is no longer made).
    let syncs: Vec<(i64, i64, bool)> = sk
        .syncs
        .iter()
        .filter(|&&(a, b, _)| !cuts.covers(a, b))
        .map(|&(a, b, i)| (a, b, change.unsynced.contains(&i)))
        .collect();
    let mut next_sync = 0;

    // How much earlier than recorded the host runs, beyond the removed host time.
    let mut sync_shift: i64 = 0;
    // Per stream slot: the last activity's new end; the new ends of the activities that
    // others wait for.
    let mut stream_end = vec![i64::MIN; sk.streams];
    let mut target_end = vec![i64::MIN; sk.targets.len()];
    let mut next_target = 0;
    let (mut orig_end_all, mut new_end_all) = (i64::MIN, i64::MIN);
    for k in 0..n {
        let g = &p.gpu[lo + k];
        let launch = sk.launch[k];
        // Syncs that returned before this activity was launched waited for everything
        // processed so far (activities are processed in start order).
        while next_sync < syncs.len() && syncs[next_sync].1 <= launch {
            sync_shift = after_sync(
                syncs[next_sync],
                sync_shift,
                &cuts,
                orig_end_all,
                new_end_all,
            );
            next_sync += 1;
        }
        let slot = sk.slot[k] as usize;
        let prev_new = stream_end[slot];
        let dep_new = sk.deps[sk.dep_at[k] as usize..sk.dep_at[k + 1] as usize]
            .iter()
            .map(|&j| target_end[j as usize])
            .max()
            .unwrap_or(i64::MIN);
        let graph = match graph_launch.get(next_graph) {
            Some(&(at, t)) if at == k => {
                next_graph += 1;
                Some(t)
            }
            _ => None,
        };
        let new_dur = match durations.get(next_dur) {
            Some(&(at, d)) if at == k => {
                next_dur += 1;
                Some(d)
            }
            _ => None,
        };
        let (host_at, delay) = match graph {
            Some(t) => (t - sync_shift - cuts.before(t), GRAPH_GAP_NS),
            None => (launch - sync_shift - cuts.before(launch), sk.delay[k]),
        };
        let dur = new_dur.unwrap_or(g.dur_ns).clamp(0, g.dur_ns.max(0));
        // An activity the change removes (duration 0) is not there: no launch latency
        // or gap before it either (fused kernels run back to back as one).
        let delay = if new_dur == Some(0) { 0 } else { delay };
        let start = host_at.max(prev_new).max(dep_new) + delay;
        let end = start + dur;
        stream_end[slot] = end.max(prev_new);
        if sk.targets.get(next_target) == Some(&(k as u32)) {
            target_end[next_target] = end;
            next_target += 1;
        }
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
    let mut shift_at_end = sync_shift;
    for &sync in &syncs[next_sync..] {
        sync_shift = after_sync(sync, sync_shift, &cuts, orig_end_all, new_end_all);
        if sync.0 < host_end {
            shift_at_end = sync_shift;
        }
    }
    let start = first.start_ns;
    let orig = last.end_ns.max(orig_end_all).max(host_end);
    let new = (host_end - shift_at_end - cuts.before(host_end)).max(new_end_all);
    Some(Replayed {
        before_ns: orig - start,
        after_ns: new - start,
    })
}

/// The host's advance after a blocking sync over `[a, b)` (`unsynced`: it no longer
/// waits), beyond the removed host time. It waited for the GPU work recorded so far
/// (ending at `orig_end`), then took the rest of the call; in the replay that work ends
/// at `new_end` and the host arrives earlier, so it waits only as long as the replayed
/// GPU needs. The result may be negative: host time removed before a sync that still
/// waits for the GPU saves nothing after it.
fn after_sync(
    (a, b, unsynced): (i64, i64, bool),
    sync_shift: i64,
    cuts: &Cuts,
    orig_end: i64,
    new_end: i64,
) -> i64 {
    let arrive = a - sync_shift - cuts.before(a);
    let leave = if unsynced {
        arrive + UNSYNCED_NS.min(b - a)
    } else if orig_end == i64::MIN {
        arrive + (b - a)
    } else {
        let own = b - a.max(orig_end.min(b)); // the call's time after the GPU was done
        arrive.max(new_end) + own
    };
    (b - leave) - cuts.before(b)
}

/// Removed host time, merged: how much host time before `t` no longer happens.
struct Cuts {
    /// (start, end, removed before start), sorted.
    iv: Vec<(i64, i64, i64)>,
    /// (at, removed at and before it), sorted.
    points: Vec<(i64, i64)>,
}

impl Cuts {
    fn new(raw: &[(i64, i64)], points: &[(i64, i64)]) -> Cuts {
        let mut acc = 0;
        let iv = merge_intervals(raw.to_vec())
            .into_iter()
            .map(|(a, b)| {
                let x = (a, b, acc);
                acc += b - a;
                x
            })
            .collect();
        let mut pts: Vec<(i64, i64)> = points.iter().copied().filter(|p| p.1 > 0).collect();
        pts.sort_unstable();
        let mut sum = 0;
        for p in &mut pts {
            sum += p.1;
            p.1 = sum;
        }
        Cuts { iv, points: pts }
    }

    /// Whether `[a, b)` lies inside one removed interval.
    fn covers(&self, a: i64, b: i64) -> bool {
        let k = self.iv.partition_point(|x| x.0 <= a);
        k.checked_sub(1).is_some_and(|i| b <= self.iv[i].1)
    }

    fn before(&self, t: i64) -> i64 {
        let k = self.iv.partition_point(|x| x.0 < t);
        let cut = match k.checked_sub(1).map(|i| self.iv[i]) {
            Some((a, b, acc)) => acc + (t.min(b) - a).max(0),
            None => 0,
        };
        let j = self.points.partition_point(|p| p.0 < t);
        cut + j.checked_sub(1).map_or(0, |i| self.points[i].1)
    }
}

/// `cuts` less every part that lies in one of `holes`: sorted, disjoint intervals (a
/// change that removes host time but keeps what another cause owns inside it).
pub(crate) fn subtract_intervals(cuts: Vec<(i64, i64)>, holes: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    let holes = merge_intervals(holes);
    let mut out = Vec::new();
    for (mut a, b) in merge_intervals(cuts) {
        let k = holes.partition_point(|h| h.1 <= a);
        for &(h0, h1) in &holes[k..] {
            if h0 >= b {
                break;
            }
            if h0 > a {
                out.push((a, h0));
            }
            a = a.max(h1);
        }
        if b > a {
            out.push((a, b));
        }
    }
    out
}

/// Sorted, disjoint union of intervals.
pub(crate) fn merge_intervals(mut v: Vec<(i64, i64)>) -> Vec<(i64, i64)> {
    v.retain(|&(a, b)| b > a);
    v.sort_unstable();
    let mut out: Vec<(i64, i64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
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
    use super::*;
    use crate::model::RuntimeKind;
    use crate::testing::TraceBuilder;

    #[test]
    fn subtracting_intervals_keeps_what_the_holes_do_not_cover() {
        let cuts = vec![(0, 100), (200, 300)];
        let holes = vec![(10, 20), (15, 30), (90, 210), (250, 260), (400, 500)];
        assert_eq!(
            subtract_intervals(cuts, holes),
            vec![(0, 10), (30, 90), (210, 250), (260, 300)]
        );
        assert_eq!(subtract_intervals(vec![(5, 9)], vec![]), vec![(5, 9)]);
        assert!(subtract_intervals(vec![(5, 9)], vec![(0, 10)]).is_empty());
    }

    /// One step of 2 ms: 10 kernels of `dur` µs launched every `every` µs, then a sync
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
        let new: Durations = (0..p.gpu.len() as u32)
            .map(|i| (i, p.gpu[i as usize].dur_ns / 2))
            .collect();
        saving_ns(p, &Change::durations(new))
    }

    #[test]
    fn no_change_replays_the_recorded_window() {
        for (every, dur) in [(10.0, 100.0), (100.0, 10.0)] {
            let r = trace(every, dur).report();
            let rep = replay(&r.profile, &Change::default()).unwrap();
            assert_eq!(rep.before_ns, rep.after_ns, "every {every} dur {dur}");
        }
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

    #[test]
    fn host_time_removed_saves_where_the_host_is_the_bottleneck() {
        // Host-bound: removing 400 µs of host time between the 3rd and 7th launches saves
        // those 400 µs. GPU-bound: the host was ahead anyway, it saves nothing.
        let cut = |b: &TraceBuilder| {
            let r = b.report();
            let t0 = r.profile.steps[0].start_ns;
            let c = Change {
                host_cuts: vec![(t0 + 300_000, t0 + 700_000)],
                ..Default::default()
            };
            saving_ns(&r.profile, &c)
        };
        let host_bound = cut(&trace(100.0, 10.0));
        assert!((host_bound - 400_000).abs() < 10_000, "{host_bound}");
        assert!(cut(&trace(10.0, 100.0)) < 10_000);
    }

    #[test]
    fn a_sync_that_no_longer_waits_saves_only_the_idle_it_caused() {
        // A step: 1 ms kernel, a sync that waits for it, then 500 µs of host work before
        // the next 1 ms kernel. Without the wait the host's work overlaps the first kernel.
        let mut b = TraceBuilder::new();
        b.step(1, 0.0, 2_545.0);
        let a = b.op("aten::mm", 10.0, 5.0);
        b.kernel("gemm", a, 10.0, 20.0, 1_000.0, [1, 1, 1], [128, 1, 1]);
        b.runtime("cudaStreamSynchronize", 20.0, 1_005.0, None);
        let c = b.op("aten::mm", 1_530.0, 5.0);
        b.kernel("gemm", c, 1_530.0, 1_540.0, 1_000.0, [1, 1, 1], [128, 1, 1]);
        let r = b.report();
        let p = &r.profile;
        let sync = p
            .runtime
            .iter()
            .position(|r| r.kind == RuntimeKind::Sync)
            .unwrap() as u32;
        let change = Change {
            unsynced: [sync].into_iter().collect(),
            ..Default::default()
        };
        let s = saving_ns(p, &change);
        // The host's 505 µs of work overlaps the first kernel: the second starts at the
        // first's end (1.03 ms) instead of 1.54 ms, and the window ends 510 µs earlier.
        assert!((s - 500_000).abs() < 20_000, "saving {s} ns");
    }

    #[test]
    fn changes_combine_without_counting_the_same_host_time_twice() {
        let a = Change {
            host_cuts: vec![(0, 100), (200, 300)],
            ..Default::default()
        };
        let b = Change {
            host_cuts: vec![(50, 250)],
            durations: [(1, 5)].into_iter().collect(),
            ..Default::default()
        };
        let both = a.and(&b);
        assert_eq!(both.host_cuts, vec![(0, 300)]);
        assert_eq!(both.durations[&1], 5);
        let cuts = Cuts::new(&both.host_cuts, &[(50, 7), (10, 3)]);
        // Intervals once, points added up: 150 + 3 + 7 before 150 µs.
        assert_eq!(
            (cuts.before(0), cuts.before(150), cuts.before(1000)),
            (0, 160, 310)
        );
    }
}
