//! Timeline: per-step wall time, GPU busy and idle (split by cause), kernels,
//! transfers and sync points.
//!
//! GPU activity belongs to the step in which it *starts*. Busy time is the union of
//! kernel, memcpy and memset intervals over all devices and streams, clipped to the
//! step. Each idle gap is given one cause, checked in this order:
//! - `sync`: a blocking sync call (stream/device/event synchronize) was in progress
//!   when the GPU ran dry, so the host had nothing queued when it returned;
//! - `transfer` / `data_loader`: the part of the gap the host spent inside memcpy API
//!   calls, or inside DataLoader `__next__`;
//! - `cpu`: the rest: the host was busy elsewhere and did not launch work in time.

use crate::model::{CopyDir, GpuActivity, OpKind, Profile, RuntimeKind, Step};
use serde::Serialize;

/// How late GPU work may end after a sync returned and still be work that sync waited
/// for (`.item()`'s own 4-byte copy, seen late by clock skew between the host and GPU
/// timelines), ns.
const SYNC_SKEW_NS: i64 = 20_000;

/// When the GPU next starts work that a sync ending at `end` did not wait for: the
/// start of the first of `busy` (merged intervals) that ends after `end` +
/// [`SYNC_SKEW_NS`], no earlier than `end`; `None` if none does.
fn next_busy_after_sync(busy: &[(i64, i64)], end: i64) -> Option<i64> {
    // Merged intervals are sorted by end too: a binary search, not a scan.
    let i = busy.partition_point(|&(_, b)| b <= end + SYNC_SKEW_NS);
    busy.get(i).map(|&(a, _)| a.max(end))
}

/// How long the GPU sat idle, by cause (ns).
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct IdleBreakdown {
    /// All idle time.
    pub total_ns: i64,
    /// The host was not launching (CPU-bound or launch-bound).
    pub cpu_ns: i64,
    /// The queue had drained because the host blocked in a sync.
    pub sync_ns: i64,
    /// The host was inside memcpy API calls.
    pub transfer_ns: i64,
    /// The host was inside DataLoader `__next__`.
    pub data_loader_ns: i64,
}

impl IdleBreakdown {
    /// The cause holding most of this idle time: `sync`, `cpu`, `transfer` or
    /// `data_loader` (the names of the JSON report's `gpu_idle_ms` keys).
    pub fn main_cause(&self) -> &'static str {
        [
            (self.sync_ns, "sync"),
            (self.transfer_ns, "transfer"),
            (self.data_loader_ns, "data_loader"),
            (self.cpu_ns, "cpu"),
        ]
        .into_iter()
        .max_by_key(|&(ns, _)| ns)
        .map_or("cpu", |(_, c)| c)
    }

    fn add(&mut self, o: &IdleBreakdown) {
        self.total_ns += o.total_ns;
        self.cpu_ns += o.cpu_ns;
        self.sync_ns += o.sync_ns;
        self.transfer_ns += o.transfer_ns;
        self.data_loader_ns += o.data_loader_ns;
    }
}

/// Transfers of one direction.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq)]
pub struct TransferStats {
    /// Number of copies.
    pub count: u64,
    /// Bytes copied (copies without a byte count add 0).
    pub bytes: u64,
    /// GPU time of the copies (ns).
    pub dur_ns: i64,
    /// Copies from or to pageable host memory.
    pub pageable: u64,
}

impl TransferStats {
    /// Achieved bandwidth over the copies' GPU time, GB/s.
    pub fn bandwidth_gbs(&self) -> f64 {
        if self.dur_ns > 0 {
            self.bytes as f64 / self.dur_ns as f64
        } else {
            0.0
        }
    }
    fn add(&mut self, g: &GpuActivity) {
        self.count += 1;
        self.bytes += g.bytes.unwrap_or(0);
        self.dur_ns += g.dur_ns;
        self.pageable += g.is_pageable_copy() as u64;
    }
}

