//! The detail step, carried over to the timed steps.
//!
//! `tensight run` records its timed steps lean (no Python stacks, shapes or allocator
//! events: their per-op cost would slow a busy host and distort every timing) and one
//! more step, the detail step, with everything on. A training loop does the same work
//! in every step, so the detail step says what the timed steps did: this pass aligns
//! each timed step's ops with the detail step's (by name, in order, on the thread that
//! ran the steps) and, where at least [`MIN_MATCH`] of them align, gives the timed ops
//! the shapes, dtypes and strides of their partners, and copies the detail step's
//! Python frames and allocator events into the timed step, their times mapped through
//! the aligned ops (piecewise linear between the ops' starts and ends: a frame between
//! two ops of the detail step lies between the same two ops of the timed step).
//!
//! Output: more frames and memory events (frames nested and ops attached anew), and a
//! [`DetailInfo`] saying what was carried over. A timed step whose ops do not align
//! (data-dependent control flow) gets nothing, and the report says how many did.

use super::{build, OpKind, Profile, PyFrame};
use serde::Serialize;
use std::collections::BTreeMap;

/// Share of a step's ops that must align with the detail step's.
pub const MIN_MATCH: f64 = 0.8;
/// How far ahead the alignment looks for a name that does not match.
const LOOKAHEAD: usize = 32;

/// What the detail step gave the timed steps.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct DetailInfo {
    /// The detail step's label (`ProfilerStep#6`).
    pub step: String,
    /// Timed steps that aligned and got its details.
    pub steps_carried: usize,
    /// Timed steps.
    pub steps: usize,
    /// Ops of the aligned steps matched to a detail op, % (mean over those steps).
    pub ops_matched_pct: f64,
    /// Frames copied in (all steps).
    pub frames: usize,
    /// Ops given shapes.
    pub shapes: usize,
    /// Allocator events copied in.
    pub memory_events: usize,
}

/// Carry the detail step `step` (a `ProfilerStep#k` annotation left out of
/// `p.steps`) over to `p.steps`.
pub fn carry_over(p: &mut Profile, step: &str) -> Option<DetailInfo> {
    let d = p
        .ops
        .iter()
        .position(|o| o.kind == OpKind::Annotation && &*o.name == step)?;
    let (pid, tid, d_start, d_end) = {
        let o = &p.ops[d];
        (o.pid, o.tid, o.ts_ns, o.end_ns())
    };
    let thread: Vec<usize> = (0..p.ops.len())
        .filter(|&i| p.ops[i].pid == pid && p.ops[i].tid == tid && i != d)
        .collect();
    let within = |a: i64, b: i64| -> Vec<usize> {
        thread
            .iter()
            .copied()
            .filter(|&i| p.ops[i].ts_ns >= a && p.ops[i].ts_ns < b)
            .filter(|&i| !p.ops[i].name.starts_with("ProfilerStep#"))
            .collect()
    };
    let d_ops = within(d_start, d_end);
    if d_ops.is_empty() {
        return None;
    }
    let d_frames: Vec<PyFrame> = p
        .python_frames
        .iter()
        .filter(|f| f.pid == pid && f.tid == tid && f.ts_ns < d_end && f.end_ns() > d_start)
        .cloned()
        .collect();
    let d_memory: Vec<_> = p
        .memory
        .iter()
        .filter(|m| m.ts_ns >= d_start && m.ts_ns < d_end)
        .cloned()
        .collect();
    let mut info = DetailInfo {
        step: step.to_string(),
        steps_carried: 0,
        steps: p.steps.len(),
        ops_matched_pct: 0.0,
        frames: 0,
        shapes: 0,
        memory_events: 0,
    };
    let mut matched_pct_sum = 0.0;
    let mut new_frames = Vec::new();
    let mut new_memory = Vec::new();
    let steps: Vec<(i64, i64, Vec<usize>)> = p
        .steps
        .iter()
        .map(|s| {
            let end = s.cpu_end_ns.max(s.host_start_ns + 1);
            (s.host_start_ns, end, within(s.host_start_ns, end))
        })
        .collect();
    // The other threads of the process that ran ops in the detail step (autograd's
    // backward threads): their ops are aligned per thread, for shapes alone.
    let mut others: BTreeMap<i64, Vec<usize>> = BTreeMap::new();
    for (i, o) in p.ops.iter().enumerate() {
        if o.pid == pid && o.tid != tid && o.kind != OpKind::Annotation {
            others.entry(o.tid).or_default().push(i);
        }
    }
    others.retain(|_, ops| {
        ops.iter()
            .any(|&i| p.ops[i].ts_ns >= d_start && p.ops[i].ts_ns < d_end)
    });
    for (s_start, s_end, s_ops) in steps {
        let pairs = align(p, &s_ops, &d_ops);
        let share = pairs.len() as f64 / s_ops.len().max(d_ops.len()) as f64;
        if share < MIN_MATCH {
            continue;
        }
        info.steps_carried += 1;
        matched_pct_sum += 100.0 * share;
        info.shapes += give_shapes(p, &pairs);
        for ops in others.values() {
            let on = |a: i64, b: i64| -> Vec<usize> {
                ops.iter()
                    .copied()
                    .filter(|&i| p.ops[i].ts_ns >= a && p.ops[i].ts_ns < b)
                    .collect()
            };
            let (t_ops, t_d_ops) = (on(s_start, s_end), on(d_start, d_end));
            let pairs = align(p, &t_ops, &t_d_ops);
            if pairs.len() as f64 >= MIN_MATCH * t_ops.len().max(t_d_ops.len()) as f64 {
                info.shapes += give_shapes(p, &pairs);
            }
        }
        let map = TimeMap::new(p, &pairs, (d_start, d_end), (s_start, s_end));
        for f in &d_frames {
            let a = map.at(f.ts_ns.max(d_start));
            let b = map.at(f.end_ns().min(d_end)).max(a);
            new_frames.push(PyFrame {
                ts_ns: a,
                dur_ns: b - a,
                parent: None,
                depth: 0,
                ..f.clone()
            });
        }
        for m in &d_memory {
            let mut m = m.clone();
            m.ts_ns = map.at(m.ts_ns);
            new_memory.push(m);
        }
    }
    if info.steps_carried == 0 {
        return Some(info);
    }
    info.ops_matched_pct = matched_pct_sum / info.steps_carried as f64;
    info.frames = new_frames.len();
    info.memory_events = new_memory.len();
    p.python_frames.extend(new_frames);
    p.memory.extend(new_memory);
    build::refinish_frames(p);
    Some(info)
}

