//! One representative step laid out as lanes, for a timeline plot: the host threads'
//! outermost ops, the host-blocking syncs, each GPU stream's kernels, copies and memsets,
//! and the GPU's idle gaps with the cause [`super::timeline`] gave them.
//!
//! Input: a Profile and its timeline. Output: a [`StepView`] of the step whose wall time
//! is the median's (times relative to the view's start). Small by construction: spans
//! shorter than a pixel of a 1,500-pixel plot that follow one another on a lane are
//! merged into one (`12 kernels`), and a lane keeps at most [`MAX_SPANS`]. It does not
//! measure anything new: the gaps and their causes are the timeline's.

use super::timeline::{overlap, Timeline};
use crate::model::{CopyDir, GpuKind, OpKind, Profile, RuntimeKind};
use serde::Serialize;
use std::borrow::Cow;

/// Most spans one lane keeps (the longest, when there are more).
pub const MAX_SPANS: usize = 1500;
/// The plot's resolution: spans shorter than `window / RESOLUTION` may merge.
const RESOLUTION: i64 = 1500;

/// What a span is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SpanKind {
    /// A host op (outermost on its thread).
    Op,
    /// A host-blocking sync call.
    Sync,
    /// A compute kernel.
    Kernel,
    /// A host-to-device copy.
    CopyH2d,
    /// A device-to-host copy.
    CopyD2h,
    /// A device-to-device or peer copy.
    CopyD2d,
    /// A memset.
    Memset,
    /// GPU idle: the host was not launching.
    IdleCpu,
    /// GPU idle: a sync had drained the queue.
    IdleSync,
    /// GPU idle: the host was inside memcpy calls.
    IdleTransfer,
    /// GPU idle: the host was inside DataLoader `__next__`.
    IdleDataLoader,
}

/// One bar of a lane.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Span {
    /// Start, ns after the view's start.
    pub start_ns: i64,
    /// Duration, ns.
    pub dur_ns: i64,
    /// What it is.
    pub kind: SpanKind,
    /// Name (op, kernel, sync API), or `N kernels` for merged spans.
    pub name: String,
    /// Spans merged into this one (1: none).
    pub merged: u32,
}

/// What a lane shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneKind {
    /// A host thread.
    Host,
    /// Host-blocking syncs of every thread.
    Syncs,
    /// A GPU stream.
    Stream,
    /// The GPU's idle gaps.
    Idle,
}

/// One row of the plot.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Lane {
    /// `thread 1234 (python3)` (a host thread), `host syncs`, `GPU 0 stream 7`, `GPU idle`.
    pub label: String,
    /// What it shows.
    pub kind: LaneKind,
    /// Its bars, by start.
    pub spans: Vec<Span>,
}

/// The representative step.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct StepView {
    /// Index into the timeline's steps.
    pub step: usize,
    /// Step label.
    pub name: String,
    /// Why this step: `the median of 5 steps by wall time`.
    pub why: String,
    /// Start of the view (the earlier of the step's host and GPU start), ns.
    pub start_ns: i64,
    /// Length of the view, ns.
    pub dur_ns: i64,
    /// Lanes: host threads, syncs, GPU streams, idle.
    pub lanes: Vec<Lane>,
}

/// The step whose wall time is the median's, as lanes; `None` without steps.
pub fn representative(p: &Profile, t: &Timeline) -> Option<StepView> {
    let mut order: Vec<usize> = (0..t.steps.len().min(p.steps.len())).collect();
    order.sort_by_key(|&i| (t.steps[i].dur_ns, i));
    let si = *order.get(order.len().checked_sub(1)? / 2)?;
    let s = &p.steps[si];
    let host_end = p
        .steps
        .get(si + 1)
        .map_or(s.cpu_end_ns, |n| n.host_start_ns);
    let lo = s.start_ns.min(s.host_start_ns);
    let hi = s.end_ns.max(s.cpu_end_ns).max(lo + 1);
    let px = ((hi - lo) / RESOLUTION).max(1);
    let mut raw = host_lanes(p, s.host_start_ns, host_end, lo);
    raw.push(sync_lane(p, t, si, lo));
    raw.extend(stream_lanes(p, s.start_ns, s.end_ns, lo));
    raw.push(idle_lane(p, t, s.start_ns, s.end_ns, lo));
    let mut lanes: Vec<Lane> = raw
        .into_iter()
        .map(|l| Lane {
            label: l.label,
            kind: l.kind,
            spans: merge_small(l.bars, px),
        })
        .collect();
    lanes.retain(|l| !l.spans.is_empty() || l.kind == LaneKind::Idle);
    Some(StepView {
        step: si,
        name: s.name.clone(),
        why: if t.steps.len() == 1 {
            "the only step".to_string()
        } else {
            format!("the median of {} steps by wall time", t.steps.len())
        },
        start_ns: lo,
        dur_ns: hi - lo,
        lanes,
    })
}