/// One step's timeline.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepMetrics {
    /// Step label.
    pub name: String,
    /// Start (ns).
    pub start_ns: i64,
    /// Wall time (ns).
    pub dur_ns: i64,
    /// Union of GPU activity inside the step (ns).
    pub gpu_busy_ns: i64,
    /// Kernels that started in the step.
    pub kernels: u64,
    /// Sum of those kernels' durations (ns).
    pub kernel_ns: i64,
    /// Host-to-device copies.
    pub h2d: TransferStats,
    /// Device-to-host copies.
    pub d2h: TransferStats,
    /// Device-to-device and peer copies.
    pub d2d: TransferStats,
    /// Memsets.
    pub memsets: u64,
    /// GPU idle inside the step, by cause.
    pub idle: IdleBreakdown,
}

/// A point where the host blocked on the device.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SyncPoint {
    /// Runtime API (`cudaStreamSynchronize`).
    pub api: String,
    /// Index of the runtime call in `Profile::runtime`.
    pub runtime: u32,
    /// Op that issued it (`aten::_local_scalar_dense`), if any.
    pub op: Option<u32>,
    /// Step index.
    pub step: usize,
    /// When it started (ns).
    pub ts_ns: i64,
    /// How long the host was blocked (ns).
    pub dur_ns: i64,
    /// GPU idle from the end of the sync to the next GPU activity it did not wait for
    /// (ns). A sync at the end of its step's window (the window closes when the GPU work
    /// is done) is followed into the next step, up to the end of that one.
    pub gpu_idle_after_ns: i64,
}

/// A host-blocking sync the program made outside every step's host range: before the
/// loop, after it (timing code, the end of a benchmark), never a per-step cost.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct OutsideSync {
    /// Runtime API (`cudaDeviceSynchronize`).
    pub api: String,
    /// Op that issued it, if any.
    pub op: Option<u32>,
    /// `before` the first step or `after` the last.
    pub position: &'static str,
    /// When it started (ns).
    pub ts_ns: i64,
    /// How long the host was blocked (ns).
    pub dur_ns: i64,
}

/// The timeline of the analysed steps.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Timeline {
    /// Per step.
    pub steps: Vec<StepMetrics>,
    /// Host-blocking syncs inside the steps: made while a step's host range ran (from
    /// its host start to the next step's, the last to its host end).
    pub syncs: Vec<SyncPoint>,
    /// The program's host-blocking syncs outside every step's host range.
    pub syncs_outside: Vec<OutsideSync>,
    /// Indices (into `Profile::gpu`) of activities inside the steps, in time order.
    #[serde(skip)]
    pub gpu_in_steps: Vec<u32>,
    /// GPU idle gaps inside the steps, (start, end) in ns: sorted, disjoint. The gaps the
    /// idle breakdown is computed from; rules overlap host ranges with them.
    #[serde(skip)]
    pub idle_gaps: Vec<(i64, i64)>,
    /// Per idle gap: whether the breakdown puts it on a sync (it began when a sync
    /// drained the GPU, or goes on from such a gap across a step's edge).
    #[serde(skip)]
    pub sync_drained: Vec<bool>,
    /// Per idle gap: its idle time by cause (the parts the step's breakdown sums).
    #[serde(skip)]
    pub gap_idle: Vec<IdleBreakdown>,
}