/// Give each timed op of `pairs` the shapes, dtypes, strides and scalars of its detail
/// partner where it lacks them; how many got them.
fn give_shapes(p: &mut Profile, pairs: &[(usize, usize)]) -> usize {
    let mut n = 0;
    for &(si, di) in pairs {
        if p.ops[si].input_dims.is_none() && p.ops[di].input_dims.is_some() {
            let (dims, types, strides, scalars) = {
                let o = &p.ops[di];
                (
                    o.input_dims.clone(),
                    o.input_types.clone(),
                    o.input_strides.clone(),
                    o.concrete_inputs.clone(),
                )
            };
            let t = &mut p.ops[si];
            t.input_dims = dims;
            t.input_types = t.input_types.take().or(types);
            t.input_strides = t.input_strides.take().or(strides);
            t.concrete_inputs = t.concrete_inputs.take().or(scalars);
            n += 1;
        }
    }
    n
}

/// Pairs (timed op, detail op) of the same name, in order: a greedy walk that, on a
/// mismatch, skips ahead on the side where the other's name comes back soonest.
fn align(p: &Profile, s: &[usize], d: &[usize]) -> Vec<(usize, usize)> {
    let name = |i: usize| &*p.ops[i].name;
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(s.len().min(d.len()));
    while i < s.len() && j < d.len() {
        if name(s[i]) == name(d[j]) {
            out.push((s[i], d[j]));
            i += 1;
            j += 1;
            continue;
        }
        let in_d = (1..LOOKAHEAD).find(|&k| j + k < d.len() && name(d[j + k]) == name(s[i]));
        let in_s = (1..LOOKAHEAD).find(|&k| i + k < s.len() && name(s[i + k]) == name(d[j]));
        match (in_d, in_s) {
            (Some(a), Some(b)) if a <= b => j += a,
            (Some(a), None) => j += a,
            (_, Some(b)) => i += b,
            (None, None) => {
                i += 1;
                j += 1;
            }
        }
    }
    out
}

/// Detail-step time → timed-step time, through the aligned ops' starts and ends.
struct TimeMap {
    /// (detail ns, timed ns), both increasing.
    anchors: Vec<(i64, i64)>,
}

impl TimeMap {
    fn new(p: &Profile, pairs: &[(usize, usize)], d: (i64, i64), s: (i64, i64)) -> TimeMap {
        let mut pts: Vec<(i64, i64)> = Vec::with_capacity(2 * pairs.len() + 2);
        pts.push((d.0, s.0));
        for &(si, di) in pairs {
            let (a, b) = (&p.ops[si], &p.ops[di]);
            pts.push((b.ts_ns, a.ts_ns));
            pts.push((b.end_ns(), a.end_ns()));
        }
        pts.push((d.1, s.1));
        pts.sort_unstable();
        let mut anchors: Vec<(i64, i64)> = Vec::with_capacity(pts.len());
        for (dt, st) in pts {
            match anchors.last() {
                Some(&(ld, ls)) if dt <= ld || st < ls => {}
                _ => anchors.push((dt, st)),
            }
        }
        TimeMap { anchors }
    }