/// A span before merging, its name borrowed from the model where it can be (a step
/// holds up to millions of them, of which a lane keeps [`MAX_SPANS`]).
struct Bar<'a> {
    start_ns: i64,
    dur_ns: i64,
    kind: SpanKind,
    name: Cow<'a, str>,
    merged: u32,
}

/// A lane before merging.
struct RawLane<'a> {
    label: String,
    kind: LaneKind,
    bars: Vec<Bar<'a>>,
}

fn bar<'a>(
    start: i64,
    end: i64,
    lo: i64,
    kind: SpanKind,
    name: impl Into<Cow<'a, str>>,
) -> Bar<'a> {
    Bar {
        start_ns: start - lo,
        dur_ns: (end - start).max(0),
        kind,
        name: name.into(),
        merged: 1,
    }
}

/// Each host thread's outermost ops that start in `[from, to)`.
fn host_lanes(p: &Profile, from: i64, to: i64, lo: i64) -> Vec<RawLane<'_>> {
    let mut lanes: Vec<((i64, i64), RawLane<'_>)> = Vec::new();
    for o in &p.ops {
        if o.kind != OpKind::Op || o.ts_ns < from || o.ts_ns >= to {
            continue;
        }
        let outermost = o
            .parent
            .is_none_or(|par| p.ops[par as usize].kind == OpKind::Annotation);
        if !outermost {
            continue;
        }
        let key = (o.pid, o.tid);
        let at = match lanes.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                // Kineto names threads `thread 930 (python)`: say it once.
                let label = match p
                    .threads
                    .iter()
                    .find(|t| (t.pid, t.tid) == key && !t.name.is_empty())
                {
                    Some(t) if t.name.starts_with("thread ") => t.name.clone(),
                    Some(t) => format!("thread {} ({})", o.tid, t.name),
                    None => format!("thread {}", o.tid),
                };
                let lane = RawLane {
                    label,
                    kind: LaneKind::Host,
                    bars: Vec::new(),
                };
                lanes.push((key, lane));
                lanes.len() - 1
            }
        };
        let sp = bar(o.ts_ns, o.end_ns(), lo, SpanKind::Op, &*o.name);
        lanes[at].1.bars.push(sp);
    }
    lanes.sort_by_key(|(k, _)| *k);
    let mut out: Vec<RawLane<'_>> = lanes.into_iter().map(|(_, l)| l).collect();
    for l in &mut out {
        l.bars.sort_by_key(|s| s.start_ns);
    }
    out
}

/// The step's host-blocking syncs (the timeline's), on one lane.
fn sync_lane<'a>(p: &'a Profile, t: &Timeline, si: usize, lo: i64) -> RawLane<'a> {
    let spans = t
        .syncs
        .iter()
        .filter(|sp| sp.step == si)
        .map(|sp| {
            let r = &p.runtime[sp.runtime as usize];
            let name: Cow<'a, str> = match sp.op {
                Some(op) => format!("{} in {}", r.name, p.ops[op as usize].name).into(),
                None => (*r.name).into(),
            };
            bar(sp.ts_ns, sp.ts_ns + sp.dur_ns, lo, SpanKind::Sync, name)
        })
        .collect();
    RawLane {
        label: "host syncs".into(),
        kind: LaneKind::Syncs,
        bars: spans,
    }
}

/// One lane per (device, stream) with the GPU work that starts in `[from, to)`.
fn stream_lanes(p: &Profile, from: i64, to: i64, lo: i64) -> Vec<RawLane<'_>> {
    let a = p.gpu.partition_point(|g| g.ts_ns < from);
    let b = p.gpu.partition_point(|g| g.ts_ns < to);
    let mut lanes: Vec<((i64, i64), RawLane<'_>)> = Vec::new();
    for g in &p.gpu[a..b] {
        let key = (g.device, g.stream);
        let at = match lanes.iter().position(|(k, _)| *k == key) {
            Some(i) => i,
            None => {
                let lane = RawLane {
                    label: format!("GPU {} stream {}", g.device, g.stream),
                    kind: LaneKind::Stream,
                    bars: Vec::new(),
                };
                lanes.push((key, lane));
                lanes.len() - 1
            }
        };
        let kind = match g.kind {
            GpuKind::Kernel => SpanKind::Kernel,
            GpuKind::Memset => SpanKind::Memset,
            GpuKind::Memcpy { dir, .. } => match dir {
                CopyDir::HtoD => SpanKind::CopyH2d,
                CopyDir::DtoH => SpanKind::CopyD2h,
                _ => SpanKind::CopyD2d,
            },
        };
        let sp = bar(g.ts_ns, g.end_ns(), lo, kind, &*g.name);
        lanes[at].1.bars.push(sp);
    }
    lanes.sort_by_key(|(k, _)| *k);
    lanes.into_iter().map(|(_, l)| l).collect()
}