/// Compute the timeline of every step.
pub fn timeline(p: &Profile) -> Timeline {
    let mut t = Timeline::default();
    let dl = data_loader_ranges(p);
    let memcpy_calls: Vec<(i64, i64)> = p
        .runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Memcpy)
        .map(|r| (r.ts_ns, r.end_ns()))
        .collect();
    let syncs: Vec<u32> = p
        .blocking_calls()
        .iter()
        .copied()
        .filter(|&i| !made_by_tensight(p, i))
        .collect();
    // When the GPU is busy, whole trace: a step's first gap may go on from the last one.
    let all_busy = merge_busy(&p.gpu, i64::MIN, i64::MAX);
    // Steps are independent: measure them in parallel, then concatenate in order.
    use rayon::prelude::*;
    let per_step: Vec<_> = p
        .steps
        .par_iter()
        .enumerate()
        .map(|(si, s)| {
            let (lo, hi) = gpu_range(p, s);
            let acts = &p.gpu[lo..hi];
            let mut m = StepMetrics {
                name: s.name.clone(),
                start_ns: s.start_ns,
                dur_ns: s.dur_ns(),
                gpu_busy_ns: 0,
                kernels: 0,
                kernel_ns: 0,
                h2d: Default::default(),
                d2h: Default::default(),
                d2d: Default::default(),
                memsets: 0,
                idle: Default::default(),
            };
            for g in acts {
                match g.copy_dir() {
                    Some(CopyDir::HtoD) => m.h2d.add(g),
                    Some(CopyDir::DtoH) => m.d2h.add(g),
                    Some(_) => m.d2d.add(g),
                    None if g.is_kernel() => {
                        m.kernels += 1;
                        m.kernel_ns += g.dur_ns;
                    }
                    None => m.memsets += 1,
                }
            }
            let busy = merge_busy(acts, s.start_ns, s.end_ns);
            m.gpu_busy_ns = busy.iter().map(|(a, b)| b - a).sum();
            // Idle gaps: before the first interval, between intervals, after the last.
            let mut cursor = s.start_ns;
            let mut gaps = Vec::new();
            for &(a, b) in &busy {
                if a > cursor {
                    gaps.push((cursor, a));
                }
                cursor = cursor.max(b);
            }
            if s.end_ns > cursor {
                gaps.push((cursor, s.end_ns));
            }
            let mut drained = Vec::with_capacity(gaps.len());
            let mut by_cause = Vec::with_capacity(gaps.len());
            for &(g0, g1) in &gaps {
                let mut idle = IdleBreakdown {
                    total_ns: g1 - g0,
                    ..Default::default()
                };
                let carried = g0 == s.start_ns && drained_before(p, &syncs, &all_busy, g0);
                let by_sync = carried || sync_drained(p, &syncs, g0);
                drained.push(by_sync);
                if by_sync {
                    idle.sync_ns = g1 - g0;
                } else {
                    idle.transfer_ns = overlap(&memcpy_calls, g0, g1);
                    idle.data_loader_ns =
                        overlap(&dl, g0, g1).min(idle.total_ns - idle.transfer_ns);
                    idle.cpu_ns = idle.total_ns - idle.transfer_ns - idle.data_loader_ns;
                }
                m.idle.add(&idle);
                by_cause.push(idle);
            }
            // Sync points of this step; `to_edge`: those idle until the step's end.
            let mut step_syncs = Vec::new();
            let mut to_edge: Vec<usize> = Vec::new();

            let host_end = p
                .steps
                .get(si + 1)
                .map_or(s.cpu_end_ns, |n| n.host_start_ns);
            // The syncs starting in the step's host range (`syncs` is in runtime order,
            // sorted by start): found by binary search, not by a scan of every sync of
            // the trace for every step.
            let from = syncs.partition_point(|&ri| p.runtime[ri as usize].ts_ns < s.host_start_ns);
            for &ri in &syncs[from..] {
                let r = &p.runtime[ri as usize];
                if r.ts_ns >= host_end {
                    break;
                }
                let end = r.end_ns();
                let next = next_busy_after_sync(&busy, end);
                let idle_after = next.unwrap_or(s.end_ns).min(s.end_ns) - end;
                if next.is_none_or(|n| n >= s.end_ns) {
                    to_edge.push(step_syncs.len());
                }
                step_syncs.push(SyncPoint {
                    api: r.name.to_string(),
                    runtime: ri,
                    op: r.op,
                    step: si,
                    ts_ns: r.ts_ns,
                    dur_ns: r.dur_ns,
                    gpu_idle_after_ns: idle_after.max(0),
                });
            }
            (
                (lo, hi),
                m,
                (gaps, drained, by_cause),
                step_syncs,
                to_edge,
                (busy, s.end_ns),
            )
        })
        .collect();
    // The idle after a sync at a step's edge goes on into the next step: up to the next
    // step's first GPU work that the sync did not wait for.
    let mut idle_into_next: Vec<Vec<(usize, i64)>> = vec![Vec::new(); per_step.len()];
    for (si, pair) in per_step.windows(2).enumerate() {
        let (syncs_here, edge) = (&pair[0].3, &pair[0].4);
        let (busy, next_end) = &pair[1].5;
        for &i in edge {
            let end = p.runtime[syncs_here[i].runtime as usize].end_ns();
            let next = next_busy_after_sync(busy, end).unwrap_or(*next_end);
            idle_into_next[si].push((i, next.min(*next_end) - end));
        }
    }
    for (((lo, hi), m, gaps, mut step_syncs, _, _), longer) in
        per_step.into_iter().zip(idle_into_next)
    {
        for (i, idle) in longer {
            let sp = &mut step_syncs[i];
            sp.gpu_idle_after_ns = sp.gpu_idle_after_ns.max(idle);
        }
        t.gpu_in_steps.extend(lo as u32..hi as u32);
        t.idle_gaps.extend(gaps.0);
        t.sync_drained.extend(gaps.1);
        t.gap_idle.extend(gaps.2);
        t.syncs.extend(step_syncs);
        t.steps.push(m);
    }
    if let (Some(first), Some(last)) = (p.steps.first(), p.steps.last()) {
        // Steps the analysis leaves out (the profiler's warm-up, the execution-trace
        // step) are steps too: their syncs are not outside the loop.
        // Their union, sorted, searched per sync (a scan per sync is quadratic on long
        // traces: thousands of steps and syncs).
        let other_steps = super::simulate::merge_intervals(
            p.ops
                .iter()
                .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("ProfilerStep#"))
                .map(|o| (o.ts_ns, o.end_ns()))
                .collect(),
        );
        let in_other_step = |ts: i64| {
            let k = other_steps.partition_point(|s| s.0 <= ts);
            k > 0 && ts < other_steps[k - 1].1
        };
        for &ri in &syncs {
            let r = &p.runtime[ri as usize];
            if in_other_step(r.ts_ns) {
                continue;
            }
            let position = if r.ts_ns < first.host_start_ns {
                "before"
            } else if r.ts_ns >= last.cpu_end_ns {
                "after"
            } else {
                continue;
            };
            t.syncs_outside.push(OutsideSync {
                api: r.name.to_string(),
                op: r.op,
                position,
                ts_ns: r.ts_ns,
                dur_ns: r.dur_ns,
            });
        }
    }
    t
}