    fn at(&self, t: i64) -> i64 {
        let a = &self.anchors;
        let k = a.partition_point(|x| x.0 <= t);
        match (k.checked_sub(1).and_then(|i| a.get(i)), a.get(k)) {
            (Some(&(d0, s0)), Some(&(d1, s1))) => {
                s0 + ((t - d0) as i128 * (s1 - s0) as i128 / (d1 - d0).max(1) as i128) as i64
            }
            (Some(&(d0, s0)), None) => s0 + (t - d0),
            (None, Some(&(d1, s1))) => s1 - (d1 - t),
            (None, None) => t,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::testing::TraceBuilder;

    #[test]
    fn the_detail_step_gives_the_timed_steps_its_frames_and_shapes() {
        let mut b = TraceBuilder::new();
        // Two lean timed steps of mm → relu, then the detail step (slower: the profiler's
        // per-op cost) with a frame and shapes.
        for (k, t) in [(1, 0.0), (2, 100.0)] {
            b.step(k, t, 90.0);
            let o = b.op("aten::mm", t + 10.0, 20.0);
            b.kernel("gemm", o, t + 12.0, t + 15.0, 30.0, [1, 1, 1], [128, 1, 1]);
            b.op("aten::relu", t + 40.0, 10.0);
        }
        b.step(3, 300.0, 200.0);
        b.frame("train.py(7): step", 305.0, 190.0);
        b.op_with(
            "aten::mm",
            320.0,
            60.0,
            serde_json::json!({"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"]}),
        );
        b.op("aten::relu", 400.0, 30.0);
        let mut loaded = crate::read::load_bytes("t", &b.build()).unwrap();
        let p = &mut loaded.profile;
        p.steps.retain(|s| s.name != "ProfilerStep#3");
        let info = super::carry_over(p, "ProfilerStep#3").unwrap();
        assert_eq!((info.steps_carried, info.steps, info.shapes), (2, 2, 2));
        assert_eq!(info.ops_matched_pct, 100.0);
        // The timed mms now have shapes and sit in the frame, mapped into their steps.
        let timed: Vec<usize> = (0..p.ops.len())
            .filter(|&i| &*p.ops[i].name == "aten::mm" && p.ops[i].dur_ns == 20_000)
            .collect();
        assert_eq!(timed.len(), 2);
        for mm in timed {
            assert!(p.ops[mm].input_dims.is_some());
            let frame = p.user_frame(mm as u32).map(|f| f.name.to_string());
            assert_eq!(frame.as_deref(), Some("train.py(7): step"));
        }
        let frames: Vec<_> = p
            .python_frames
            .iter()
            .filter(|f| &*f.name == "train.py(7): step")
            .collect();
        assert_eq!(frames.len(), 3); // the detail step's own and one per timed step
                                     // Mapped through the ops: it starts before the mm (at 10 µs into step 1) and ends
                                     // after the relu (at 50 µs).
        let first = frames.iter().min_by_key(|f| f.ts_ns).unwrap();
        let step1 = p.steps[0].host_start_ns;
        assert!(first.ts_ns - step1 < 10_000 && first.end_ns() - step1 > 50_000);
    }

    #[test]
    fn backward_ops_on_autograd_threads_get_the_detail_steps_shapes() {
        // The step's backward runs on another thread (autograd's device thread): its
        // ops are aligned on that thread, so a timed convolution_backward gets shapes.
        let dims = serde_json::json!({
            "Input Dims": [[8, 64, 32, 32], [8, 64, 32, 32], [64, 64, 3, 3]],
            "Input type": ["float", "float", "float"],
        });
        let mut b = TraceBuilder::new();
        for (k, t) in [(1, 0.0), (2, 100.0)] {
            b.step(k, t, 90.0);
            b.op("aten::conv2d", t + 10.0, 20.0);
            b.op_on(
                2,
                "aten::convolution_backward",
                t + 40.0,
                30.0,
                serde_json::json!({}),
            );
        }
        b.step(3, 300.0, 200.0);
        b.op_with("aten::conv2d", 320.0, 40.0, dims.clone());
        b.op_on(2, "aten::convolution_backward", 380.0, 60.0, dims);
        let mut loaded = crate::read::load_bytes("t", &b.build()).unwrap();
        let p = &mut loaded.profile;
        p.steps.retain(|s| s.name != "ProfilerStep#3");
        let info = super::carry_over(p, "ProfilerStep#3").unwrap();
        assert_eq!(info.shapes, 4, "{info:?}");
        let timed_bwd = p
            .ops
            .iter()
            .filter(|o| &*o.name == "aten::convolution_backward" && o.dur_ns == 30_000);
        assert!(
            timed_bwd.clone().count() == 2 && timed_bwd.clone().all(|o| o.input_dims.is_some())
        );
    }
}