/// The timeline's idle gaps inside `[from, to)`, each coloured by its cause: a sync's
/// drain, else the larger of the host's memcpy and DataLoader time in it, else the CPU.
fn idle_lane(p: &Profile, t: &Timeline, from: i64, to: i64, lo: i64) -> RawLane<'static> {
    let memcpy: Vec<(i64, i64)> = p
        .runtime
        .iter()
        .filter(|r| r.kind == RuntimeKind::Memcpy)
        .map(|r| (r.ts_ns, r.end_ns()))
        .collect();
    let dl = super::timeline::data_loader_ranges(p);
    let first = t.idle_gaps.partition_point(|g| g.0 < from);
    let mut spans = Vec::new();
    for (k, &(g0, g1)) in t.idle_gaps.iter().enumerate().skip(first) {
        if g0 >= to {
            break;
        }
        let kind = if t.sync_drained.get(k).copied().unwrap_or(false) {
            SpanKind::IdleSync
        } else {
            let total = g1 - g0;
            let tr = overlap(&memcpy, g0, g1);
            let dl = overlap(&dl, g0, g1).min(total - tr);
            let cpu = total - tr - dl;
            if tr > cpu.max(dl) {
                SpanKind::IdleTransfer
            } else if dl > cpu {
                SpanKind::IdleDataLoader
            } else {
                SpanKind::IdleCpu
            }
        };
        spans.push(bar(g0, g1, lo, kind, "GPU idle"));
    }
    RawLane {
        label: "GPU idle".into(),
        kind: LaneKind::Idle,
        bars: spans,
    }
}

/// Merge runs of spans of one kind shorter than `px` that are less than `px` apart; then
/// keep the [`MAX_SPANS`] longest.
fn merge_small(spans: Vec<Bar<'_>>, px: i64) -> Vec<Span> {
    let mut out: Vec<Bar<'_>> = Vec::with_capacity(spans.len());
    for s in spans {
        if let Some(last) = out.last_mut() {
            let end = last.start_ns + last.dur_ns;
            let small = s.dur_ns < px && (last.dur_ns < px || last.merged > 1);
            if small && last.kind == s.kind && s.start_ns - end < px {
                last.merged += 1;
                last.dur_ns = (s.start_ns + s.dur_ns).max(end) - last.start_ns;
                continue;
            }
        }
        out.push(s);
    }
    if out.len() > MAX_SPANS {
        out.sort_by_key(|s| std::cmp::Reverse(s.dur_ns));
        out.truncate(MAX_SPANS);
        out.sort_by_key(|s| s.start_ns);
    }
    // A merged span is named for its count, once it is known.
    out.into_iter()
        .map(|s| Span {
            start_ns: s.start_ns,
            dur_ns: s.dur_ns,
            kind: s.kind,
            name: if s.merged > 1 {
                format!("{} {}", s.merged, plural(s.kind))
            } else {
                s.name.into_owned()
            },
            merged: s.merged,
        })
        .collect()
}

fn plural(k: SpanKind) -> &'static str {
    match k {
        SpanKind::Op => "ops",
        SpanKind::Sync => "syncs",
        SpanKind::Kernel => "kernels",
        SpanKind::CopyH2d | SpanKind::CopyD2h | SpanKind::CopyD2d => "copies",
        SpanKind::Memset => "memsets",
        _ => "idle gaps",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sp(start: i64, dur: i64) -> Bar<'static> {
        bar(start, start + dur, 0, SpanKind::Kernel, "k")
    }

    #[test]
    fn merge_small_joins_runs_of_tiny_spans_only() {
        let v = vec![sp(0, 1), sp(2, 1), sp(4, 1), sp(10, 50), sp(70, 1)];
        let m = merge_small(v, 5);
        assert_eq!(m.len(), 3);
        assert_eq!((m[0].start_ns, m[0].dur_ns, m[0].merged), (0, 5, 3));
        assert_eq!(m[0].name, "3 kernels");
        assert_eq!(m[1].dur_ns, 50);
        assert_eq!(m[2].start_ns, 70);
    }
}