/// True for a sync that tensight's collector made itself (it drains the GPU at the edges
/// of the recorded window): inside a `tensight::` annotation, or under a Python frame of
/// tensight's own package. Those are not the program's syncs.
fn made_by_tensight(p: &Profile, runtime: u32) -> bool {
    let r = &p.runtime[runtime as usize];
    if let Some(op) = r.op {
        if p.op_ancestors(op)
            .any(|a| p.ops[a as usize].name.starts_with("tensight::"))
        {
            return true;
        }
    }
    // Frames are sorted by (pid, tid, start): the last one starting before the call,
    // then its ancestors, are the frames that can enclose it.
    let frames = &p.python_frames;
    let n = frames.partition_point(|f| (f.pid, f.tid, f.ts_ns) <= (r.pid, r.tid, r.ts_ns));
    let Some(last) = n.checked_sub(1) else {
        return false;
    };
    if (frames[last].pid, frames[last].tid) != (r.pid, r.tid) {
        return false;
    }
    // The innermost enclosing frame of tensight's package or of the user's code
    // decides: the collector's own frames stay open (as the profiler saw them when it
    // started from a step hook) around the whole detail step, and so around every
    // sync the user's code makes in it.
    let mut cur = Some(last as u32);
    let mut hops = 0;
    while let Some(i) = cur {
        let f = &frames[i as usize];
        if f.ts_ns <= r.ts_ns && r.ts_ns < f.end_ns() {
            if f.name.contains("tensight/") {
                return true;
            }
            if crate::model::is_user_frame(&f.name) {
                return false;
            }
        }
        cur = f.parent;
        hops += 1;
        if hops > 256 {
            break;
        }
    }
    false
}

/// Range of `p.gpu` (sorted by start) that starts inside the step.
pub fn gpu_range(p: &Profile, s: &Step) -> (usize, usize) {
    let lo = p.gpu.partition_point(|g| g.ts_ns < s.start_ns);
    let hi = p.gpu.partition_point(|g| g.ts_ns < s.end_ns);
    (lo, hi)
}

/// Union of activity intervals, clipped to [lo, hi). `acts` sorted by start.
pub fn merge_busy(acts: &[GpuActivity], lo: i64, hi: i64) -> Vec<(i64, i64)> {
    let mut out: Vec<(i64, i64)> = Vec::new();
    for g in acts {
        let (a, b) = (g.ts_ns.max(lo), g.end_ns().min(hi));
        if b <= a {
            continue;
        }
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// Time of [lo, hi) covered by `ranges` (sorted by start, possibly overlapping).
pub fn overlap(ranges: &[(i64, i64)], lo: i64, hi: i64) -> i64 {
    let start = ranges.partition_point(|r| r.0 < lo);
    // A range starting before `lo` may still cover it: step back over a few.
    let mut total = 0;
    let mut cursor = lo;
    let from = start.saturating_sub(8);
    for &(a, b) in &ranges[from..] {
        if a >= hi {
            break;
        }
        let (a, b) = (a.max(cursor), b.min(hi));
        if b > a {
            total += b - a;
            cursor = b;
        }
    }
    total
}

/// True when a blocking sync was in progress when the GPU went idle at `g0`: the host
/// waited for the queue to drain, so nothing was queued behind it.
fn sync_drained(p: &Profile, syncs: &[u32], g0: i64) -> bool {
    const SKEW_NS: i64 = 20_000; // host and device clocks are correlated, not identical
    let i = syncs.partition_point(|&r| p.runtime[r as usize].ts_ns <= g0);
    syncs[..i].iter().rev().take(16).any(|&r| {
        let r = &p.runtime[r as usize];
        r.end_ns() >= g0 - SKEW_NS && r.dur_ns > 0
    })
}

/// Whether the GPU idle at a step's start `t` goes on from a gap a sync drained in the
/// step before: the last sync before `t` ended when the GPU ran dry (or after), and the
/// GPU stayed idle from then to `t`.
fn drained_before(p: &Profile, syncs: &[u32], busy: &[(i64, i64)], t: i64) -> bool {
    let i = syncs.partition_point(|&r| p.runtime[r as usize].end_ns() <= t);
    let Some(&r) = i.checked_sub(1).and_then(|i| syncs.get(i)) else {
        return false;
    };
    let end = p.runtime[r as usize].end_ns();
    // The busy interval before `t`: it must have ended by the sync's end (plus skew).
    let k = busy.partition_point(|b| b.0 < t);
    let last_end = k.checked_sub(1).map_or(i64::MIN, |k| busy[k].1);
    last_end <= t && last_end <= end + 20_000 && p.runtime[r as usize].dur_ns > 0
}

/// Host ranges spent fetching batches (`enumerate(DataLoader)#...__next__`).
pub(crate) fn data_loader_ranges(p: &Profile) -> Vec<(i64, i64)> {
    let mut v: Vec<(i64, i64)> = p
        .ops
        .iter()
        .filter(|o| o.kind == OpKind::Annotation && o.name.starts_with("enumerate(DataLoader)#"))
        .map(|o| (o.ts_ns, o.end_ns()))
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_counts_each_instant_once() {
        let r = [(0, 10), (5, 15), (20, 30)];
        assert_eq!(overlap(&r, 0, 100), 25);
        assert_eq!(overlap(&r, 8, 22), 9);
        assert_eq!(overlap(&r, 30, 40), 0);
    }
}
